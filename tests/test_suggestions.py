"""Typo tolerance (public.suggest_query): words without postings corrected to the closest words
of the caller's own vocabulary, never another tenant's.

Connections are PostgREST-style requests (plugins.tenancy): the login role switching to anon or
authenticated with JWT claims, never the superuser.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.tenancy import Loaded, claims_for, request

from pgrag.db import connect

# A document of acme about search (globex has none): its words are acme's vocabulary only.
SEARCH_TEXT = [
    "Hybrid search fuses keyword and vector results into one ranking.",
    "Searching by keyword finds identifiers; vector search finds paraphrases.",
]


@pytest.fixture
def corpus(two_tenants: Loaded, local_embedder: Any) -> Loaded:
    with connect(two_tenants.db) as conn:
        (doc_id,) = conn.execute(
            "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status, "
            "chunk_count) values ('acme', 'acme/search.md', 'markdown', 'acme/search.md', "
            "'ready', 2) returning id"
        ).fetchone()
        for i, (text, emb) in enumerate(
            zip(SEARCH_TEXT, local_embedder.embed(SEARCH_TEXT), strict=True)
        ):
            conn.execute(
                "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
                "embedding, content_sha256, token_count) "
                "values ('acme', %s, %s, %s, %s, md5(%s), 10)",
                (doc_id, i, text, emb, text),
            )
        conn.commit()
    two_tenants.documents["acme"].append(doc_id)
    return two_tenants


def suggest(conn: psycopg.Connection[Any], query: str, **args: Any) -> tuple[str, list[Any]]:
    named = "".join(f", {k} := %({k})s" for k in args)
    row = conn.execute(
        f"select suggested_query, corrections from public.suggest_query(%(q)s{named})",
        {"q": query, **args},
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def hybrid_ids(conn: psycopg.Connection[Any], query: str, emb: Any) -> list[int]:
    return [
        r[0]
        for r in conn.execute("select chunk_id from public.hybrid_search(%s, %s, 10)", (query, emb))
    ]


def keyword_ids(conn: psycopg.Connection[Any], query: str) -> list[int]:
    rows = conn.execute("select chunk_id from public.keyword_search(%s, 10)", (query,))
    return [r[0] for r in rows]


def test_a_misspelt_query_is_corrected_and_finds_what_the_right_one_finds(
    corpus: Loaded, local_embedder: Any
) -> None:
    emb = np.asarray(local_embedder.embed(["hybrid search"])[0], dtype=np.float32)
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        suggested, corrections = suggest(conn, "hybird serch")
        assert suggested == "hybrid search"
        assert [(c["word"], c["suggestion"]) for c in corrections] == [
            ("hybird", "hybrid"),
            ("serch", "search"),
        ]
        assert all(0.2 <= c["similarity"] <= 1 and c["edits"] == 1 for c in corrections)
        assert keyword_ids(conn, "hybird serch") == []
        assert keyword_ids(conn, suggested) == keyword_ids(conn, "hybrid search") != []
        assert hybrid_ids(conn, suggested, emb) == hybrid_ids(conn, "hybrid search", emb)


def test_a_stemmed_word_is_suggested_as_a_word_of_the_text(corpus: Loaded) -> None:
    # "policy" is the lexeme "polici": the suggestion is the word the text uses.
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        suggested, corrections = suggest(conn, "vacaton polcy")
    assert suggested == "vacation policy"
    assert [c["suggestion"] for c in corrections] == ["vacation", "policy"]


def test_known_words_syntax_and_exclusions_are_kept(corpus: Loaded) -> None:
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        assert suggest(conn, "vacation policy") == ("vacation policy", [])
        suggested, corrections = suggest(conn, '"hybird search" OR vectr -keywrd ERR-4471')
    assert suggested == '"hybrid search" OR vector -keywrd ERR-4471'
    assert [c["word"] for c in corrections] == ["hybird", "vectr"]


def test_suggestions_never_use_another_tenants_words(corpus: Loaded) -> None:
    # "volcano" and "doomsday" are globex's words only; "hybrid" is acme's only.
    with request(corpus.db, "authenticated", claims_for("globex")) as conn:
        suggested, corrections = suggest(conn, "volcnao doomsdey")
        assert suggested == "volcano doomsday"
        assert [(c["word"], c["suggestion"]) for c in corrections] == [
            ("volcnao", "volcano"),
            ("doomsdey", "doomsday"),
        ]
        theirs, _ = suggest(conn, "hybird")
    assert theirs != "hybrid"
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        suggested, corrections = suggest(conn, "volcnao doomsdey")
    assert "volcano" not in suggested and "doomsday" not in suggested
    assert "volcano" not in json.dumps(corrections) and "doomsday" not in json.dumps(corrections)


@pytest.mark.parametrize(
    ("role", "claims"),
    [("anon", None), ("authenticated", {"role": "authenticated"})],
    ids=["anon", "no-tenant"],
)
def test_callers_without_a_tenant_get_no_suggestion(
    corpus: Loaded, role: str, claims: dict[str, Any] | None
) -> None:
    with request(corpus.db, role, claims) as conn:
        assert suggest(conn, "hybird volcnao") == ("hybird volcnao", [])


def test_suggestions_are_bounded_to_16_words_a_query(corpus: Loaded) -> None:
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        suggested, corrections = suggest(conn, " ".join(["hybird"] * 20))
    assert len(corrections) == 16
    assert suggested.split() == ["hybrid"] * 16 + ["hybird"] * 4


@pytest.mark.parametrize(
    "args",
    [
        {"min_similarity": 0.1},
        {"min_similarity": 1.5},
        {"min_similarity": float("nan")},
        {"language": "klingon"},
    ],
    ids=["low", "high", "nan", "language"],
)
def test_out_of_range_suggestion_arguments_fail_with_22023(
    corpus: Loaded, args: dict[str, Any]
) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue),
        request(corpus.db, "authenticated", claims_for("acme")) as conn,
    ):
        suggest(conn, "hybird", **args)


def test_a_query_longer_than_10000_characters_is_refused(corpus: Loaded) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue),
        request(corpus.db, "authenticated", claims_for("acme")) as conn,
    ):
        suggest(conn, "a" * 10_001)


def test_postgrest_rpc_suggests_as_supabase_js_sends_it(corpus: Loaded) -> None:
    # supabase.rpc('suggest_query', {query_text}): a JSON body, named arguments.
    body = json.dumps({"query_text": "hybird serch"})
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        rows = conn.execute(
            "with pgrst_args as (select * from json_to_record(%s::json) as _(query_text text)) "
            "select to_jsonb(pgrst_call) from public.suggest_query("
            '"query_text" := (select query_text from pgrst_args)) as pgrst_call',
            (body,),
        ).fetchall()
    assert [r[0]["suggested_query"] for r in rows] == ["hybrid search"]
    assert rows[0][0]["corrections"][0]["suggestion"] == "hybrid"


@pytest.mark.parametrize(
    ("a", "b", "edits"),
    [("hybird", "hybrid", 1), ("kitten", "sitting", 3), ("", "abc", 3), ("ca", "abc", 3),
     ("serch", "search", 1), ("same", "same", 0)],
)  # fmt: skip
def test_edit_distance_counts_a_swap_of_neighbours_as_one_edit(
    corpus: Loaded, a: str, b: str, edits: int
) -> None:
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        assert conn.execute("select pgrag.edit_distance(%s, %s)", (a, b)).fetchone() == (edits,)


def test_edit_distance_refuses_words_longer_than_64_letters(corpus: Loaded) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue),
        request(corpus.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute("select pgrag.edit_distance(%s, 'a')", ("a" * 65,))
