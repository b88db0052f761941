"""The keyword arm's pruned evaluation returns exactly what the full scan returns.

``pgrag.keyword_candidates`` skips the postings of a query's most frequent lexemes when the term
bounds kept in ``pgrag.bm25_lexicon`` prove that they cannot lift a chunk into the top k
(``pgrag.keyword_pruning``: auto, on, off). These tests run the SciFact claims against SciFact
abstracts with the pruning forced on and off and require the same rows and scores, and check that
the bounds stay bounds under every kind of write.

The data is in the repository (``tests/fixtures/scifact``: the first 400 abstracts and the
first 80 claims of BEIR SciFact), so a clone alone runs these tests. The pruned evaluation pays
off only over enough postings, so the 400 abstracts make 2,000 documents: each the first half
of one abstract's sentences and the second half of another's (real vocabulary, real lengths,
no two documents alike).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgrag.db import connect, set_request_tenant
from pgrag.testing import create_database, drop_database

SCIFACT = Path(__file__).resolve().parent / "fixtures" / "scifact"
TENANT = "scifact"
MIXES = 5  # documents made from each abstract (with 5 others' second halves)
# Exclusions and phrases (checked while walking the ranking) on top of the claims.
EXTRA_QUERIES = [
    "vitamin d deficiency -pregnancy",
    '"stem cells" transplantation rejection',
    "cancer cell growth -mice -mouse",
]


def mixed(docs: list[dict[str, str]]) -> list[str]:
    """``MIXES`` documents per abstract: its title and first half, another's second half."""
    halves = []
    for d in docs:
        sentences = re.split(r"(?<=\.) ", d["text"])
        cut = (len(sentences) + 1) // 2
        halves.append((f"{d['title']}. {' '.join(sentences[:cut])}", " ".join(sentences[cut:])))
    n = len(halves)
    return [
        f"{halves[i][0]} {halves[(i + 1 + 7 * m) % n][1]}".strip()
        for m in range(MIXES)
        for i in range(n)
    ]


def scifact_texts() -> tuple[list[str], list[str]]:
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as f:
        claims = [json.loads(line)["text"] for line in f]
    return mixed(docs), claims + EXTRA_QUERIES


@pytest.fixture(scope="module")
def scifact_db(pg_admin_dsn: str, template_db: str) -> Iterator[tuple[str, list[str]]]:
    """A database holding the fixture's SciFact abstracts as ready documents of one chunk each."""
    dsn = create_database(pg_admin_dsn, template=template_db)
    texts, queries = scifact_texts()
    with connect(dsn) as conn:
        conn.execute(
            "with d as (insert into pgrag.documents"
            " (tenant_id, title, source_type, source_uri, status)"
            " select %(t)s, 'abstract ' || n, 'text', 'scifact://' || n, 'ready'"
            " from generate_series(1, %(n)s) as n returning id, source_uri)"
            " insert into pgrag.chunks"
            " (tenant_id, document_id, chunk_index, content, content_sha256)"
            " select %(t)s, d.id, 0, x.text, md5(x.text)"
            " from d join unnest(%(texts)s::text[]) with ordinality as x(text, n)"
            " on d.source_uri = 'scifact://' || x.n",
            {"t": TENANT, "n": len(texts), "texts": texts},
        )
        conn.commit()
    yield dsn, queries
    drop_database(pg_admin_dsn, dsn)


def ranking(
    conn: psycopg.Connection[Any],
    query: str,
    pruning: str,
    k: int,
    tenant: str | None = TENANT,
    **options: float,
) -> tuple[list[tuple[int, float]], bool]:
    """keyword_search's (chunk_id, score) rows with pgrag.keyword_pruning set, as tenant (None:
    as the connecting user, without a tenant), and whether the pruned evaluation ran (its debug
    message)."""
    messages: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        messages.append(diagnostic.message_primary or "")

    conn.add_notice_handler(keep)
    try:
        with conn.transaction():
            if tenant is not None:
                set_request_tenant(conn, tenant)
            conn.execute("select set_config('pgrag.keyword_pruning', %s, true)", (pruning,))
            conn.execute("set local client_min_messages = debug1")
            named = "".join(f", {name} => %({name})s" for name in options)
            rows = conn.execute(
                f"select chunk_id, score from public.keyword_search(%(q)s, %(k)s{named})",
                {"q": query, "k": k, **options},
            ).fetchall()
    finally:
        conn.remove_notice_handler(keep)
    pruned = any("pruned evaluation" in m for m in messages)
    return [(r[0], float(r[1])) for r in rows], pruned


