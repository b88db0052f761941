"""The loaders' statements cost what their batch holds, whatever else the tables and the
session hold: a tenant new to the statistics of tables shared with other tenants, loading batch
after batch, reads none of its earlier chunks (``pgrag.replace_document_chunks``: to reuse
embeddings for new documents, or to find the chunks a swap replaces) and one document row per
chunk it writes (the foreign key's check and the publishing trigger), its bulk load reads each
chunk it listed for the BM25 index once (``pgrag.bulk_load_backlog_sql``), and the session's
stage does not keep the pages of earlier batches (a temporary table is never vacuumed). Removing
a document of such a tenant reads that document's chunks alone, and the delete of a batch's
chunks, executable by the API roles, reaches the caller's tenant alone."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import psycopg
from plugins.plans import ANALYZED, marked_plan, run_with_plans
from psycopg.types.json import Jsonb

from pgrag.db import connect, set_request_tenant
from pgrag.ingest import create_stage_table

MODEL = "m"
SWAP = (
    "select pgrag.replace_document_chunks('pg_temp.pgrag_stage'::regclass, %s, %s::int8[],"
    " %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int4[], %s)"
)


def stage_documents(
    conn: psycopg.Connection[Any], tenant: str, documents: int, chunks: int, batch: str
) -> tuple[list[int], tuple[Any, ...]]:
    """Make ``documents`` new documents of ``tenant`` and stage ``chunks`` chunks of each, with
    embeddings; their ids, and the arguments of the swap that loads them."""
    columns = create_stage_table(conn)
    ids = [
        row[0]
        for row in conn.execute(
            "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
            " select %s, 'T', 'text', %s || g, 'processing' from generate_series(1, %s) as g"
            " order by g returning id",
            (tenant, f"{batch}/", documents),
        ).fetchall()
    ]
    vectors = np.random.default_rng(len(batch)).normal(size=(documents * chunks, 384))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with (
        conn.cursor() as cur,
        cur.copy(
            "copy pgrag_stage ({}) from stdin".format(", ".join(name for name, _ in columns))
        ) as copy,
    ):
        for d, doc_id in enumerate(ids):
            for i in range(chunks):
                text = f"{batch} document {d} chunk {i} about tenants and plans"
                vector = "[" + ",".join(f"{x:.6f}" for x in vectors[d * chunks + i]) + "]"
                digest = hashlib.sha256(text.encode()).hexdigest()
                copy.write_row(
                    (doc_id, i, text, vector, None, [], "english", 9, digest, 0, Jsonb({}))
                )
    n = len(ids)
    return ids, (tenant, ids, ["T"] * n, ["text"] * n, ["x"] * n, [Jsonb({})] * n, [chunks] * n)


def load(
    conn: psycopg.Connection[Any],
    tenant: str,
    documents: int,
    chunks: int,
    batch: str,
    *,
    bulk: bool = False,
) -> None:
    """Stage and swap in one batch (through the bulk path: ``bulk``), committed."""
    _, args = stage_documents(conn, tenant, documents, chunks, batch)
    conn.execute(SWAP.replace("replace_", "bulk_replace_") if bulk else SWAP, (*args, MODEL))
    conn.commit()


def load_other_tenants(conn: psycopg.Connection[Any]) -> None:
    """Four tenants of 200 chunks, and statistics that know only them."""
    for other in ("acme", "globex", "initech", "umbrella"):
        load(conn, other, 20, 10, f"{other}-first")
    conn.execute("analyze pgrag.documents, pgrag.chunks, pgrag.bm25_backlog")
    conn.commit()


def stage_pages(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("select pg_relation_size('pg_temp.pgrag_stage')").fetchone()
    assert row is not None
    return int(row[0])


def test_a_new_tenants_later_batch_reads_none_of_its_earlier_chunks(db: str) -> None:
    with connect(db) as conn:
        load_other_tenants(conn)
        load(conn, "newco", 20, 10, "newco-first")
        _, args = stage_documents(conn, "newco", 20, 10, "newco-second")
        _, plans = run_with_plans(conn, SWAP, (*args, MODEL), settings=ANALYZED)
    read = {p.query: p.rows_read("chunks") for p in plans if p.rows_read("chunks")}
    assert read == {}


def crowd_the_server(conn: psycopg.Connection[Any]) -> None:
    """Twenty tenants of 300 documents of ten chunks, and statistics that know only them (all
    of them: fewer tenants than the statistics' most common values)."""
    conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
        " select 't' || t, 'T', 'text', 'u' || g, 'ready'"
        " from generate_series(1, 20) as t, generate_series(1, 300) as g"
    )
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256)"
        " select d.tenant_id, d.id, i, 'inverter cooling', md5(d.id || '/' || i)"
        " from pgrag.documents as d, generate_series(0, 9) as i"
    )
    conn.execute("analyze pgrag.documents, pgrag.chunks")
    conn.commit()


