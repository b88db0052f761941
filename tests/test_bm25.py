"""BM25 in SQL against a reference implementation, and its statistics under writes.

The reference is bm25s (method 'lucene', float64) fed exactly the tokens Postgres indexed:
each chunk's lexemes repeated by their positions in ``chunks.fts``, and the query's lexemes
from ``pgrag.keyword_query`` (the websearch parser the SQL uses).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Iterator
from typing import Any

import bm25s
import numpy as np
import psycopg
import pytest

from pgrag.db import connect, set_request_tenant
from pgrag.install.migrator import Migrator

TENANT = "ref"
WORDS = [
    "protein",
    "cell",
    "cells",
    "membrane",
    "receptor",
    "signal",
    "signalling",
    "pathway",
    "kinase",
    "mutation",
    "gene",
    "genes",
    "expression",
    "tumour",
    "tumours",
    "cancer",
    "patient",
    "patients",
    "therapy",
    "trial",
    "dose",
    "response",
    "immune",
    "infection",
    "virus",
    "viral",
    "vaccine",
    "antibody",
    "blood",
    "pressure",
    "heart",
    "cardiac",
    "risk",
    "mortality",
    "cohort",
    "study",
    "studies",
    "analysis",
    "model",
    "mice",
    "mouse",
    "human",
    "tissue",
    "brain",
    "neuron",
    "neural",
    "memory",
    "sleep",
    "diet",
    "obesity",
    "insulin",
    "glucose",
    "diabetes",
    "liver",
    "kidney",
    "bone",
    "growth",
    "factor",
    "stem",
    "development",
]
FILLER = [
    "the",
    "of",
    "and",
    "in",
    "with",
    "to",
    "was",
    "were",
    "is",
    "that",
    "for",
    "by",
    "on",
    "a",
    "an",
    "as",
    "at",
    "from",
    "this",
]


def make_corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        length = rng.choice([6, 12, 25, 40, 80])
        vocab = rng.sample(WORDS, 12)
        words = [
            rng.choice(vocab) if rng.random() < 0.6 else rng.choice(FILLER) for _ in range(length)
        ]
        docs.append(" ".join(words).capitalize() + ".")
    return docs


QUERIES = [
    "protein kinase signalling in tumour cells",
    "vaccine antibody response",
    "insulin glucose diabetes obesity diet",
    "sleep memory brain",
    '"heart risk" or mortality -mice',
    "stem cell development growth factor",
    "gene",
]


def insert_corpus(
    conn: psycopg.Connection[Any], texts: list[str], tenant: str = TENANT
) -> list[int]:
    doc = conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
        " values (%s, 'bm25 corpus', 'text', %s, 'ready') returning id",
        (tenant, f"mem://{tenant}/{len(texts)}-{hashlib.md5(''.join(texts).encode()).hexdigest()}"),
    ).fetchone()
    assert doc
    start = conn.execute(
        "select coalesce(max(chunk_index) + 1, 0) from pgrag.chunks"
        " where tenant_id = %s and document_id = %s",
        (tenant, doc[0]),
    ).fetchone()
    assert start
    with conn.cursor() as cur:
        cur.executemany(
            "insert into pgrag.chunks"
            " (tenant_id, document_id, chunk_index, content, content_sha256)"
            " values (%s, %s, %s, %s, md5(%s))",
            [(tenant, doc[0], start[0] + i, t, t) for i, t in enumerate(texts)],
        )
    conn.commit()
    rows = conn.execute(
        "select id from pgrag.chunks where tenant_id = %s and document_id = %s"
        " order by chunk_index",
        (tenant, doc[0]),
    ).fetchall()
    return [r[0] for r in rows]


def indexed_tokens(conn: psycopg.Connection[Any], tenant: str = TENANT) -> dict[int, list[str]]:
    """Each chunk's tokens as Postgres indexed them (lexemes in position order)."""
    rows = conn.execute(
        "select c.id, l.lexeme, p from pgrag.chunks c"
        " left join lateral unnest(c.fts) l on true"
        " left join lateral unnest(l.positions) p on true"
        " where c.tenant_id = %s order by c.id, p",
        (tenant,),
    ).fetchall()
    tokens: dict[int, list[str]] = {}
    for chunk_id, lexeme, _ in rows:
        tokens.setdefault(chunk_id, [])
        if lexeme is not None:
            tokens[chunk_id].append(lexeme)
    return tokens


