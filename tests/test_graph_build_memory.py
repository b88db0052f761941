"""The memory an HNSW graph is built with (``pgrag.graph_build_memory``).

pgvector builds a graph several times slower once it outgrows ``maintenance_work_mem``.
``pgrag.isolate_tenant`` (the end of every bulk load) therefore raises the setting to what the
graph needs (``pgrag.graph_memory_needed``), by itself up to 1 GB, and never lowers what the
session gives: an operator who gives index builds more builds a larger graph in memory.
A model switch (``pgrag.reembed_switch``) builds each graph of the new model the same way.
When a graph will not fit, ``pgrag ingest`` and ``pgrag import`` say so before the build, with
the memory to give it.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgrag.ingest.load import graph_memory_advice
from pgrag.reembed import Reembedder

ONE_GB_KB = 1024 * 1024


def setting_kb(conn: psycopg.Connection[Any], expression: str, *args: object) -> int:
    """``expression`` (a memory setting such as '64MB' or '1048576kB') in kB."""
    row = conn.execute(f"select pg_size_bytes({expression}) / 1024", args).fetchone()
    assert row is not None
    return int(row[0])


ONE_MB = 1024 * 1024


def needed_kb(conn: psycopg.Connection[Any], rows: int) -> int:
    """What a graph of ``rows`` chunks needs (``pgrag.graph_memory_needed``) rounded up to
    whole MB, as pgvector counts a build on one process, in kB."""
    row = conn.execute("select pgrag.graph_memory_needed(%s)", (rows,)).fetchone()
    assert row is not None
    return -(-int(row[0]) // ONE_MB) * 1024


def element_bytes(dims: int) -> int:
    """What pgrag counts for one element of a graph: its key and 768 bytes, a tenth more."""
    key = dims * 4 if dims <= 2000 else dims * 2
    return (key + 768) * 11 // 10


def test_graph_memory_needed_grows_with_rows_and_dimension(conn: psycopg.Connection[Any]) -> None:
    dims = conn.execute("select dims from pgrag.embedding_config").fetchone()
    assert dims is not None
    row = conn.execute(
        "select pgrag.graph_memory_needed(0), pgrag.graph_memory_needed(1000)"
    ).fetchone()
    assert row == (ONE_MB, ONE_MB + 1000 * element_bytes(dims[0]))
    assert conn.execute("select pgrag.graph_memory_needed(1000, 768)").fetchone() == (
        ONE_MB + 1000 * element_bytes(768),
    )


def test_a_graph_above_2000_dimensions_is_sized_by_its_halfvec_key(
    conn: psycopg.Connection[Any],
) -> None:
    row = conn.execute("select pgrag.graph_memory_needed(1000, 3072)").fetchone()
    assert row == (ONE_MB + 1000 * element_bytes(3072),)
    assert element_bytes(3072) == (3072 * 2 + 768) * 11 // 10


def test_a_small_graph_is_given_what_it_needs(conn: psycopg.Connection[Any]) -> None:
    conn.execute("set maintenance_work_mem = '1MB'")
    needed = needed_kb(conn, 100000)
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
    """Every CREATE INDEX from now on records the maintenance_work_mem it ran with, in kB."""
    conn.execute("create table public.build_memory (setting_kb bigint, index text)")
    conn.execute(
        "create function public.record_build_memory() returns event_trigger language plpgsql "
        "as $$ begin insert into public.build_memory select "
        "pg_size_bytes(current_setting('maintenance_work_mem')) / 1024, c.object_identity "
        "from pg_event_trigger_ddl_commands() as c; end $$"
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
    needed = needed_kb(conn, 1000)
    assert needed > 1024
    conn.execute("select pgrag.isolate_tenant('t')")
    built = conn.execute("select setting_kb from public.build_memory").fetchall()
    assert built == [(needed,)]
    assert conn.execute("show maintenance_work_mem").fetchone() == ("1MB",)


@pytest.mark.parametrize("rows", [400, 2000, 5000])
def test_a_graph_given_what_it_needs_builds_in_memory_on_one_process(
    conn: psycopg.Connection[Any], rows: int
) -> None:
    # pgvector's build on one process holds only the whole MB of its setting
    add_chunks(conn, "t", rows)
    conn.execute("set maintenance_work_mem = '1MB'")
    conn.execute("set max_parallel_maintenance_workers = 0")
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("select pgrag.isolate_tenant('t')")
    assert not [n for n in notices if "maintenance_work_mem" in n]


def test_isolate_tenant_builds_with_a_sessions_larger_memory(
    conn: psycopg.Connection[Any],
) -> None:
    add_chunks(conn, "t", 50)
    builds_record_their_memory(conn)
    conn.execute("set maintenance_work_mem = '2GB'")
    conn.execute("select pgrag.isolate_tenant('t')")
    built = conn.execute("select setting_kb from public.build_memory").fetchall()
    assert built == [(2 * ONE_GB_KB,)]
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


def switch_to_a_model_of(conn: psycopg.Connection[Any], dims: int) -> None:
    """Start a re-embed to a model of ``dims`` dimensions and store every chunk's new vector."""
    conn.execute("select * from pgrag.reembed_start('next-model', 'openai', %s)", (dims,))
    conn.execute(
        "select pgrag.reembed_store('next-model', array_agg(c.tenant_id), array_agg(c.chunk_id), "
        "array_agg(c.content_sha256), array_agg(array_fill(c.chunk_id::real, array[%s])::vector)) "
        "from pgrag.reembed_claim(10000) as c",
        (dims,),
    )