def test_each_chunk_a_new_tenant_writes_checks_its_one_document(db: str) -> None:
    with connect(db) as conn:
        crowd_the_server(conn)
        load(conn, "newco", 100, 10, "newco-first")
        load(conn, "newco", 100, 10, "newco-second")
    with connect(db) as conn:  # a session whose plans are made now
        _, args = stage_documents(conn, "newco", 100, 10, "newco-third")
        _, plans = run_with_plans(
            conn, SWAP, (*args, MODEL), settings={**ANALYZED, "enable_seqscan": "on"}
        )
    # the foreign key's check (PostgreSQL's statement) and the publishing trigger's lookup
    foreign_key = [p for p in plans if "FOR KEY SHARE" in p.query]
    publishing = [p for p in plans if "new.is_public" in p.query]
    assert len(foreign_key) == len(publishing) == 1000
    # the row's document by key: never every document of the tenant (300 here before)
    assert {p.rows_read("documents") for p in foreign_key + publishing} == {1}


def test_removing_a_new_tenants_documents_reads_their_chunks_alone(db: str) -> None:
    with connect(db) as conn:
        load_other_tenants(conn)
        load(conn, "newco", 20, 10, "newco-first")
        load(conn, "newco", 20, 10, "newco-second")
        ids = [
            r[0]
            for r in conn.execute(
                "select id from pgrag.documents where tenant_id = 'newco' order by id limit 2"
            )
        ]
        rows, plans = run_with_plans(
            conn,
            "select * from pgrag.delete_documents(%s::int8[])",
            (ids,),
            tenant="newco",
            settings=ANALYZED,
        )
    assert [r[2] for r in rows] == [10, 10]
    deleted = marked_plan(plans, "delete_document_chunks")
    assert deleted.rows_read("chunks") == 20
    assert sum(p.rows_read("chunks") for p in plans) == 20 + 20  # counted, then deleted


def test_deleting_another_tenants_document_chunks_deletes_none(db: str) -> None:
    with connect(db) as conn:
        load(conn, "globex", 2, 3, "globex-first")
        ids = [r[0] for r in conn.execute("select id from pgrag.documents order by id")]
        with conn.transaction():
            set_request_tenant(conn, "acme")
            conn.execute("set local role authenticated")
            deleted = conn.execute(
                "select pgrag.delete_document_chunks('globex', %s)", (ids,)
            ).fetchone()
            conn.execute("reset role")
        left = conn.execute("select count(*) from pgrag.chunks").fetchone()
    assert deleted == (0,) and left == (6,)


def test_a_swap_that_empties_the_stage_leaves_it_no_pages(db: str) -> None:
    with connect(db) as conn:
        load(conn, "acme", 20, 10, "first")
        assert stage_pages(conn) == 0
        load(conn, "acme", 20, 10, "second")
        assert stage_pages(conn) == 0


def test_a_swap_keeps_the_staged_rows_of_documents_it_does_not_swap(db: str) -> None:
    with connect(db) as conn:
        _, waiting = stage_documents(conn, "acme", 2, 3, "waiting")
        _, args = stage_documents(conn, "acme", 2, 3, "swapped")
        conn.execute(SWAP, (*args, MODEL))
        staged = conn.execute(
            "select document_id, count(*) from pgrag_stage group by 1 order by 1"
        ).fetchall()
    assert staged == [(doc_id, 3) for doc_id in waiting[1]]


def test_a_new_tenants_bulk_load_reads_each_chunk_it_listed_once(db: str) -> None:
    with connect(db) as conn:
        load_other_tenants(conn)
        load(conn, "newco", 20, 10, "newco-first", bulk=True)
        _, plans = run_with_plans(
            conn, "select pgrag.bulk_load_lexeme_bounds('newco', 2)", settings=ANALYZED
        )
    backlog = marked_plan(plans, "bulk_load_lexeme_bounds")
    read = {
        table: sum(n["Actual Rows"] * n["Actual Loops"] for n in backlog.scans(table))
        for table in ("bm25_backlog", "chunks")
    }
    assert read == {"bm25_backlog": 200, "chunks": 200}, backlog.nodes
