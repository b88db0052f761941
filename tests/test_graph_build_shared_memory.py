"""A graph build that the server's shared memory cannot hold (``pgrag.build_graph``).

A parallel HNSW build reserves all of ``maintenance_work_mem`` in the server's shared memory
(``/dev/shm``) when it starts. pgrag raises that setting for a tenant's graph (up to 1 GB), and a
container's ``/dev/shm`` is often smaller (Docker's default is 64 MB): the build would fail at
once with "could not resize shared memory segment". It is built on one process instead, with a
warning that says what to give the server.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from plugins.pgservers import LocalCluster

from pgrag.db import connect
from pgrag.ingest.load import isolate_large_tenant
from pgrag.install.migrator import Migrator

CHUNKS = 40000  # a graph of about 97 MB by pgrag.graph_memory_needed: more than /dev/shm holds


def load_chunks_in_bulk(conn: psycopg.Connection[Any], tenant: str, n: int) -> None:
    """``n`` chunks of one document of ``tenant``, written as a bulk load writes them (outside
    the shared graph, its BM25 index left to the end of the load)."""
    conn.execute("select set_config('pgrag.bulk_load_tenant', %s, false)", (tenant,))
    doc = conn.execute(
        "insert into pgrag.documents (tenant_id, source_type, source_uri, title) "
        "values (%s, 'text', 'a', 'a') returning id",
        (tenant,),
    ).fetchone()
    assert doc is not None
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
        "content_sha256, embedding) select %s, %s, i, 'text ' || i, md5('text ' || i), "
        "(select array_agg(random())::vector from generate_series(1, 384) where i >= 0) "
        "from generate_series(0, %s - 1) as i",
        (tenant, doc[0], n),
    )
    conn.execute("reset pgrag.bulk_load_tenant")
    conn.commit()


def test_a_graph_larger_than_the_servers_shared_memory_is_built_on_one_process(
    small_shm_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with connect(small_shm_cluster.dsn(), autocommit=True) as admin:
        admin.execute("create database pgrag_shm")
    dsn = small_shm_cluster.dsn("pgrag_shm")
    Migrator(dsn).migrate(384)
    with connect(dsn) as conn:
        load_chunks_in_bulk(conn, "acme", CHUNKS)

    assert isolate_large_tenant(dsn, "acme")

    with connect(dsn) as conn:
        row = conn.execute(
            "select i.indisvalid from pg_index as i where i.indexrelid = "
            "to_regclass('pgrag.' || pgrag.tenant_index_name('acme'))"
        ).fetchone()
        assert row == (True,)
        assert conn.execute("select pgrag.tenant_chunk_count('acme')").fetchone() == (CHUNKS,)
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "parallel graph build" in line]
    assert len(warning) == 1, err
    assert warning[0].startswith("pgrag: warning: a parallel graph build could not reserve ")
    assert "building it on one process instead" in warning[0]
    assert "docker run --shm-size" in warning[0]