def test_a_model_switch_builds_each_graph_with_what_its_rows_need(
    conn: psycopg.Connection[Any],
) -> None:
    add_chunks(conn, "big", 1000)
    add_chunks(conn, "small", 10)
    conn.execute("select pgrag.isolate_tenant('big')")
    switch_to_a_model_of(conn, 768)
    builds_record_their_memory(conn)
    conn.execute("set maintenance_work_mem = '1MB'")
    own = conn.execute("select pgrag.tenant_index_name('big')").fetchone()
    assert own is not None
    shared_kb = setting_kb(conn, "pgrag.graph_build_memory(1010, 768)")
    own_kb = setting_kb(conn, "pgrag.graph_build_memory(1000, 768)")
    expected = {
        "chunks_embedding_hnsw_next": shared_kb,
        "chunks_public_embedding_hnsw_next": 1024,  # no public row: the session's own
        f"{own[0]}_next": own_kb,
    }
    assert setting_kb(conn, "pgrag.graph_build_memory(1000, 768)") > 1024
    assert conn.execute("select switched from pgrag.reembed_switch()").fetchone() == (True,)
    built = {
        index.removeprefix("pgrag."): setting
        for setting, index in conn.execute("select setting_kb, index from public.build_memory")
    }
    assert built == expected
    assert conn.execute("show maintenance_work_mem").fetchone() == ("1MB",)


def test_advice_counts_the_dimension_it_is_given(conn: psycopg.Connection[Any]) -> None:
    conn.execute("set maintenance_work_mem = '64MB'")
    assert graph_memory_advice(conn, 100000) is None
    advice = graph_memory_advice(conn, 200000, 3072)
    assert advice is not None
    assert f"needs about {(ONE_MB + 200000 * element_bytes(3072)) / 2**30:.1f} GB" in advice


def test_a_switch_sizes_its_advice_by_its_largest_graph(
    conn: psycopg.Connection[Any], db: str, local_embedder: Any
) -> None:
    conn.execute("set pgrag.bulk_load_tenant = 'big'")  # its rows stay out of the shared graph
    add_chunks(conn, "big", 1000)
    conn.execute("reset pgrag.bulk_load_tenant")
    conn.execute("select pgrag.index_bulk_load_backlog('big'), pgrag.isolate_tenant('big')")
    add_chunks(conn, "small", 10)
    conn.commit()
    worker = Reembedder(db, local_embedder)
    try:
        assert worker.largest_graph() == 1000
    finally:
        worker.close()
