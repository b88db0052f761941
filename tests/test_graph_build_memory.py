"""The memory a tenant's HNSW graph is built with (``pgrag.graph_build_memory``).

pgvector builds a graph several times slower once it outgrows ``maintenance_work_mem``.
``pgrag.isolate_tenant`` (the end of every bulk load) therefore raises the setting to what the
graph needs (``pgrag.graph_memory_needed``), by itself up to 1 GB, and never lowers what the
session gives: an operator who gives index builds more builds a larger graph in memory.
When a graph will not fit, ``pgrag ingest`` and ``pgrag import`` say so before the build, with
the memory to give it.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgrag.ingest.load import graph_memory_advice

ONE_GB_KB = 1024 * 1024


def setting_kb(conn: psycopg.Connection[Any], expression: str, *args: object) -> int:
    """``expression`` (a memory setting such as '64MB' or '1048576kB') in kB."""
    row = conn.execute(f"select pg_size_bytes({expression}) / 1024", args).fetchone()
    assert row is not None
    return int(row[0])


def test_graph_memory_needed_grows_with_rows_and_dimension(conn: psycopg.Connection[Any]) -> None:
    dims = conn.execute("select dims from pgrag.embedding_config").fetchone()
    assert dims is not None
    row = conn.execute(
        "select pgrag.graph_memory_needed(0), pgrag.graph_memory_needed(1000)"
    ).fetchone()
    assert row == (0, 1000 * (dims[0] * 8 + 2048))


def test_a_small_graph_is_given_what_it_needs(conn: psycopg.Connection[Any]) -> None:
    conn.execute("set maintenance_work_mem = '1MB'")
    needed = setting_kb(conn, "pgrag.graph_memory_needed(100000)::text")
    given = setting_kb(conn, "pgrag.graph_build_memory(100000)")
    assert given == needed
    assert given < ONE_GB_KB


def test_pgrag_alone_gives_a_large_graph_one_gigabyte(conn: psycopg.Connection[Any]) -> None:
    conn.execute("set maintenance_work_mem = '64MB'")
    assert setting_kb(conn, "pgrag.graph_memory_needed(1000000)::text") > ONE_GB_KB
    assert setting_kb(conn, "pgrag.graph_build_memory(1000000)") == ONE_GB_KB


def test_a_session_that_gives_builds_more_is_never_lowered(conn: psycopg.Connection[Any]) -> None:
    conn.execute("set maintenance_work_mem = '6GB'")
    assert setting_kb(conn, "pgrag.graph_build_memory(1000000)") == 6 * ONE_GB_KB
    assert setting_kb(conn, "pgrag.graph_build_memory(10)") == 6 * ONE_GB_KB


def builds_record_their_memory(conn: psycopg.Connection[Any]) -> None:
    """Every CREATE INDEX from now on records the maintenance_work_mem it ran with."""
    conn.execute("create table public.build_memory (setting text)")
    conn.execute(
        "create function public.record_build_memory() returns event_trigger language plpgsql "
        "as $$ begin insert into public.build_memory "
        "values (current_setting('maintenance_work_mem')); end $$"
    )
    conn.execute(
        "create event trigger record_build_memory on ddl_command_end "
        "when tag in ('CREATE INDEX') execute function public.record_build_memory()"
    )


def add_chunks(conn: psycopg.Connection[Any], tenant: str, n: int) -> None:
    """``n`` chunks of one document of ``tenant`` (counted by pgrag.tenant_chunk_count)."""
    dims = conn.execute("select dims from pgrag.embedding_config").fetchone()
    assert dims is not None
    doc = conn.execute(
        "insert into pgrag.documents (tenant_id, source_type, source_uri, title) "
        "values (%s, 'text', 'a', 'a') returning id",
        (tenant,),
    ).fetchone()
    assert doc is not None
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
        "content_sha256, embedding) select %s, %s, i, 'text ' || i, md5('text ' || i), "
        "(select array_agg(random())::vector from generate_series(1, %s)) "
        "from generate_series(0, %s - 1) as i",
        (tenant, doc[0], dims[0], n),
    )


def test_isolate_tenant_builds_with_what_the_graph_needs(conn: psycopg.Connection[Any]) -> None:
    add_chunks(conn, "t", 1000)
    builds_record_their_memory(conn)
    conn.execute("set maintenance_work_mem = '1MB'")
    needed = setting_kb(conn, "pgrag.graph_memory_needed(1000)::text")
    assert needed > 1024
    conn.execute("select pgrag.isolate_tenant('t')")
    built = conn.execute("select setting from public.build_memory").fetchall()
    assert built == [(f"{needed}kB",)]
    assert conn.execute("show maintenance_work_mem").fetchone() == ("1MB",)


def test_isolate_tenant_builds_with_a_sessions_larger_memory(
    conn: psycopg.Connection[Any],
) -> None:
    add_chunks(conn, "t", 50)
    builds_record_their_memory(conn)
    conn.execute("set maintenance_work_mem = '2GB'")
    conn.execute("select pgrag.isolate_tenant('t')")
    assert conn.execute("select setting from public.build_memory").fetchall() == [("2GB",)]
    assert conn.execute("show maintenance_work_mem").fetchone() == ("2GB",)


def test_a_graph_that_fits_its_memory_gets_no_advice(conn: psycopg.Connection[Any]) -> None:
    conn.execute("set maintenance_work_mem = '64MB'")
    assert graph_memory_advice(conn, 100000) is None


def test_a_graph_beyond_one_gigabyte_is_announced_with_the_memory_to_give(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("set maintenance_work_mem = '64MB'")
    needed = setting_kb(conn, "pgrag.graph_memory_needed(1000000)::text") * 1024
    advice = graph_memory_advice(conn, 1000000)
    assert advice is not None
    assert "graph of 1,000,000 chunks" in advice
    assert f"needs about {needed / 2**30:.1f} GB" in advice
    assert "is given 1.0 GB" in advice
    assert f"maintenance_work_mem={-(-needed // 2**30)}GB" in advice


def test_a_session_that_gives_the_graph_enough_gets_no_advice(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("set maintenance_work_mem = '6GB'")
    assert graph_memory_advice(conn, 1000000) is None
