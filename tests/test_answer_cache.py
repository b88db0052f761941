"""The semantic answer cache in SQL (incremental/020, idempotent/053), as the ``authenticated``
role with JWT claims: a paraphrase hits, another question misses, changed or deleted sources
invalidate, the bound evicts the least recently used, and no tenant ever sees another's."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.tenancy import Loaded, claims_for, request

from pgrag.db import connect

SETTINGS = {"chat_model": "tiny", "mode": "hybrid"}
QUESTION = "What is the Acme vacation policy?"
PARAPHRASE = "What's Acme's vacation policy?"
OTHER = "How are Acme expense reports filed?"


@pytest.fixture
def embed(local_embedder: Any) -> Any:
    def vector(text: str) -> np.ndarray:
        return np.asarray(local_embedder.embed([text])[0], dtype=np.float32)

    return vector


def sources(chunk_ids: list[int]) -> str:
    return json.dumps([{"source": 1, "label": "[Source 1]", "chunk_ids": chunk_ids}])


def store(
    db: str,
    tenant: str,
    question: str,
    vector: np.ndarray,
    chunk_ids: list[int],
    answer: str = "Thirty days [Source 1].",
    settings: dict[str, Any] = SETTINGS,
) -> int | None:
    with request(db, "authenticated", claims_for(tenant)) as conn:
        (entry,) = conn.execute(
            "select public.answer_cache_store(question => %s, question_embedding => %s, "
            "answer => %s, sources => %s, settings => %s)",
            (question, vector, answer, sources(chunk_ids), json.dumps(settings)),
        ).fetchone()  # type: ignore[misc]
    return entry  # type: ignore[no-any-return]


def lookup(
    db: str,
    tenant: str,
    vector: np.ndarray,
    min_similarity: float = 0.9,
    settings: dict[str, Any] = SETTINGS,
) -> dict[str, Any] | None:
    with (
        request(db, "authenticated", claims_for(tenant)) as conn,
        conn.cursor(row_factory=psycopg.rows.dict_row) as cur,
    ):
        return cur.execute(
            "select * from public.answer_cache_lookup(question_embedding => %s, "
            "settings => %s, min_similarity => %s)",
            (vector, json.dumps(settings), min_similarity),
        ).fetchone()


def counters(db: str, tenant: str) -> tuple[int, int, int]:
    with connect(db) as conn:
        row = conn.execute(
            "select lookups, hits, stale from pgrag.answer_cache_counters where tenant_id = %s",
            (tenant,),
        ).fetchone()
    return row if row else (0, 0, 0)  # type: ignore[return-value]


def entries(db: str) -> dict[str, int]:
    with connect(db) as conn:
        return dict(
            conn.execute("select tenant_id, count(*) from pgrag.answer_cache group by 1").fetchall()
        )


def test_a_paraphrase_within_the_similarity_returns_the_cached_answer(
    two_tenants: Loaded, embed: Any
) -> None:
    acme = two_tenants.chunks["acme"]
    assert store(two_tenants.db, "acme", QUESTION, embed(QUESTION), acme[:1])
    hit = lookup(two_tenants.db, "acme", embed(PARAPHRASE), 0.9)
    assert hit is not None
    assert hit["answer"] == "Thirty days [Source 1]." and hit["cached_question"] == QUESTION
    assert 0.9 <= hit["similarity"] < 1.0 and hit["hit_count"] == 1
    assert hit["sources"][0]["chunk_ids"] == acme[:1]
    assert counters(two_tenants.db, "acme") == (1, 1, 0)


def test_a_different_question_misses_and_counts_a_lookup(two_tenants: Loaded, embed: Any) -> None:
    store(two_tenants.db, "acme", QUESTION, embed(QUESTION), two_tenants.chunks["acme"][:1])
    assert lookup(two_tenants.db, "acme", embed(OTHER), 0.9) is None
    assert counters(two_tenants.db, "acme") == (1, 0, 0)


def test_an_answer_made_under_other_settings_is_not_returned(
    two_tenants: Loaded, embed: Any
) -> None:
    store(two_tenants.db, "acme", QUESTION, embed(QUESTION), two_tenants.chunks["acme"][:1])
    other = {**SETTINGS, "rerank": "cross-encoder"}
    assert lookup(two_tenants.db, "acme", embed(QUESTION), settings=other) is None
    # key order does not matter: the same settings as jsonb
    same = dict(reversed(list(SETTINGS.items())))
    assert lookup(two_tenants.db, "acme", embed(QUESTION), settings=same) is not None


def test_a_changed_source_invalidates_the_entry(two_tenants: Loaded, embed: Any) -> None:
    chunk = two_tenants.chunks["acme"][0]
    store(two_tenants.db, "acme", QUESTION, embed(QUESTION), [chunk])
    with connect(two_tenants.db) as conn:
        conn.execute(
            "update pgrag.chunks set content = 'Acme vacation policy: twenty days.' "
            "where tenant_id = 'acme' and id = %s",
            (chunk,),
        )
        conn.commit()
    assert lookup(two_tenants.db, "acme", embed(QUESTION)) is None
    assert entries(two_tenants.db) == {}
    assert counters(two_tenants.db, "acme") == (1, 0, 1)


def test_a_changed_document_hash_invalidates_the_entry(two_tenants: Loaded, embed: Any) -> None:
    store(two_tenants.db, "acme", QUESTION, embed(QUESTION), two_tenants.chunks["acme"][:1])
    with connect(two_tenants.db) as conn:
        conn.execute(
            "update pgrag.documents set content_sha256 = repeat('a', 64) where id = %s",
            (two_tenants.documents["acme"][0],),
        )
        conn.commit()
    assert lookup(two_tenants.db, "acme", embed(QUESTION)) is None


def test_a_deleted_document_invalidates_the_entry(two_tenants: Loaded, embed: Any) -> None:
    store(two_tenants.db, "acme", QUESTION, embed(QUESTION), two_tenants.chunks["acme"][:1])
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        conn.execute(
            "delete from pgrag.documents where id = %s", (two_tenants.documents["acme"][0],)
        )
    assert lookup(two_tenants.db, "acme", embed(QUESTION)) is None
    assert entries(two_tenants.db) == {}


def test_the_same_question_of_two_tenants_never_crosses(two_tenants: Loaded, embed: Any) -> None:
    vector = embed(QUESTION)
    store(two_tenants.db, "acme", QUESTION, vector, two_tenants.chunks["acme"][:1], "Acme: 30.")
    assert lookup(two_tenants.db, "globex", vector) is None
    with request(two_tenants.db, "authenticated", claims_for("globex")) as conn:
        assert conn.execute("select count(*) from pgrag.answer_cache").fetchone() == (0,)
    store(two_tenants.db, "globex", QUESTION, vector, two_tenants.chunks["globex"][:1], "Globex.")
    assert lookup(two_tenants.db, "globex", vector)["answer"] == "Globex."  # type: ignore[index]
    assert lookup(two_tenants.db, "acme", vector)["answer"] == "Acme: 30."  # type: ignore[index]
    assert counters(two_tenants.db, "globex") == (2, 1, 0)
    assert counters(two_tenants.db, "acme") == (1, 1, 0)


def test_another_tenants_chunks_cannot_be_cited(two_tenants: Loaded, embed: Any) -> None:
    # The fingerprint is computed as the caller: globex's chunks are not visible to acme.
    entry = store(two_tenants.db, "acme", QUESTION, embed(QUESTION), two_tenants.chunks["globex"])
    assert entry is None and entries(two_tenants.db) == {}


def test_the_bound_per_tenant_evicts_the_least_recently_used(
    two_tenants: Loaded, embed: Any
) -> None:
    with connect(two_tenants.db) as conn:
        conn.execute("update pgrag.settings set answer_cache_max_entries = 2")
        conn.commit()
    chunk = two_tenants.chunks["acme"][:1]
    questions = [QUESTION, OTHER, "How many shifts does the Acme widget factory run?"]
    store(two_tenants.db, "acme", questions[0], embed(questions[0]), chunk)
    store(two_tenants.db, "acme", questions[1], embed(questions[1]), chunk)
    store(two_tenants.db, "globex", QUESTION, embed(QUESTION), two_tenants.chunks["globex"][:1])
    assert lookup(two_tenants.db, "acme", embed(questions[0]), 0.99)  # used again: kept
    store(two_tenants.db, "acme", questions[2], embed(questions[2]), chunk)
    with connect(two_tenants.db) as conn:
        kept = {r[0] for r in conn.execute("select question from pgrag.answer_cache")}
    assert kept == {questions[0], questions[2], QUESTION}  # globex's own entry stays
    assert entries(two_tenants.db) == {"acme": 2, "globex": 1}


def test_a_bound_of_zero_stores_nothing(two_tenants: Loaded, embed: Any) -> None:
    with connect(two_tenants.db) as conn:
        conn.execute("update pgrag.settings set answer_cache_max_entries = 0")
        conn.commit()
    assert store(two_tenants.db, "acme", QUESTION, embed(QUESTION), [1]) is None


def test_without_a_tenant_nothing_is_read_stored_or_counted(
    two_tenants: Loaded, embed: Any
) -> None:
    with request(two_tenants.db, "service_role") as conn:
        (stored,) = conn.execute(
            "select public.answer_cache_store('q', %s, 'a', %s)",
            (embed(QUESTION), sources(two_tenants.chunks["acme"][:1])),
        ).fetchone()  # type: ignore[misc]
        found = conn.execute(
            "select * from public.answer_cache_lookup(%s)", (embed(QUESTION),)
        ).fetchall()
    assert stored is None and found == []
    with connect(two_tenants.db) as conn:
        assert conn.execute("select count(*) from pgrag.answer_cache_counters").fetchone() == (0,)


def test_anon_cannot_call_the_answer_cache(two_tenants: Loaded, embed: Any) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(two_tenants.db, "anon") as conn,
    ):
        conn.execute("select * from public.answer_cache_lookup(%s)", (embed(QUESTION),))


def test_a_direct_insert_of_another_model_is_refused(two_tenants: Loaded, embed: Any) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match="model must be the model"),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(
            "insert into pgrag.answer_cache (tenant_id, model, settings_key, question, "
            "question_embedding, answer, sources, chunk_ids, sources_fingerprint) values "
            "('acme', 'other', repeat('0', 64), 'q', %s, 'a', '[]', '{1}', repeat('0', 64))",
            (embed(QUESTION),),
        )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("select public.answer_cache_store(repeat('q', 10001), %(v)s, 'a', '[]')", "question"),
        ("select public.answer_cache_store('q', %(v)s, repeat('a', 100001), '[]')", "answer"),
        ("select public.answer_cache_store('', %(v)s, 'a', '[]')", "question must be given"),
        ("select public.answer_cache_store('q', null, 'a', '[]')", "question_embedding must"),
        ("select public.answer_cache_store('q', %(v)s, 'a', '{}')", "sources must be"),
        (
            "select public.answer_cache_store('q', %(v)s, 'a', jsonb_build_array("
            "jsonb_build_object('chunk_ids', (select jsonb_agg(i) from generate_series(1, 2001) "
            "as i))))",
            "chunk_ids of sources",
        ),
        ("select public.answer_cache_lookup(%(v)s, '{}', 1.5)", "min_similarity"),
        (
            "select public.answer_cache_lookup(%(v)s, jsonb_build_object('x', repeat('x', 10001)))",
            "settings",
        ),
        ("select public.answer_cache_lookup('[1,2,3]')", "dimensions"),
        ("select public.answer_cache_lookup(null)", "must not be null"),
    ],
)
def test_answer_cache_arguments_out_of_range_are_refused_with_22023(
    two_tenants: Loaded, embed: Any, call: str, message: str
) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(call, {"v": embed(QUESTION)})


def test_chunk_ids_that_cannot_be_chunks_are_ignored_not_an_error(
    two_tenants: Loaded, embed: Any
) -> None:
    odd = json.dumps([{"chunk_ids": [1e30, -5, "12", None, {"id": 1}]}, {"chunk_ids": "1"}, 7])
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (entry,) = conn.execute(
            "select public.answer_cache_store('q', %s, 'a', %s)", (embed(QUESTION), odd)
        ).fetchone()  # type: ignore[misc]
    assert entry is None and entries(two_tenants.db) == {}


def test_a_wide_installation_caches_3072_dimension_questions(
    empty_db: str, authenticator: str
) -> None:
    from pgrag.install.migrator import Migrator

    wide = 3072
    assert Migrator(empty_db).migrate(wide).dims == wide
    rng = np.random.default_rng(7)
    question = rng.standard_normal(wide).astype(np.float32)
    paraphrase = question + 0.05 * rng.standard_normal(wide).astype(np.float32)
    with connect(empty_db) as conn:
        conn.execute("update pgrag.embedding_config set model = 'wide-model', provider = 'openai'")
        (doc,) = conn.execute(
            "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status) "
            "values ('acme', 'Wide', 'text', 'wide.txt', 'ready') returning id"
        ).fetchone()  # type: ignore[misc]
        (chunk,) = conn.execute(
            "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding, "
            "content_sha256) values ('acme', %s, 0, 'Wide text.', %s, 'x') returning id",
            (doc, question),
        ).fetchone()  # type: ignore[misc]
        conn.commit()
    assert store(empty_db, "acme", QUESTION, question, [chunk])
    hit = lookup(empty_db, "acme", paraphrase, 0.9)
    assert hit is not None and hit["cached_question"] == QUESTION
    assert lookup(empty_db, "globex", paraphrase, 0.0) is None