def reference_scores(
    tokens: dict[int, list[str]], query_lexemes: list[str], k1: float, b: float
) -> dict[int, float]:
    ids = sorted(tokens)
    retriever = bm25s.BM25(k1=k1, b=b, method="lucene", dtype="float64")
    retriever.index([tokens[i] for i in ids], show_progress=False)
    vocab = retriever.vocab_dict
    known = [q for q in query_lexemes if q in vocab]
    if not known:
        return {}
    scores = np.asarray(retriever.get_scores(known), dtype=np.float64)
    return {ids[n]: float(s) for n, s in enumerate(scores) if s > 0}


def sql_scores(
    conn: psycopg.Connection[Any], query: str, k1: float, b: float, tenant: str = TENANT
) -> tuple[list[tuple[int, float]], list[str], str | None, str | None]:
    with conn.transaction():
        set_request_tenant(conn, tenant)
        rows = conn.execute(
            "select chunk_id, score from public.keyword_search(%s, 100000, k1 => %s, b => %s)",
            (query, k1, b),
        ).fetchall()
        q = conn.execute(
            "select lexemes, positive::text, negative::text"
            " from pgrag.keyword_query(%s, 'english')",
            (query,),
        ).fetchone()
    assert q
    return [(r[0], float(r[1])) for r in rows], list(q[0]), q[1], q[2]


def allowed(conn: psycopg.Connection[Any], positive: str | None, negative: str | None) -> set[int]:
    """Chunks the websearch clauses admit (any positive clause, no negative one)."""
    rows = conn.execute(
        "select id from pgrag.chunks where tenant_id = %s"
        " and (%s::tsquery is null or fts @@ %s::tsquery)"
        " and (%s::tsquery is null or not fts @@ %s::tsquery)",
        (TENANT, positive, positive, negative, negative),
    ).fetchall()
    return {r[0] for r in rows}


def assert_matches_reference(
    conn: psycopg.Connection[Any], k1: float = 1.2, b: float = 0.75
) -> None:
    tokens = indexed_tokens(conn)
    for query in QUERIES:
        got, lexemes, positive, negative = sql_scores(conn, query, k1, b)
        ref = reference_scores(tokens, lexemes, k1, b)
        admitted = allowed(conn, positive, negative)
        expected = sorted(
            ((i, s) for i, s in ref.items() if i in admitted), key=lambda x: (-x[1], x[0])
        )
        assert got, query
        assert [i for i, _ in got] == [i for i, _ in expected], query
        assert np.allclose([s for _, s in got], [s for _, s in expected], rtol=0, atol=1e-6), query


@pytest.fixture
def corpus_ids(conn: psycopg.Connection[Any]) -> list[int]:
    ids = insert_corpus(conn, make_corpus(60, seed=7))
    # Another tenant's chunks must not change this tenant's statistics.
    insert_corpus(conn, make_corpus(30, seed=8), tenant="noise")
    return ids


def test_bm25_matches_reference_implementation(
    conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    assert_matches_reference(conn)


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.4), (1.2, 1.0)])
def test_bm25_parameters_match_reference(
    conn: psycopg.Connection[Any], corpus_ids: list[int], k1: float, b: float
) -> None:
    assert_matches_reference(conn, k1, b)


def expected_stats(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select tenant_id, language::text, count(*),"
        " coalesce(sum((select coalesce(sum(cardinality(u.positions)), 0) from unnest(fts) u)), 0)"
        " from pgrag.chunks group by 1, 2 having count(*) > 0 order by 1, 2"
    ).fetchall()


def kept_stats(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select tenant_id, language, sum(chunk_count), sum(token_count) from pgrag.corpus_stats"
        " group by 1, 2 having sum(chunk_count) <> 0 or sum(token_count) <> 0 order by 1, 2"
    ).fetchall()


def expected_postings(conn: psycopg.Connection[Any]) -> set[tuple[Any, ...]]:
    rows = conn.execute(
        "select c.tenant_id, l.lexeme, c.id, cardinality(l.positions),"
        " (select coalesce(sum(cardinality(u.positions)), 0) from unnest(c.fts) u)"
        " from pgrag.chunks c cross join lateral unnest(c.fts) l"
    ).fetchall()
    return set(rows)


def kept_postings(conn: psycopg.Connection[Any]) -> set[tuple[Any, ...]]:
    rows = conn.execute(
        "select tenant_id, lexeme, chunk_id, tf, doc_len from pgrag.bm25_postings"
    ).fetchall()
    return set(rows)