@pytest.mark.parametrize(
    ("k", "options"),
    [(10, {}), (40, {}), (40, {"k1": 0.9, "b": 0.4}), (100, {"k1": 1.2, "b": 1.0})],
)
def test_pruned_keyword_search_returns_what_the_full_scan_returns(
    scifact_db: tuple[str, list[str]], k: int, options: dict[str, float]
) -> None:
    dsn, queries = scifact_db
    pruned_queries = 0
    with connect(dsn) as conn:
        for query in queries:
            full, _ = ranking(conn, query, "off", k, **options)
            got, pruned = ranking(conn, query, "on", k, **options)
            assert got == full, query
            pruned_queries += pruned
    # The comparison means something only if many queries took the pruned path.
    assert pruned_queries >= len(queries) // 8, pruned_queries


def test_a_search_without_a_tenant_is_pruned_when_one_tenant_holds_every_chunk(
    scifact_db: tuple[str, list[str]],
) -> None:
    # A single-tenant installation searched from psql, as its owner: no tenant claim, and the
    # pruned evaluation still runs, with the tenant's own ranking.
    dsn, queries = scifact_db
    pruned_queries = 0
    with connect(dsn) as conn:
        for query in queries:
            full, _ = ranking(conn, query, "off", 10, tenant=None)
            got, pruned = ranking(conn, query, "on", 10, tenant=None)
            assert got == full == ranking(conn, query, "off", 10)[0], query
            pruned_queries += pruned
    assert pruned_queries >= len(queries) // 8, pruned_queries


def test_a_search_without_a_tenant_over_two_tenants_ranks_both_in_full(
    scifact_db: tuple[str, list[str]],
) -> None:
    # Term bounds are kept per tenant, and the pruned evaluation reads one tenant's postings:
    # over two tenants the full scan ranks both (here another tenant's copy of the best
    # abstract of the query ranks with the original).
    dsn, queries = scifact_db
    query = queries[0]
    with connect(dsn) as conn:
        (best, _), *_ = ranking(conn, query, "off", 10)[0]
        (copy,) = conn.execute(
            "with d as (insert into pgrag.documents (tenant_id, title, source_type, source_uri,"
            " status) values ('other', 'copy', 'text', 'copy://1', 'ready') returning id)"
            " insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
            " content_sha256) select 'other', d.id, 0, c.content, c.content_sha256"
            " from d, pgrag.chunks as c where c.id = %s returning id",
            (best,),
        ).fetchone() or (None,)
        conn.commit()
        try:
            got, pruned = ranking(conn, query, "on", 10, tenant=None)
            full, _ = ranking(conn, query, "off", 10, tenant=None)
        finally:
            conn.execute("delete from pgrag.documents where tenant_id = 'other'")
            conn.commit()
        # Once the other tenant's chunks are gone, the pruned evaluation runs again.
        after = ranking(conn, query, "on", 10, tenant=None)
    assert not pruned
    assert got == full
    assert {best, copy} <= {chunk_id for chunk_id, _ in got}
    assert after[1]


def hidden_ranking(
    conn: psycopg.Connection[Any], query: str, hide: int, k: int
) -> tuple[list[tuple[int, float]], list[tuple[int, float]], bool, list[int]]:
    """The full and the pruned ranking of ``query`` while the documents of the full ranking's
    ``hide`` best chunks are not ready; whether the pruned evaluation ran; the hidden chunks."""
    top, _ = ranking(conn, query, "off", max(k, hide))
    hidden = [chunk_id for chunk_id, _ in top[:hide]]
    try:
        conn.execute(
            "update pgrag.documents d set status = 'processing' from pgrag.chunks c"
            " where c.tenant_id = d.tenant_id and c.document_id = d.id and c.id = any(%s)",
            (hidden,),
        )
        conn.commit()
        full, _ = ranking(conn, query, "off", k)
        got, pruned = ranking(conn, query, "on", k)
    finally:
        conn.execute(
            "update pgrag.documents d set status = 'ready' from pgrag.chunks c"
            " where c.tenant_id = d.tenant_id and c.document_id = d.id and c.id = any(%s)",
            (hidden,),
        )
        conn.commit()
    return full, got, pruned, hidden


