"""Bulk first loads (sql/idempotent/060-bulk-loading.sql): same search results as a row-by-row
load, rows kept out of the shared HNSW graph until the tenant's own graph is built, owner only.

The equality test loads the same SciFact abstracts (``../shared/data/scifact``, or
``$PGRAG_SHARED_DIR/data/scifact``) with real embeddings into two tenants, one through
``pgrag.replace_document_chunks`` and one through the bulk path, and compares the top-10 of
every search function over the SciFact test queries.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from plugins.tenancy import claims_for, request
from psycopg.types.json import Jsonb

from pgrag.db import connect, set_request_tenant
from pgrag.errors import LockWaitTooLong
from pgrag.ingest import ExtractedDocument, ingest_documents
from pgrag.ingest import load as load_module
from pgrag.ingest.load import create_stage_table, index_bulk_backlog

REPO = Path(__file__).resolve().parent.parent
SCIFACT = Path(os.environ.get("PGRAG_SHARED_DIR") or REPO.parent / "shared") / "data" / "scifact"
ABSTRACTS = 300
QUERIES = 60
EMBED_CHARS = 600

Corpus = tuple[list[tuple[str, str]], list[Any], list[str], list[Any]]


@pytest.fixture(scope="module")
def scifact(local_embedder: Any) -> Corpus:
    """(title, text) of the abstracts the first test queries judge, then others up to
    ABSTRACTS; their embeddings; the queries and theirs."""
    if not (SCIFACT / "corpus.jsonl").exists():
        pytest.skip(f"SciFact not found in {SCIFACT} (set PGRAG_SHARED_DIR)")
    queries = {
        (q := json.loads(line))["_id"]: q["text"] for line in (SCIFACT / "queries.jsonl").open()
    }
    qrels = [line.split("\t") for line in (SCIFACT / "qrels" / "test.tsv").open()][1:]
    qids = list(dict.fromkeys(q for q, _, _ in qrels))[:QUERIES]
    judged = {d for q, d, _ in qrels if q in qids}
    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open()]
    chosen = [d for d in docs if d["_id"] in judged]
    chosen += [d for d in docs if d["_id"] not in judged][: ABSTRACTS - len(chosen)]
    texts = [(d["title"], d["text"]) for d in chosen]
    vectors = local_embedder.embed([(t + ". " + b)[:EMBED_CHARS] for t, b in texts])
    qtexts = [queries[q] for q in qids]
    return texts, vectors, qtexts, local_embedder.embed(qtexts)


def load_tenant(dsn: str, tenant: str, corpus: Corpus, *, bulk: bool) -> None:
    """Stage the corpus (one chunk per abstract) and swap it in with one call."""
    texts, vectors, _, _ = corpus
    with connect(dsn) as conn:
        columns = create_stage_table(conn)  # (name, type oid): the row order below
        ids = [
            row[0]
            for row in conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
                " select %s, t, 'text', 'scifact:' || o, 'processing'"
                " from unnest(%s::text[]) with ordinality as u(t, o) order by o returning id",
                (tenant, [t for t, _ in texts]),
            ).fetchall()
        ]
        with (
            conn.cursor() as cur,
            cur.copy(
                "copy pgrag_stage ({}) from stdin (format binary)".format(
                    ", ".join(n for n, _ in columns)
                )
            ) as copy,
        ):
            copy.set_types([oid for _, oid in columns])
            for doc_id, (title, body), vector in zip(ids, texts, vectors, strict=True):
                content = f"{title}\n\n{body}"
                digest = hashlib.sha256(content.encode()).hexdigest()
                copy.write_row(
                    (doc_id, 0, content, vector, None, [], "english", 100, digest, 0, Jsonb({}))
                )
        function = "bulk_replace_document_chunks" if bulk else "replace_document_chunks"
        conn.execute(
            f"select pgrag.{function}('pg_temp.pgrag_stage'::regclass, %s, %s::int8[],"
            " %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int4[], 'm')",
            (
                tenant,
                ids,
                [t for t, _ in texts],
                ["text"] * len(ids),
                ["x"] * len(ids),
                [Jsonb({})] * len(ids),
                [1] * len(ids),
            ),
        )
        conn.commit()


def top10(dsn: str, tenant: str, corpus: Corpus, settings: str = "") -> list[list[Any]]:
    """Per query and function: the top 10 as (source_uri, chunk_index, rounded score)."""
    _, _, qtexts, qvecs = corpus
    calls = [
        ("select source_uri, chunk_index, score from public.hybrid_search(%s, %s, 10)", 2),
        ("select source_uri, chunk_index, score from public.keyword_search(%s, 10)", 1),
        ("select source_uri, chunk_index, similarity from public.vector_search(%s, 10)", 0),
    ]
    out = []
    with connect(dsn) as conn:
        for text, vector in zip(qtexts, qvecs, strict=True):
            for query, which in calls:
                with conn.transaction():
                    if settings:
                        conn.execute(settings)
                    set_request_tenant(conn, tenant)
                    args = {2: (text, vector), 1: (text,), 0: (vector,)}[which]
                    rows = conn.execute(query, args).fetchall()
                out.append([(u, i, round(s, 9)) for u, i, s in rows])
    return out


def up_to_ties(results: list[list[Any]]) -> list[tuple[list[float], set[Any]]]:
    """Each top 10 as its scores in order and the set of results above the last score (which
    results tie at the cut is not defined: no search breaks ties)."""
    return [([r[2] for r in rows], {r for r in rows if r[2] != rows[-1][2]}) for rows in results]


def graph_rows(dsn: str, tenant: str) -> dict[bool, int]:
    with connect(dsn) as conn:
        return dict(
            conn.execute(
                "select in_shared_graph, count(*) from pgrag.chunks where tenant_id = %s "
                "group by 1",
                (tenant,),
            ).fetchall()
        )


@pytest.fixture
def bulk_loaded(db: str, scifact: Corpus) -> Iterator[str]:
    """The corpus bulk-loaded into tenant 'bulk', the load not finished yet."""
    load_tenant(db, "bulk", scifact, bulk=True)
    yield db


def test_a_bulk_load_gives_the_same_top_10_as_a_row_by_row_load(
    bulk_loaded: str, scifact: Corpus
) -> None:
    db = bulk_loaded
    load_tenant(db, "rows", scifact, bulk=False)
    with connect(db) as conn:
        conn.execute("select pgrag.finish_bulk_load('bulk')")
        conn.commit()

    bulk, rows = top10(db, "bulk", scifact), top10(db, "rows", scifact)

    assert up_to_ties(bulk) == up_to_ties(rows)
    assert all(len(r) == 10 for r in rows)


def test_bulk_loaded_rows_stay_out_of_the_shared_graph_and_are_searched_exactly(
    bulk_loaded: str, scifact: Corpus
) -> None:
    db = bulk_loaded
    exact = top10(db, "bulk", scifact)

    # Walks wanted (no exact path for small tenants): the rows are in no graph yet.
    walked = top10(db, "bulk", scifact, "set local pgrag.exact_search_max_rows = 0")

    assert graph_rows(db, "bulk") == {False: ABSTRACTS}
    assert up_to_ties(walked) == up_to_ties(exact)


def test_finishing_a_large_bulk_load_builds_the_tenants_own_graph(bulk_loaded: str) -> None:
    db = bulk_loaded
    with connect(db) as conn:
        conn.execute("set pgrag.exact_search_max_rows = 100")
        built = conn.execute("select pgrag.finish_bulk_load('bulk')::text").fetchone()
        again = conn.execute("select pgrag.finish_bulk_load('bulk')").fetchone()
        own = conn.execute(
            "select pg_get_indexdef(to_regclass('pgrag.' || pgrag.tenant_index_name('bulk')))"
        ).fetchone()

    assert built is not None and built[0].startswith("pgrag.chunks_embedding_hnsw_t_")
    assert again == (None,)
    assert own is not None and "WHERE ((hashtextextended(tenant_id, (0)::bigint) = '" in own[0]
    with connect(db) as conn:
        assert conn.execute("select pgrag.own_graph_keyed('bulk')").fetchone() == (True,)
    assert graph_rows(db, "bulk") == {False: ABSTRACTS}


def test_finishing_a_small_bulk_load_puts_its_rows_into_the_shared_graph(
    bulk_loaded: str,
) -> None:
    db = bulk_loaded
    with connect(db) as conn:
        built = conn.execute("select pgrag.finish_bulk_load('bulk')").fetchone()
        own = conn.execute(
            "select to_regclass('pgrag.' || pgrag.tenant_index_name('bulk'))"
        ).fetchone()

    assert built == (None,) and own == (None,)
    assert graph_rows(db, "bulk") == {True: ABSTRACTS}


def test_an_unscoped_search_finds_rows_a_bulk_load_has_not_finished(
    bulk_loaded: str, scifact: Corpus
) -> None:
    db = bulk_loaded
    load_tenant(db, "rows", scifact, bulk=False)
    vector = scifact[3][0]
    with connect(db) as conn:
        conn.execute("set pgrag.exact_search_max_rows = 0")
        walked = conn.execute(
            "select tenant_id, chunk_id from pgrag.vector_candidates(%s, 10)", (vector,)
        ).fetchall()
        exact = conn.execute(
            "select tenant_id, id from pgrag.chunks order by embedding <=> %s, id limit 10",
            (vector,),
        ).fetchall()

    assert {t for t, _ in walked} == {"bulk", "rows"}
    assert sorted(walked) == sorted(exact)


def bm25_index(dsn: str, tenant: str) -> dict[str, Any]:
    """The tenant's BM25 index with chunks named by (source_uri, chunk_index): postings,
    document frequencies and corpus statistics (not the term bounds, which removals loosen)."""
    with connect(dsn) as conn:
        postings = conn.execute(
            "select p.lexeme, d.source_uri, c.chunk_index, p.tf, p.doc_len"
            " from pgrag.bm25_postings p join pgrag.chunks c on c.tenant_id = p.tenant_id"
            " and c.id = p.chunk_id join pgrag.documents d on d.tenant_id = c.tenant_id"
            " and d.id = c.document_id where p.tenant_id = %s",
            (tenant,),
        ).fetchall()
        lexicon = conn.execute(
            "select lexeme, sum(df) from pgrag.bm25_lexicon where tenant_id = %s"
            " group by 1 having sum(df) <> 0",
            (tenant,),
        ).fetchall()
        stats = conn.execute(
            "select language, sum(chunk_count), sum(token_count) from pgrag.corpus_stats"
            " where tenant_id = %s group by 1",
            (tenant,),
        ).fetchall()
        orphans = conn.execute(
            "select count(*) from pgrag.bm25_postings p where p.tenant_id = %s and not exists"
            " (select from pgrag.chunks c where c.tenant_id = p.tenant_id and c.id = p.chunk_id)",
            (tenant,),
        ).fetchone()
    return {
        "postings": sorted(postings),
        "lexicon": sorted(lexicon),
        "stats": sorted(stats),
        "orphans": orphans,
    }


def change_some_chunks(dsn: str, authenticator: str, tenant: str) -> None:
    """Edits the text of three chunks, a column BM25 ignores of three more (as the owner), and
    deletes three documents as the tenant itself (row-level security applies)."""
    with connect(dsn) as conn:
        conn.execute(
            "update pgrag.chunks c set content = c.content || ' Cancer trial ZQX41-7.'"
            " from pgrag.documents d where d.tenant_id = c.tenant_id and d.id = c.document_id"
            " and c.tenant_id = %s and d.source_uri in ('scifact:1', 'scifact:2', 'scifact:3')",
            (tenant,),
        )
        conn.execute(
            "update pgrag.chunks c set page = 7 from pgrag.documents d"
            " where d.tenant_id = c.tenant_id and d.id = c.document_id and c.tenant_id = %s"
            " and d.source_uri in ('scifact:4', 'scifact:5', 'scifact:6')",
            (tenant,),
        )
        conn.commit()
    with request(dsn, "authenticated", claims_for(tenant)) as conn:
        conn.execute(
            "select pgrag.delete_documents(source_uris => array['scifact:3', 'scifact:7',"
            " 'scifact:8'])"
        )


def test_a_bulk_load_indexes_its_chunks_for_bm25_when_it_finishes(
    bulk_loaded: str, scifact: Corpus, authenticator: str
) -> None:
    db = bulk_loaded
    load_tenant(db, "rows", scifact, bulk=False)
    with connect(db) as conn:
        listed = conn.execute(
            "select count(*) from pgrag.bm25_backlog where tenant_id = 'bulk'"
        ).fetchone()
    unfinished = bm25_index(db, "bulk")
    # Chunks changed and removed before the load finishes (by the owner and by the tenant).
    for tenant in ("bulk", "rows"):
        change_some_chunks(db, authenticator, tenant)
    with connect(db) as conn:
        conn.execute("select pgrag.finish_bulk_load('bulk')")
        conn.commit()
        left = conn.execute("select count(*) from pgrag.bm25_backlog").fetchone()

    assert listed == (ABSTRACTS,)
    assert unfinished == {"postings": [], "lexicon": [], "stats": [], "orphans": (0,)}
    assert left == (0,)
    finished, rows = bm25_index(db, "bulk"), bm25_index(db, "rows")
    assert finished["orphans"] == (0,) and finished["stats"][0][1] == ABSTRACTS - 3
    assert finished == rows


@pytest.mark.parametrize("role", ["service_role", "authenticated"])
@pytest.mark.parametrize(
    "call",
    [
        "select pgrag.bulk_load_applies('acme')",
        "select pgrag.bulk_replace_document_chunks('pg_temp.s', 'acme', '{}', '{}', '{}', '{}',"
        " '{}', '{}', 'm')",
        "select pgrag.finish_bulk_load('acme')",
    ],
)
def test_only_the_owner_of_chunks_may_bulk_load(
    db: str, authenticator: str, role: str, call: str
) -> None:
    with request(db, role, claims_for("acme"), commit=False) as conn:
        conn.execute("create temp table s (document_id int8)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(call)


def test_a_row_written_out_of_the_shared_graph_by_another_writer_is_put_back(
    db: str, authenticator: str
) -> None:
    with request(db, "service_role") as conn:
        (doc,) = conn.execute(
            "insert into pgrag.documents (tenant_id, title, source_type, source_uri)"
            " values ('acme', 't', 'text', 'u') returning id"
        ).fetchone()
        conn.execute("select set_config('pgrag.bulk_load_tenant', 'acme', true)")
        inserted = conn.execute(
            "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
            " content_sha256, in_shared_graph) values ('acme', %s, 0, 'x', 'x', false)"
            " returning in_shared_graph",
            (doc,),
        ).fetchone()
        updated = conn.execute(
            "update pgrag.chunks set in_shared_graph = false returning in_shared_graph"
        ).fetchone()

    assert inserted == updated == (True,)


def test_a_tenant_cannot_write_in_shared_graph(db: str, authenticator: str) -> None:
    with (
        request(db, "authenticated", claims_for("acme"), commit=False) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("update pgrag.chunks set in_shared_graph = false")


def test_pgrag_ingest_bulk_loads_a_tenants_first_load_only(db: str, local_embedder: Any) -> None:
    docs = [
        ExtractedDocument.from_text(uri=f"doc:{i}", title=f"d{i}", text=f"Text number {i}.")
        for i in range(3)
    ]
    first = ingest_documents(db, docs[:2], tenant="acme", embedder=local_embedder)
    after_first = graph_rows(db, "acme")
    second = ingest_documents(db, docs, tenant="acme", embedder=local_embedder)

    assert first.bulk_load and not second.bulk_load
    # The small first load ended in the shared graph (pgrag.finish_bulk_load); so did the next.
    assert after_first == {True: 2}
    assert graph_rows(db, "acme") == {True: 3}


def term_bounds(dsn: str, tenant: str) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(
            "select lexeme, max(max_tf), min(min_doc_len) from pgrag.bm25_lexicon"
            " where tenant_id = %s group by 1 order by 1",
            (tenant,),
        ).fetchall()


def test_the_index_pass_on_several_connections_writes_the_index_of_one_pass(
    bulk_loaded: str, scifact: Corpus
) -> None:
    db = bulk_loaded
    load_tenant(db, "rows", scifact, bulk=False)

    indexed = index_bulk_backlog(db, "bulk", jobs=3)

    assert indexed == ABSTRACTS
    assert bm25_index(db, "bulk") == bm25_index(db, "rows")
    assert term_bounds(db, "bulk") == term_bounds(db, "rows")
    with connect(db) as conn:
        assert conn.execute("select count(*) from pgrag.bm25_backlog").fetchone() == (0,)


def test_an_index_pass_stopped_after_some_words_is_completed_exactly_by_the_next(
    bulk_loaded: str, scifact: Corpus
) -> None:
    db = bulk_loaded
    load_tenant(db, "rows", scifact, bulk=False)
    with connect(db) as conn:  # one part of a parallel pass committed, then the load stopped
        conn.execute("select pgrag.index_bulk_load_lexemes('bulk', 'g', 'p')")
        conn.commit()
        conn.execute("select pgrag.finish_bulk_load('bulk')")
        conn.commit()
        left = conn.execute("select count(*) from pgrag.bm25_backlog").fetchone()

    assert left == (0,)
    assert bm25_index(db, "bulk") == bm25_index(db, "rows")
    assert term_bounds(db, "bulk") == term_bounds(db, "rows")


def test_an_index_pass_waiting_behind_another_sessions_ddl_fails_in_one_line(
    bulk_loaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = bulk_loaded
    monkeypatch.setattr(load_module, "PASS_LOCK_TIMEOUT", "1s")
    with connect(db) as reader, connect(db) as ddl:
        reader.execute("select 1 from pgrag.chunks limit 1")  # holds a lock until it ends
        ddl.execute("set lock_timeout = '20s'")
        queued = threading.Thread(
            target=lambda: ddl.execute("lock table pgrag.chunks in access exclusive mode"),
            daemon=True,
        )
        queued.start()
        wait_for_queued_lock(db)
        started = time.monotonic()
        with pytest.raises(LockWaitTooLong, match="run the same command again"):
            index_bulk_backlog(db, "bulk", jobs=2)
        assert time.monotonic() - started < 15
        reader.rollback()
        queued.join()
        ddl.rollback()

    assert index_bulk_backlog(db, "bulk", jobs=2) == ABSTRACTS


def wait_for_queued_lock(db: str) -> None:
    """Until a session waits for an access exclusive lock on pgrag.chunks."""
    with connect(db, autocommit=True) as conn:
        for _ in range(200):
            if conn.execute(
                "select count(*) from pg_locks where not granted"
                " and relation = 'pgrag.chunks'::regclass and mode = 'AccessExclusiveLock'"
            ).fetchone() == (1,):
                return
            time.sleep(0.05)
    raise AssertionError("the DDL never queued")