def expected_lexicon(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select c.tenant_id, l.lexeme, count(*) from pgrag.chunks c"
        " cross join lateral unnest(tsvector_to_array(c.fts)) l(lexeme) group by 1, 2 order by 1, 2"
    ).fetchall()


def kept_lexicon(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select tenant_id, lexeme, sum(df) from pgrag.bm25_lexicon"
        " group by 1, 2 having sum(df) <> 0 order by 1, 2"
    ).fetchall()


def test_statistics_stay_right_after_update_and_delete(
    conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    assert kept_stats(conn) == expected_stats(conn)
    # Update text of some chunks, the language of one, and a column BM25 ignores.
    conn.execute(
        "update pgrag.chunks set content = content || ' Cancer therapy trial cancer.'"
        " where id = any(%s)",
        (corpus_ids[:10],),
    )
    conn.execute("update pgrag.chunks set language = 'simple' where id = %s", (corpus_ids[10],))
    conn.execute("update pgrag.chunks set page = 3 where id = any(%s)", (corpus_ids[11:20],))
    # Delete single chunks, then a whole document of the other tenant (cascade).
    conn.execute("delete from pgrag.chunks where id = any(%s)", (corpus_ids[20:30],))
    conn.execute("delete from pgrag.documents where tenant_id = 'noise'")
    conn.commit()

    assert kept_stats(conn) == expected_stats(conn)
    assert kept_postings(conn) == expected_postings(conn)
    assert kept_lexicon(conn) == expected_lexicon(conn)
    assert_matches_reference(conn)


def test_concurrent_ingests_of_one_tenant_do_not_block(
    db: str, conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    # Two writers whose backends use different statistics shards (pid % 16).
    first = connect(db)
    shard = first.info.backend_pid % 16
    others = []
    second = connect(db)
    while second.info.backend_pid % 16 == shard:
        others.append(second)
        second = connect(db)
    try:
        doc = conn.execute(
            "select document_id from pgrag.chunks where id = %s", (corpus_ids[0],)
        ).fetchone()
        assert doc
        first.execute(
            "insert into pgrag.chunks"
            " (tenant_id, document_id, chunk_index, content, content_sha256)"
            " values (%s, %s, 1000, 'protein kinase', 'x')",
            (TENANT, doc[0]),
        )
        second.execute("set lock_timeout = '2s'")
        second.execute(
            "insert into pgrag.chunks"
            " (tenant_id, document_id, chunk_index, content, content_sha256)"
            " values (%s, %s, 1001, 'protein kinase', 'y')",
            (TENANT, doc[0]),
        )  # would raise LockNotAvailable if it waited for the first writer
        second.commit()
        first.commit()
    finally:
        for c in [first, second, *others]:
            c.close()
    assert kept_stats(conn) == expected_stats(conn)


def test_one_statement_of_more_than_a_batch_of_chunks_is_indexed_whole(
    conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    # The triggers hand rows to pgrag.bm25_apply 10,000 at a time.
    doc = conn.execute(
        "select document_id from pgrag.chunks where id = %s", (corpus_ids[0],)
    ).fetchone()
    assert doc
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256)"
        " select %s, %s, 1000 + i, 'bulk load ' || i || ' row', 'x'"
        " from generate_series(1, 10050) as i",
        (TENANT, doc[0]),
    )
    conn.execute("update pgrag.chunks set content = content || ' again' where chunk_index > 1000")
    conn.commit()
    assert kept_stats(conn) == expected_stats(conn)
    assert kept_lexicon(conn) == expected_lexicon(conn)
    assert kept_postings(conn) == expected_postings(conn)

    conn.execute("delete from pgrag.chunks where chunk_index > 1000")
    conn.commit()
    assert kept_stats(conn) == expected_stats(conn)
    assert kept_lexicon(conn) == expected_lexicon(conn)
    assert kept_postings(conn) == expected_postings(conn)


def test_a_bulk_update_after_a_one_row_update_is_planned_for_its_own_rows(
    conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    # The update trigger compares the statement's old and new rows to skip unchanged ones. A
    # plan made for a one-row update and kept for the session (a static statement in PL/pgSQL)
    # compared every old row with every new one on a bulk update: minutes for 20,000 rows.
    conn.execute("update pgrag.chunks set page = 1 where id = %s", (corpus_ids[0],))
    notices: list[str] = []
    conn.execute("load 'auto_explain'")
    conn.execute("set auto_explain.log_nested_statements = on")
    conn.execute("set auto_explain.log_level = notice")
    conn.execute("set auto_explain.log_format = json")
    conn.execute("set auto_explain.log_min_duration = 0")
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("update pgrag.chunks set page = 2 where tenant_id = %s", (TENANT,))
    conn.execute("set auto_explain.log_min_duration = -1")
    conn.commit()

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    checks = [
        n
        for notice in notices
        if "plan:" in notice
        for n in nodes(json.loads(notice.split("plan:", 1)[1])["Plan"])
        if n.get("Join Type") in ("Anti", "Right Anti")
    ]
    assert len(checks) == 2  # old rows against new ones, new against old
    assert all(n["Node Type"] == "Hash Join" for n in checks), checks
    assert kept_stats(conn) == expected_stats(conn)


def test_writers_on_one_shard_queue_instead_of_deadlocking(
    db: str, conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    # Two transactions on the same statistics shard, each replacing chunks (delete, then
    # insert): without a shard lock each would hold lexicon rows the other one needs.
    first = connect(db)
    spare = []
    second = connect(db)
    while second.info.backend_pid % 16 != first.info.backend_pid % 16:
        spare.append(second)
        second = connect(db)
    for c in spare:
        c.close()
    rows = conn.execute(
        "select id, document_id, content from pgrag.chunks where id = any(%s) order by id",
        (corpus_ids[:2],),
    ).fetchall()
    insert = (
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256)"
        " values (%s, %s, %s, %s, 'x')"
    )
    errors: list[BaseException] = []

    def replace_second() -> None:
        try:
            second.execute("delete from pgrag.chunks where id = %s", (rows[1][0],))
            second.execute(insert, (TENANT, rows[1][1], 2001, rows[1][2]))
            second.commit()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    try:
        first.execute("delete from pgrag.chunks where id = %s", (rows[0][0],))
        worker = threading.Thread(target=replace_second)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive(), "the second writer of the shard should wait for the first"
        # The words the second writer has just counted (and so holds, without the lock).
        first.execute(insert, (TENANT, rows[0][1], 2000, rows[1][2]))
        first.commit()
        worker.join(10)
        assert not worker.is_alive() and not errors
    finally:
        first.close()
        second.close()
    assert kept_stats(conn) == expected_stats(conn)
    assert kept_lexicon(conn) == expected_lexicon(conn)


def test_upgrading_to_the_lexicon_migration_backfills_document_frequencies(
    db: str, conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    # An install from before sql/incremental/004: chunks and postings, but no lexicon (nor
    # the term bounds 013 adds to it).
    conn.execute("drop table pgrag.bm25_lexicon")
    conn.execute(
        "delete from pgrag.schema_migrations"
        " where name in ('incremental/004-bm25-lexicon.sql',"
        " 'incremental/013-bm25-term-bounds.sql')"
        " or kind = 'idempotent'"
    )
    conn.commit()

    result = Migrator(db).migrate()

    assert "incremental/004-bm25-lexicon.sql" in result.applied
    assert "incremental/013-bm25-term-bounds.sql" in result.applied
    assert kept_lexicon(conn) == expected_lexicon(conn)
    # 013's backfill: each lexeme's largest tf and shortest chunk.
    assert conn.execute(
        "select count(*) from (select tenant_id, lexeme, max(tf) t, min(doc_len) d"
        " from pgrag.bm25_postings group by 1, 2) p"
        " join (select tenant_id, lexeme, max(max_tf) t, min(min_doc_len) d"
        " from pgrag.bm25_lexicon group by 1, 2) x using (tenant_id, lexeme)"
        " where (p.t, p.d) is distinct from (x.t, x.d)"
    ).fetchone() == (0,)
    assert_matches_reference(conn)


def test_keyword_search_is_scoped_to_the_callers_tenant_statistics(
    conn: psycopg.Connection[Any], corpus_ids: list[int]
) -> None:
    # Same text in another tenant: scores as TENANT are unchanged by it.
    before, *_ = sql_scores(conn, "protein kinase", 1.2, 0.75)
    insert_corpus(conn, ["protein kinase protein"] * 20, tenant="crowd")
    after, *_ = sql_scores(conn, "protein kinase", 1.2, 0.75)
    assert after == before
    crowd, *_ = sql_scores(conn, "protein kinase", 1.2, 0.75, tenant="crowd")
    assert len(crowd) == 20 and not {i for i, _ in crowd} & set(corpus_ids)


@pytest.fixture
def conn(db: str) -> Iterator[psycopg.Connection[Any]]:
    with connect(db) as connection:
        yield connection