def test_pruned_search_walks_past_documents_that_are_not_ready(
    scifact_db: tuple[str, list[str]],
) -> None:
    dsn, queries = scifact_db
    with connect(dsn) as conn:
        # A query the pruned evaluation takes at k = 10.
        query = next(q for q in queries if ranking(conn, q, "on", 10)[1])
        full, got, pruned, hidden = hidden_ranking(conn, query, 5, 10)
    assert pruned
    assert got == full
    assert len(got) == 10 and not set(hidden) & {chunk_id for chunk_id, _ in got}


@pytest.mark.parametrize("hide", [5, 40])
@pytest.mark.parametrize("query", EXTRA_QUERIES)
def test_pruned_phrase_and_exclusion_queries_walk_past_documents_that_are_not_ready(
    scifact_db: tuple[str, list[str]], query: str, hide: int
) -> None:
    # Phrases and exclusions take the pruned path with every candidate above the proved cut;
    # hiding the best chunks makes the walk use more of them (5), or run past them into the
    # full ranking (40).
    dsn, _ = scifact_db
    with connect(dsn) as conn:
        full, got, pruned, hidden = hidden_ranking(conn, query, hide, 10)
    assert pruned
    assert got == full
    assert not set(hidden) & {chunk_id for chunk_id, _ in got}


def bounds_violations(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Lexemes whose kept term bounds do not bound their postings (largest tf, shortest chunk)."""
    return conn.execute(
        "select p.tenant_id, p.lexeme, max(p.tf), min(p.doc_len), x.max_tf, x.min_doc_len"
        " from pgrag.bm25_postings p"
        " left join (select tenant_id, lexeme, max(max_tf) as max_tf,"
        "            min(min_doc_len) as min_doc_len from pgrag.bm25_lexicon group by 1, 2) x"
        "   on x.tenant_id = p.tenant_id and x.lexeme = p.lexeme"
        " group by p.tenant_id, p.lexeme, x.max_tf, x.min_doc_len"
        " having x.max_tf is null or x.max_tf < max(p.tf) or x.min_doc_len > min(p.doc_len)"
    ).fetchall()


def test_term_bounds_bound_every_posting_after_inserts_updates_and_deletes(
    scifact_db: tuple[str, list[str]],
) -> None:
    dsn, _ = scifact_db
    with connect(dsn) as conn:
        assert bounds_violations(conn) == []
        # Exact after inserts alone: the largest tf and the shortest chunk themselves.
        loose = conn.execute(
            "select count(*) from (select p.lexeme from pgrag.bm25_postings p"
            " join (select lexeme, max(max_tf) m, min(min_doc_len) d from pgrag.bm25_lexicon"
            "       where tenant_id = %s group by 1) x on x.lexeme = p.lexeme"
            " where p.tenant_id = %s group by p.lexeme, x.m, x.d"
            " having x.m <> max(p.tf) or x.d <> min(p.doc_len)) s",
            (TENANT, TENANT),
        ).fetchone()
        assert loose == (0,)
        ids = [r[0] for r in conn.execute("select id from pgrag.chunks order by id limit 30")]
        with conn.transaction(force_rollback=True):
            # Longer text with repeated words (larger tf), a shorter chunk, a language change.
            conn.execute(
                "update pgrag.chunks set content = content || ' cell cell cell cell cell cell.'"
                " where id = any(%s)",
                (ids[:10],),
            )
            conn.execute(
                "update pgrag.chunks set content = 'Cell death.' where id = %s", (ids[10],)
            )
            conn.execute("update pgrag.chunks set language = 'simple' where id = %s", (ids[11],))
            conn.execute("delete from pgrag.chunks where id = any(%s)", (ids[20:30],))
            assert bounds_violations(conn) == []
