"""Work bounded by the caller's arguments, tried the way a hostile PostgREST client would.

Every call goes through the PostgREST per-request replay of test_tenancy: a LOGIN NOINHERIT
authenticator, ``set local role anon|authenticated``, local ``request.jwt.claims``, and here a
local ``statement_timeout`` of 3 s (Supabase's anon timeout). The corpus is this repository's
own documentation, ingested with the real chunker and model into two tenants (acme: two public
documents and a private one; globex: two private ones). Private chunks carry a marker word, so
a leak shows up in any text a function returns.

Checked: each defect once found in the argument checks now fails fast with SQLSTATE 22023 naming the
argument, or is clamped as docs/security.md ("Argument limits") says; windows are read from rows
that exist; and a property-based test throws random and hostile values at every argument of
every function anon or authenticated may EXECUTE (enumerated from the catalog), asserting only
documented SQLSTATEs, bounded time, no temporary files, and never a row of another tenant.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from plugins.tenancy import api_dsn, claims_for, ensure_authenticator
from psycopg import sql
from test_security_privileges import postgrest_role_settings

from pgrag.db import connect
from pgrag.errors import ConfigError
from pgrag.ingest import IngestOptions, ingest_documents
from pgrag.pipeline.extract import extract_path
from pgrag.search import SearchOptions, search
from pgrag.testing import create_database, drop_database

ROOT = Path(__file__).resolve().parents[1]
ACME_PUBLIC = ("docs/sql-api.md", "docs/install.md")
ACME_PRIVATE = ("docs/security.md",)
GLOBEX = ("docs/cli.md", "docs/supabase.md")
ACME_MARKER = "zqxacmeprivatemarker"
GLOBEX_MARKER = "zqxglobexsecretmarker"
QUERY = "how does hybrid search fuse keyword and vector results"
TIMEOUT_S = 3.0
DIMS = 384
# A public document of acme generated in bulk (random embeddings, 200 words a chunk, about the
# size of the ingester's chunks): enough rows that the widest calls (1,000 hits, windows of 10
# chunks each side, 1,000 candidates per arm) handle tens of thousands of chunk rows, as on a
# real tenant.
GENERATED_CHUNKS = 1500
# SQLSTATEs pgrag documents for its functions' arguments (docs/security.md, "Argument limits").
DOCUMENTED_SQLSTATES = {"22023"}
# Functions that compute embeddings or chunks inside the database: on a server without PL/Python
# (this one) they raise PR301 for what they cannot do (docs/sql-api.md, "Text-only search").
NEED_PLPYTHON = {
    "public.hybrid_search_text",
    "pgrag.embed_query",
    "pgrag.compute_query_embedding",
    "pgrag.chunk_text",
    "public.rerank",
    "pgrag.rerank_scores",
}
# Volatile (writing) functions executable by authenticated/service_role (never anon). They are
# fuzzed like the others, each call in a transaction that is rolled back afterwards. Besides
# 22023, submit_document may refuse a full queue (PR010). The query-embedding cache's writers
# (query_cache_get counts a hit) touch only the caller's tenant's entries
# (tests/test_query_cache.py).
# Any other volatile function an API role can execute fails test_only_known_writers_are_executable.
# pgrag.propagate_request_claims (anon too) writes no row: it sets the transaction's own claims
# again for a Citus cluster's workers, takes no argument, and does nothing without Citus.
# pgrag.delete_document_chunks (the delete of a batch's chunks that delete_documents and the
# loader's swap share) runs as the caller: row-level security confines it to chunks of the
# caller's tenant, which the caller may delete directly too, whatever tenant it is given.
KNOWN_WRITERS = {
    "pgrag.delete_documents",
    "pgrag.delete_document_chunks",
    "pgrag.propagate_request_claims",
    "pgrag.query_cache_get",
    "pgrag.query_cache_put",
    "pgrag.prune_query_cache",
    "public.log_search",
    "public.submit_document",
    "public.answer_cache_lookup",
    "public.answer_cache_store",
}
WRITER_SQLSTATES = {"public.submit_document": {"PR010"}}
# Writers whose new rows are checked inside their own (rolled-back) request: the rows they make
# are not in the corpus, so test_property_the_writing_rpcs_... fuzzes them instead of the
# readers' test.
FUZZED_WRITERS = {"public.submit_document"}
# Functions whose direct calls are checked only by their callers (none: every executable function
# checks its own arguments).
CHECKED_BY_CALLERS: set[str] = set()
# The shared argument checks: they raise 22023 about whatever argument name they are given.
VALIDATORS = {
    "pgrag.check_argument",
    "pgrag.check_length",
    "pgrag.check_query_embedding",
    "pgrag.text_search_config",
}


@dataclass
class Corpus:
    db: str
    chunks: dict[str, set[int]]  # "public", "acme", "globex"
    documents: dict[str, set[int]]
    query_embedding: list[float]
    longest_document: list[int] = field(default_factory=list)  # its chunk ids


@pytest.fixture(scope="module")
def corpus(pg_admin_dsn: str, template_db: str, local_embedder: Any) -> Iterator[Corpus]:
    ensure_authenticator(pg_admin_dsn)
    dsn = create_database(pg_admin_dsn, template=template_db)
    options = IngestOptions(chunk_size=96, overlap=12)
    uris: dict[str, str] = {}
    for tenant, paths in (("acme", ACME_PUBLIC + ACME_PRIVATE), ("globex", GLOBEX)):
        docs = [extract_path(ROOT / p) for p in paths]
        uris.update({p: d.uri for p, d in zip(paths, docs, strict=True)})
        ingest_documents(dsn, docs, tenant=tenant, embedder=local_embedder, options=options)
    with connect(dsn) as conn:
        public = [uris[p] for p in ACME_PUBLIC]
        conn.execute(
            "update pgrag.documents set is_public = (tenant_id = 'acme' and source_uri = any(%s))",
            (public,),
        )
        for tenant, marker, cond in (
            ("acme", ACME_MARKER, "not d.is_public"),
            ("globex", GLOBEX_MARKER, "true"),
        ):
            conn.execute(
                f"update pgrag.chunks as c set content = c.content || ' ' || %s "
                f"from pgrag.documents as d where d.tenant_id = c.tenant_id "
                f"and d.id = c.document_id and c.tenant_id = %s and {cond}",
                (marker, tenant),
            )
            conn.execute(
                f"update pgrag.documents as d set title = d.title || ' ' || %s "
                f"where d.tenant_id = %s and {cond}",
                (marker, tenant),
            )
        add_generated_document(conn)
        chunks: dict[str, set[int]] = {}
        documents: dict[str, set[int]] = {}
        for name, cond in (
            ("public", "d.is_public"),
            ("acme", "d.tenant_id = 'acme'"),
            ("globex", "d.tenant_id = 'globex'"),
        ):
            rows = conn.execute(
                "select d.id, c.id from pgrag.documents d join pgrag.chunks c "
                f"on c.tenant_id = d.tenant_id and c.document_id = d.id where {cond}"
            ).fetchall()
            documents[name] = {r[0] for r in rows}
            chunks[name] = {r[1] for r in rows}
        longest = conn.execute(
            "select array_agg(c.id order by c.chunk_index) from pgrag.chunks as c "
            "join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id "
            "where c.tenant_id = 'acme' and d.source_uri <> 'generated.md' "
            "group by c.document_id order by count(*) desc limit 1"
        ).fetchone()
        assert longest
        conn.execute("analyze")
        conn.commit()
    emb = [float(x) for x in local_embedder.embed([QUERY])[0]]
    yield Corpus(dsn, chunks, documents, emb, list(longest[0]))
    drop_database(pg_admin_dsn, dsn)


def add_generated_document(conn: psycopg.Connection[Any]) -> None:
    rng = np.random.default_rng(7)
    words = [*QUERY.split(), "window", "context", "source", "chunk", "tenant", "index"]
    vectors = rng.standard_normal((GENERATED_CHUNKS, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    contents = [" ".join(rng.choice(words, 400)) + f" part{i}" for i in range(GENERATED_CHUNKS)]
    row = conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status, "
        "is_public, chunk_count) values ('acme', 'Generated handbook', 'markdown', "
        "'generated.md', 'ready', true, %s) returning id",
        (GENERATED_CHUNKS,),
    ).fetchone()
    assert row
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding, "
        "content_sha256, token_count) "
        "select 'acme', %s, u.i - 1, u.c, u.e::vector, md5(u.c), 250 "
        "from unnest(%s::text[], %s::text[]) with ordinality as u(c, e, i)",
        (row[0], contents, [str(v.tolist()) for v in vectors]),
    )


def test_the_corpus_is_real_and_split_between_tenants(corpus: Corpus) -> None:
    assert (
        len(corpus.chunks["acme"]) >= 50 + GENERATED_CHUNKS and len(corpus.chunks["globex"]) >= 30
    )
    assert corpus.chunks["public"] and corpus.chunks["public"] < corpus.chunks["acme"]
    assert len(corpus.longest_document) >= 20


# -- the replay ----------------------------------------------------------------------------------

ROLES = {
    "anon": {"role": "anon"},
    "authenticated": claims_for("acme"),
}


@contextmanager
def api_connection(db: str) -> Iterator[psycopg.Connection[Any]]:
    """The authenticator's connection, one PostgREST request per transaction on it."""
    with connect(api_dsn(db), autocommit=True) as conn:
        assert conn.execute(
            "select rolsuper, rolbypassrls from pg_roles where rolname = current_user"
        ).fetchone() == (False, False)
        yield conn


@contextmanager
def replay(
    conn: psycopg.Connection[Any], role: str, *, rollback: bool = False
) -> Iterator[psycopg.Connection[Any]]:
    """One request: ``set local role``, local claims and a local 3 s statement_timeout
    (``rollback``: nothing it wrote is kept)."""
    with conn.transaction(force_rollback=rollback):
        # The role's settings, as PostgREST loads them (lower-cased) and applies them.
        for key, value in role_settings(conn).get(role, {}).items():
            conn.execute("select pg_catalog.set_config(%s, %s, true)", (key, value))
        conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
        conn.execute(
            "select pg_catalog.set_config('request.jwt.claims', %s, true)",
            (json.dumps(ROLES[role]),),
        )
        conn.execute(f"set local statement_timeout = '{int(TIMEOUT_S * 1000)}ms'")
        yield conn


_ROLE_SETTINGS: dict[str, dict[str, dict[str, str]]] = {}


def role_settings(conn: psycopg.Connection[Any]) -> dict[str, dict[str, str]]:
    """What PostgREST loads for each role (its own query), once per database."""
    db = conn.info.dbname
    if db not in _ROLE_SETTINGS:
        dsn = conn.info.dsn
        _ROLE_SETTINGS[db] = postgrest_role_settings(dsn)
    return _ROLE_SETTINGS[db]


def temp_usage(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(temp_files, temp_bytes) of this database, after flushing this backend's statistics."""
    conn.execute("select pg_catalog.pg_stat_force_next_flush()")
    conn.execute("select 1")  # the backend went idle in between: its statistics are flushed
    conn.execute("select pg_catalog.pg_stat_clear_snapshot()")
    row = conn.execute(
        "select temp_files, temp_bytes from pg_catalog.pg_stat_database "
        "where datname = pg_catalog.current_database()"
    ).fetchone()
    assert row
    return int(row[0]), int(row[1])


class _RollBack(Exception):
    """Raised inside a request to roll back what a writing function did."""


def call(
    conn: psycopg.Connection[Any],
    role: str,
    statement: str,
    params: Any = (),
    *,
    roll_back: bool = False,
) -> tuple[list[Any] | None, str | None, str, float]:
    """Run ``statement`` as ``role``: (rows or None, SQLSTATE or None, message, seconds).
    With ``roll_back`` the request's transaction is rolled back instead of committed."""
    started = time.perf_counter()
    rows: list[Any] = []
    try:
        with replay(conn, role):
            rows = conn.execute(statement, params).fetchall()
            if roll_back:
                raise _RollBack
    except _RollBack:
        pass
    except psycopg.Error as exc:
        return None, exc.sqlstate, str(exc), time.perf_counter() - started
    return rows, None, "", time.perf_counter() - started


def assert_refused(
    corpus: Corpus, statement: str, params: Any, argument: str, range_text: str
) -> None:
    """As anon and as authenticated: SQLSTATE 22023, fast, naming the argument and its range."""
    with api_connection(corpus.db) as conn:
        for role in ROLES:
            rows, state, message, seconds = call(conn, role, statement, params)
            assert state == "22023", (role, state, message, rows)
            assert message.startswith(argument), (role, message)
            assert range_text in message, (role, message)
            assert seconds < 0.5, (role, seconds)


# -- one test per defect once found in the argument checks ----------------------------------


def test_chunk_windows_with_a_huge_window_is_refused(corpus: Corpus) -> None:
    first = min(corpus.chunks["public"])
    assert_refused(
        corpus,
        "select * from public.chunk_windows(array[%s]::bigint[], 2147483647)",
        (first,),
        "window_size",
        "between 0 and 10",
    )


def test_hybrid_search_with_a_huge_window_is_refused(corpus: Corpus) -> None:
    assert_refused(
        corpus,
        "select * from public.hybrid_search('hybrid search', %s::vector, "
        "window_size => 2147483647)",
        (json.dumps(corpus.query_embedding),),
        "window_size",
        "between 0 and 10",
    )


def test_windows_read_only_rows_that_exist(corpus: Corpus) -> None:
    with connect(corpus.db) as conn:
        sources = conn.execute(
            "select p.proname, p.prosrc from pg_proc p where p.pronamespace in "
            "('public'::regnamespace, 'pgrag'::regnamespace) "
            "and p.proname in ('windows', 'chunk_windows', 'hybrid_search', 'build_context', "
            "'build_context_for', 'context_from_hits')"
        ).fetchall()
    assert len(sources) == 6
    for name, body in sources:
        assert "generate_series" not in body, name
    assert "n.chunk_index >= hc.chunk_index" in dict(sources)["windows"]


def test_the_temp_file_measurement_sees_a_spilling_sort(corpus: Corpus) -> None:
    # The instrument behind every "no temp files" assertion here: it must see a real spill.
    with api_connection(corpus.db) as conn:
        files, used = temp_usage(conn)
        with replay(conn, "authenticated"):
            conn.execute("set local work_mem = '64kB'")
            conn.execute(
                "select count(*) from (select g from generate_series(1, 200000) g "
                "order by g desc offset 0) s"
            ).fetchone()
        files_after, used_after = temp_usage(conn)
    assert files_after > files and used_after - used > 1_000_000


def test_the_widest_window_over_a_whole_document_is_fast_and_writes_no_temp_files(
    corpus: Corpus,
) -> None:
    ids = corpus.longest_document
    with api_connection(corpus.db) as conn:
        files, used = temp_usage(conn)
        rows, state, message, seconds = call(
            conn,
            "authenticated",
            "select chunk_ids, content from public.chunk_windows(%s, 10)",
            (ids,),
        )
        assert temp_usage(conn) == (files, used)
    assert state is None, message
    assert rows is not None and len(rows) == 1  # the whole document, merged once
    assert rows[0][0] == ids
    assert seconds < 1.0


def test_mmr_over_3000_candidates_is_bounded(corpus: Corpus) -> None:
    emb = json.dumps(corpus.query_embedding)
    with api_connection(corpus.db) as conn:
        for role in ROLES:
            rows, state, message, seconds = call(
                conn,
                role,
                "select chunk_id from public.hybrid_search(null, %s::vector, 3000, "
                "candidate_count => 3000, mmr_lambda => 0.5)",
                (emb,),
            )
            assert state is None, message
            assert rows and len(rows) <= 1000
            assert seconds < 1.5, (role, seconds)


def test_mmr_order_refuses_more_than_1000_caller_made_candidates(corpus: Corpus) -> None:
    vectors = "{" + ",".join(['"[1,0,0]"'] * 1001) + "}"
    assert_refused(
        corpus,
        "select pgrag.mmr_order(%s::vector[], null, 0.5, 1001)",
        (vectors,),
        "embeddings",
        "at most 1000 elements",
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            "2147483647, array['acme'], array[1::bigint], array['english'], array['a'::tsvector]",
            "sign must be 1 (add) or -1 (remove)",
        ),
        (
            "1, array['acme','acme'], array[1::bigint], array['english'], array['a'::tsvector]",
            "chunk_ids must have as many elements",
        ),
        (
            "1, array['acme'], array[null::bigint], array['english'], array['a'::tsvector]",
            "chunk_ids and the other arrays",
        ),
    ],
    ids=["sign", "unequal-arrays", "null-chunk-id"],
)
def test_bm25_apply_refuses_a_malformed_batch_before_writing(
    corpus: Corpus, arguments: str, message: str
) -> None:
    # (The owner's alone: the BM25 trigger calls it as the owner; no API role may execute it.)
    with (
        connect(corpus.db) as conn,
        pytest.raises(psycopg.errors.InvalidParameterValue) as raised,
    ):
        conn.execute(f"select pgrag.bm25_apply({arguments})")
    text = raised.value.diag.message_primary or ""
    assert text.startswith(message), text


# The widest searches a caller may ask for (docs/security.md, "Argument limits"): the largest
# counts, the widest window, the largest ef_search, each fusion.
WIDEST_SEARCHES = {
    "hybrid-window": "select chunk_id from public.hybrid_search(%(q)s, %(e)s::vector, "
    "match_count => 1000, candidate_count => 1000, window_size => 10)",
    "hybrid-rrf-ef": "select chunk_id from public.hybrid_search(%(q)s, %(e)s::vector, "
    "match_count => 1000, candidate_count => 1000, window_size => 10, fusion => 'rrf', "
    "ef_search => 1000)",
    "hybrid-mmr": "select chunk_id from public.hybrid_search(%(q)s, %(e)s::vector, "
    "match_count => 1000, candidate_count => 1000, window_size => 10, mmr_lambda => 0.5)",
    "build_context": "select sources from public.build_context(%(q)s, %(e)s::vector, "
    "match_count => 1000, window_size => 10, token_budget => 1000000)",
    "chunk_windows": "select chunk_ids from public.chunk_windows("
    "(select array_agg(id) from generate_series(1, 1000) as id)::bigint[], 10)",
}


@pytest.mark.parametrize("role", ["anon", "authenticated"])
@pytest.mark.parametrize("statement", WIDEST_SEARCHES.values(), ids=WIDEST_SEARCHES.keys())
def test_the_widest_searches_write_no_temp_files(corpus: Corpus, role: str, statement: str) -> None:
    with api_connection(corpus.db) as conn:
        before = temp_usage(conn)
        rows, state, message, _ = call(
            conn, role, statement, {"q": "search", "e": str(corpus.query_embedding)}
        )
        after = temp_usage(conn)
    assert state is None, message
    assert rows
    assert (after[0] - before[0], after[1] - before[1]) == (0, 0)


@pytest.mark.parametrize(
    "statement",
    [
        "select chunk_id from public.keyword_search('search', 2147483647)",
        "select chunk_id from public.vector_search(%(e)s::vector, 2147483647)",
        "select chunk_id from public.hybrid_search('search', %(e)s::vector, 2147483647, "
        "candidate_count => 2147483647)",
        "select chunk_id from public.hybrid_search('search', %(e)s::vector, 2147483647, "
        "candidate_count => 2147483647, window_size => 10)",
        "select sources from public.build_context('search', %(e)s::vector, "
        "match_count => 2147483647, window_size => 10)",
    ],
    ids=["keyword", "vector", "hybrid", "hybrid-window", "build_context"],
)
def test_huge_match_and_candidate_counts_are_clamped_not_overflowed(
    corpus: Corpus, statement: str
) -> None:
    with api_connection(corpus.db) as conn:
        for role in ROLES:
            rows, state, message, seconds = call(
                conn, role, statement, {"e": json.dumps(corpus.query_embedding)}
            )
            assert state is None, (role, message)
            assert rows is not None and len(rows) <= 1000
            assert seconds < 2.0, (role, seconds)


@pytest.mark.parametrize(
    ("statement", "argument", "range_text"),
    [
        ("select * from public.keyword_search('search', -1)", "match_count", "at least 0"),
        (
            "select * from public.keyword_search('search', match_offset => 1001)",
            "match_offset",
            "between 0 and 1000",
        ),
        (
            "select * from public.vector_search(null, match_offset => -1)",
            "match_offset",
            "between 0 and 1000",
        ),
        (
            "select * from public.hybrid_search('search', null, match_offset => 1001)",
            "match_offset",
            "between 0 and 1000",
        ),
        (
            "select * from public.highlight(array(select generate_series(1, 101))::bigint[], 'x')",
            "chunk_ids",
            "at most 100 elements",
        ),
        (
            "select * from public.highlight(array[1]::bigint[], 'x', max_chars => 2001)",
            "max_chars",
            "between 20 and 2000",
        ),
        (
            "select * from public.highlight(array[1]::bigint[], 'x', repeat('m', 65))",
            "start_mark",
            "at most 64 characters",
        ),
        (
            "select * from public.hybrid_search('search', null, candidate_count => 0)",
            "candidate_count",
            "at least 1",
        ),
        (
            "select * from public.hybrid_search('search', null, fusion => 'rrf', rrf_k => -1)",
            "rrf_k",
            "between 0 and 10000",
        ),
        (
            "select * from public.hybrid_search('search', null, vector_weight => 'NaN')",
            "vector_weight",
            "between 0 and 100",
        ),
        (
            "select * from public.hybrid_search('search', null, keyword_weight => '-Infinity')",
            "keyword_weight",
            "between 0 and 100",
        ),
        (
            "select * from public.hybrid_search('search', null, min_score => 'NaN')",
            "min_score",
            "must be a number, not NaN",
        ),
        (
            "select * from public.hybrid_search('search', null, mmr_lambda => 1.5)",
            "mmr_lambda",
            "between 0 and 1",
        ),
        (
            "select * from public.hybrid_search('search', null, ef_search => 0)",
            "ef_search",
            "at least 1",
        ),
        (
            "select * from public.keyword_search('search', k1 => -1.2)",
            "k1",
            "between 0 and 10",
        ),
        ("select * from public.keyword_search('search', b => 2)", "b", "between 0 and 1"),
        (
            "select * from public.build_context('search', null, token_budget => -1)",
            "token_budget",
            "between 0 and 1000000",
        ),
        (
            "select * from public.chunk_windows(array[1]::bigint[], 1, decay => 'NaN')",
            "decay",
            "between 0 and 1",
        ),
        (
            "select * from public.chunk_windows(array[1]::bigint[], 1, "
            "array['Infinity']::float8[])",
            "scores",
            "between -1000000 and 1000000",
        ),
        (
            "select * from public.chunk_windows(array(select generate_series(1, 1001))::bigint[])",
            "chunk_ids",
            "at most 1000 elements",
        ),
        (
            "select * from public.keyword_search('search', "
            "document_ids => array(select generate_series(1, 1001))::bigint[])",
            "document_ids",
            "at most 1000 elements",
        ),
    ],
)
def test_out_of_range_arguments_fail_fast_with_22023(
    corpus: Corpus, statement: str, argument: str, range_text: str
) -> None:
    assert_refused(corpus, statement, (), argument, range_text)


def test_an_80k_word_query_is_refused_instead_of_exhausting_the_stack(corpus: Corpus) -> None:
    text = " ".join(f"word{i}" for i in range(80_000))
    for statement in (
        "select * from public.keyword_search(%s)",
        "select * from public.hybrid_search(%s, null)",
        "select * from pgrag.keyword_query(%s, 'english')",
    ):
        assert_refused(corpus, statement, (text,), "query_text", "at most 10000 characters")


def test_a_query_with_more_than_64_distinct_terms_is_refused(corpus: Corpus) -> None:
    text = " ".join(f"term{i}" for i in range(65))
    with api_connection(corpus.db) as conn:
        rows, state, message, _ = call(
            conn, "authenticated", "select * from public.keyword_search(%s)", (text,)
        )
    assert state == "22023", (message, rows)
    assert message.startswith("query_text must have at most 64 distinct search terms")


@pytest.mark.parametrize("language", ["99999", "klingon", '"English"', "pg_catalog.nope"])
def test_a_language_that_names_no_configuration_is_refused(corpus: Corpus, language: str) -> None:
    for statement in (
        "select * from public.keyword_search('search', language => %s)",
        "select * from public.hybrid_search('search', null, language => %s)",
    ):
        assert_refused(corpus, statement, (language,), "language", "text search configuration")


def test_keyword_query_refuses_a_configuration_oid_that_does_not_exist(corpus: Corpus) -> None:
    assert_refused(
        corpus,
        "select * from pgrag.keyword_query('search', 99999::regconfig)",
        (),
        "config",
        "text search configuration",
    )


@pytest.mark.parametrize(
    ("values", "range_text"),
    [
        ([0.0] * DIMS, "non-zero vector"),
        ([1e-30] * DIMS, "non-zero vector"),  # its squared norm underflows: NaN scores
        ([1e30] * DIMS, "non-zero vector"),  # overflows
        ([1.0] * 3, f"{DIMS} dimensions"),
    ],
    ids=["zero", "underflow", "overflow", "dimension"],
)
def test_a_query_vector_without_a_cosine_similarity_is_refused(
    corpus: Corpus, values: list[float], range_text: str
) -> None:
    vector = json.dumps(values)
    for statement in (
        "select * from public.vector_search(%s::vector, 5, min_similarity => 0.5)",
        "select * from public.hybrid_search('search', %s::vector, min_score => 0.5)",
        "select * from public.build_context('search', %s::vector, min_score => 0.5)",
    ):
        assert_refused(corpus, statement, (vector,), "query_embedding", range_text)


def test_values_at_the_limits_are_accepted(corpus: Corpus) -> None:
    emb = json.dumps(corpus.query_embedding)
    with api_connection(corpus.db) as conn:
        rows, state, message, _ = call(
            conn,
            "authenticated",
            "select chunk_id from public.hybrid_search('search', %s::vector, 1000, "
            "fusion => 'rrf', rrf_k => 0, vector_weight => 100, keyword_weight => 0, "
            "candidate_count => 1000, window_size => 10, mmr_lambda => 1, min_score => -1, "
            "ef_search => 1000, language => 'simple')",
            (emb,),
        )
    assert state is None, message
    assert rows


# -- every function anon or authenticated may execute, with random and hostile values ------------


@dataclass
class Function:
    schema: str
    name: str
    volatility: str
    args: list[tuple[str, str, bool]]  # (name, type, has a default)
    roles: list[str]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


CATALOG_SQL = """
select n.nspname, p.proname, p.provolatile,
       coalesce((select json_agg(json_build_array(a.name, pg_catalog.format_type(a.typ, null),
                                                  a.ord > p.pronargs - p.pronargdefaults)
                                 order by a.ord)
                 from rows from (pg_catalog.unnest(p.proargtypes::oid[]),
                                 pg_catalog.unnest(p.proargnames))
                      with ordinality as a(typ, name, ord)
                 where a.typ is not null), '[]'::json),
       array_remove(array[case when pg_catalog.has_function_privilege('anon', p.oid, 'EXECUTE')
                               then 'anon' end,
                          case when pg_catalog.has_function_privilege('authenticated', p.oid,
                                                                      'EXECUTE')
                               then 'authenticated' end], null)
from pg_catalog.pg_proc p
join pg_catalog.pg_namespace n on n.oid = p.pronamespace
where n.nspname in ('public', 'pgrag')
  and p.prokind = 'f'
  and p.prorettype <> 'pg_catalog.trigger'::pg_catalog.regtype
  and not exists (select 1 from pg_catalog.pg_depend d
                  where d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass and d.objid = p.oid
                    and d.deptype = 'e')
  and (pg_catalog.has_function_privilege('anon', p.oid, 'EXECUTE')
       or pg_catalog.has_function_privilege('authenticated', p.oid, 'EXECUTE'))
order by 1, 2
"""


def executable_functions(db: str) -> list[Function]:
    """Every function of schemas public and pgrag anon or authenticated may execute."""
    with connect(db) as conn:
        rows = conn.execute(CATALOG_SQL).fetchall()
    # Arguments are named in order of the IN arguments only when no OUT argument precedes them;
    # pgrag's functions declare OUT arguments last (keyword_query), so the zip above holds.
    return [
        Function(schema, name, vol, [(a[0], a[1], bool(a[2])) for a in args], list(roles))
        for schema, name, vol, args, roles in rows
    ]


def test_only_known_writers_are_executable_without_argument_checks(corpus: Corpus) -> None:
    writers = {f.qualified for f in executable_functions(corpus.db) if f.volatility == "v"}
    assert writers <= KNOWN_WRITERS, writers - KNOWN_WRITERS


HOSTILE_TEXTS = [
    "",
    " ",
    "search",
    "'; drop table pgrag.chunks; --",
    "vacation' or '1'='1",
    "$$; delete from pgrag.documents; $$",
    "!!! && || <-> :* & ' \" \\ ( ) <2> ! -",
    f'"{GLOBEX_MARKER[:6]}" or globex -acme',
    "99999",
    "english",
    "simple",
    "pg_catalog.german",
    "klingon",
    '"English"',
    "acme",
    "globex",
    "a" * 10_001,
    "\u202e\u0645\u0631\u062d\u0628\u0627 " * 200,
    "\U0001f642" * 3000,
    "ß ﬁ İ ǅ \u0301\u0301\u0301 " * 100,
    " ".join(f"term{i}" for i in range(300)),
    " ".join(f"word{i}" for i in range(80_000)),
    "(" * 5000 + "x" + ")" * 5000,
    '"' * 3001,
    "-" * 9999,
    "a\x00b",
]
SAFE_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
INT4 = st.one_of(
    st.sampled_from(
        [0, 1, -1, 2, 10, 999, 1000, 1001, 2000, 2001, 10_000, 2**31 - 1, -(2**31), 2**31, 2**63]
    ),
    st.integers(-(2**31), 2**31 - 1),
)
FLOAT8 = st.one_of(
    st.sampled_from(
        ["NaN", "Infinity", "-Infinity", 0.0, -0.0, 1.0, -1.0, 0.5, 1e308, -1e308, 5e-324, 100.0]
    ),
    st.floats(allow_nan=False, allow_infinity=False),
)
TEXT = st.one_of(st.sampled_from(HOSTILE_TEXTS), st.text(SAFE_CHARS, max_size=200))
SHORT_TEXT = st.one_of(st.sampled_from(HOSTILE_TEXTS[:16]), st.text(SAFE_CHARS, max_size=30))
TIMESTAMPS = st.one_of(
    st.sampled_from(
        ["infinity", "-infinity", "294276-12-31 23:59:59Z", "4713-01-01 00:00:00 BC", "garbage"]
    ),
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def strategies(corpus: Corpus) -> dict[str, st.SearchStrategy[Any]]:
    """A strategy of JSON values (as PostgREST receives them) for each argument type."""
    ids = sorted(corpus.chunks["acme"] | corpus.chunks["globex"])
    doc_ids = sorted(corpus.documents["acme"] | corpus.documents["globex"])
    emb = corpus.query_embedding
    vectors = st.one_of(
        st.sampled_from(
            [emb, [0.0] * DIMS, [1e-30] * DIMS, [1e30] * DIMS, [3e38] * DIMS, [1.0] * 3, [], [1.0]]
        ),
        st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=DIMS, max_size=DIMS),
        st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=1, max_size=8),
    )

    def vector_array(vs: list[list[float]]) -> str:
        return "{" + ",".join('"' + json.dumps(v) + '"' for v in vs) + "}"

    def big(values: list[Any]) -> st.SearchStrategy[Any]:
        return st.sampled_from(values)

    return {
        "boolean": st.booleans(),
        "integer": INT4,
        "bigint": st.one_of(st.sampled_from(ids), INT4, st.integers(-(2**63), 2**63 - 1)),
        "double precision": FLOAT8,
        "text": TEXT,
        "regconfig": st.one_of(
            st.sampled_from(["english", "simple", "99999", "3748", "0", "-1", "klingon"]),
            SHORT_TEXT,
        ),
        "regclass": st.sampled_from(["pgrag.chunks", "pg_class", "99999"]),
        "jsonb": st.one_of(
            JSON,
            st.sampled_from(
                [
                    {"tenant_id": "globex"},
                    {"team": "globex"},
                    {"k": "v" * 20_000},
                    json.loads("[" * 500 + "]" * 500),
                ]
            ),
        ),
        "timestamp with time zone": TIMESTAMPS,
        "vector": vectors,
        "bigint[]": st.one_of(
            st.lists(st.one_of(st.sampled_from(ids + doc_ids), st.none(), INT4), max_size=30),
            big([ids, list(range(1, 5001)), [ids[0]] * 1001, list(range(-1000, 0))]),
        ),
        "text[]": st.one_of(
            st.lists(
                st.one_of(
                    st.sampled_from(["acme", "globex", "", "markdown", "pdf", "text"]),
                    SHORT_TEXT,
                    st.none(),
                ),
                max_size=12,
            ),
            big([["globex"] * len(ids), ["x"] * 5000]),
        ),
        "integer[]": st.one_of(
            st.lists(st.one_of(INT4, st.none()), max_size=30),
            big([list(range(1, 5001)), [1] * 1001, list(range(-1000, 0))]),
        ),
        "tsquery": st.one_of(
            st.sampled_from(
                ["'a'", "'globex' & 'acme'", "'a' <-> 'b'", "!'x'", "'a' <1000> 'b'", "", "&&"]
            ),
            st.sampled_from([" | ".join(f"'w{i}'" for i in range(5000))]),
            SHORT_TEXT,
        ),
        "double precision[]": st.one_of(
            st.lists(st.one_of(FLOAT8, st.none()), max_size=20),
            big([[0.5] * 5000, [1.0] * 1001]),
        ),
        "tsvector[]": st.one_of(
            st.lists(
                st.one_of(
                    st.sampled_from(["'a':1", "'globex':1,2 'acme':3A", "", "'x':1A"]),
                    SHORT_TEXT,
                    st.none(),
                ),
                max_size=12,
            ),
            big([["'w':1"] * 5000, ["'w':1"] * 10_001]),
        ),
        "vector[]": st.one_of(
            st.lists(vectors, max_size=12).map(vector_array),
            big(
                [
                    vector_array([emb] * 1001),
                    vector_array([emb] * 1000),
                    vector_array([[1.0] * 3, emb]),
                    "{}",
                ]
            ),
        ),
    }


@dataclass
class Worst:
    seconds: float = 0.0
    temp_bytes: int = 0
    seconds_call: str = ""
    temp_call: str = ""
    calls: int = 0
    refused: int = 0
    type_errors: int = 0
    per_function: dict[str, int] = field(default_factory=dict)


IDS_KEYS = ("chunk_id", "chunk_ids", "hit_chunk_ids", "best_chunk_id")


def collect(value: Any, keys: tuple[str, ...], out: set[Any]) -> None:
    """Every value under one of ``keys`` anywhere in a JSON result."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in keys and v is not None:
                out.update(v if isinstance(v, list) else [v])
            collect(v, keys, out)
    elif isinstance(value, list):
        for v in value:
            collect(v, keys, out)


def assert_no_foreign_rows(corpus: Corpus, role: str, fn: Function, rows: list[Any]) -> None:
    visible = corpus.chunks["public"] if role == "anon" else corpus.chunks["acme"]
    visible_docs = corpus.documents["public"] if role == "anon" else corpus.documents["acme"]
    payload = [r[0] for r in rows]
    chunk_ids: set[Any] = set()
    collect(payload, IDS_KEYS, chunk_ids)
    assert chunk_ids <= visible, (fn.qualified, role, chunk_ids - visible)
    doc_ids: set[Any] = set()
    collect(payload, ("document_id",), doc_ids)
    assert doc_ids <= visible_docs, (fn.qualified, role, doc_ids - visible_docs)
    tenants: set[Any] = set()
    collect(payload, ("tenant_id",), tenants)
    assert tenants <= {"acme"}, (fn.qualified, role, tenants)
    text = json.dumps(payload)
    assert GLOBEX_MARKER not in text, (fn.qualified, role)
    if role == "anon":
        assert ACME_MARKER not in text, (fn.qualified, role)
    if fn.qualified == "pgrag.tenant_chunk_count":
        # a count is a signal too: only the caller's own tenant has chunks for it
        assert payload in ([0], [len(corpus.chunks["acme"])]), payload


def rpc_statement(fn: Function, args: dict[str, Any]) -> sql.Composed:
    """PostgREST's statement for an RPC with a JSON body: json_to_record, named arguments."""
    types = {name: typ for name, typ, _ in fn.args}
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(types[n])) for n in args
    )
    named = sql.SQL(", ").join(
        sql.SQL("{0} := (select {0} from pgrst_args)").format(sql.Identifier(n)) for n in args
    )
    target = sql.SQL("{}.{}").format(sql.Identifier(fn.schema), sql.Identifier(fn.name))
    if not args:
        return sql.SQL("select to_jsonb(pgrst_call) from {}() as pgrst_call").format(target)
    return sql.SQL(
        "with pgrst_args as (select * from json_to_record(%s::json) as _({})) "
        "select to_jsonb(pgrst_call) from {}({}) as pgrst_call"
    ).format(columns, target, named)


def describe(args: dict[str, Any]) -> str:
    def short(v: Any) -> str:
        s = json.dumps(v, ensure_ascii=False)
        return s if len(s) <= 60 else f"{s[:40]}... ({len(s)} chars)"

    return ", ".join(f"{k} => {short(v)}" for k, v in args.items())


def run_one(
    conn: psycopg.Connection[Any],
    corpus: Corpus,
    fn: Function,
    role: str,
    args: dict[str, Any],
    worst: Worst,
) -> None:
    body = json.dumps(args, allow_nan=False)
    statement = rpc_statement(fn, args)
    params = (body,) if args else ()
    # Values that do not fit a parameter's type are refused by PostgREST's json_to_record (a
    # 400 from PostgREST) before pgrag runs: not pgrag's to check.
    if args:
        types = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t))
            for n, t, _ in fn.args
            if n in args
        )
        _, state, _, _ = call(
            conn,
            role,
            sql.SQL("select * from json_to_record(%s::json) as _({})").format(types).as_string(),
            (body,),
        )
        if state is not None:
            worst.type_errors += 1
            return
    files, used = temp_usage(conn)
    writer = fn.qualified in KNOWN_WRITERS
    rows, state, message, seconds = call(
        conn, role, statement.as_string(), params, roll_back=writer
    )
    files_after, used_after = temp_usage(conn)
    what = f"{role}: {fn.qualified}({describe(args)})"
    worst.calls += 1
    worst.per_function[fn.qualified] = worst.per_function.get(fn.qualified, 0) + 1
    if seconds > worst.seconds:
        worst.seconds, worst.seconds_call = seconds, what
    if used_after - used > worst.temp_bytes:
        worst.temp_bytes, worst.temp_call = used_after - used, what
    assert state != "57014", f"hit the {TIMEOUT_S} s statement_timeout: {what}"
    plpython = {"PR301"} if fn.qualified in NEED_PLPYTHON else set()
    documented = DOCUMENTED_SQLSTATES | WRITER_SQLSTATES.get(fn.qualified, set()) | plpython
    assert state is None or state in documented, f"{state} {message}: {what}"
    assert seconds < TIMEOUT_S, what
    assert (files_after - files, used_after - used) == (0, 0), f"temp files: {what}"
    if state in plpython:
        return  # no PL/Python here: the one documented error, whatever the arguments
    if state is not None:
        worst.refused += 1
        # a validator names the argument it is given; the others name theirs first
        if state == "22023" and fn.qualified not in VALIDATORS:
            assert re.match(r"^[a-z_0-9]+ ", message), message
        return
    assert rows is not None
    assert_no_foreign_rows(corpus, role, fn, rows)


EXAMPLES_PER_FUNCTION_AND_ROLE = 30


def property_check(
    conn: psycopg.Connection[Any],
    corpus: Corpus,
    fn: Function,
    role: str,
    by_type: dict[str, st.SearchStrategy[Any]],
    worst: Worst,
) -> Any:
    """A hypothesis test calling ``fn`` as ``role`` with generated arguments."""
    # Each argument is left out (when it has a default), null, or a generated value.
    parts = {
        name: (
            st.one_of(st.just(...), st.none(), by_type[typ])
            if has_default
            else st.one_of(st.none(), by_type[typ])
        )
        for name, typ, has_default in fn.args
    }
    arguments = st.fixed_dictionaries(parts).map(
        lambda d: {k: v for k, v in d.items() if v is not ...}
    )

    @settings(
        max_examples=EXAMPLES_PER_FUNCTION_AND_ROLE,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(args=arguments)
    def check(args: dict[str, Any]) -> None:
        run_one(conn, corpus, fn, role, args, worst)

    for widest in widest_examples(corpus, fn):
        check = example(args=widest)(check)
    return check


# The largest work a caller may ask for, tried on every function that takes these arguments
# (besides the generated examples, which seldom combine them): each count at its maximum, the
# widest window, the largest ef_search, with each fusion. Over the generated document they
# handle tens of thousands of chunk rows: no temporary file may be written.
WIDEST = {
    "match_count": 1000,
    "candidate_count": 1000,
    "select_count": 2000,
    "window_size": 10,
    "ef_search": 1000,
    "token_budget": 1_000_000,
    "match_offset": 1000,
}


def widest_examples(corpus: Corpus, fn: Function) -> list[dict[str, Any]]:
    names = {name for name, _, _ in fn.args}
    if not names & {"match_count", "window_size", "select_count"}:
        return []
    base = {k: v for k, v in WIDEST.items() if k in names}
    if "query_text" in names:
        base["query_text"] = QUERY
    if "query_embedding" in names:
        base["query_embedding"] = corpus.query_embedding
    if "chunk_ids" in names:
        base["chunk_ids"] = sorted(corpus.chunks["acme"])[:1000]
        if "tenant_ids" in names:  # hits with their tenants (pgrag.context_from_hits)
            base["tenant_ids"] = ["acme"] * len(base["chunk_ids"])
    if "scores" in names:
        base["scores"] = None
    if not {name for name, _, has_default in fn.args if not has_default} <= set(base):
        return []  # an argument this example cannot fill: the generated examples cover it
    out = [base]
    if "fusion" in names:
        out.extend({**base, "fusion": fusion} for fusion in ("rrf", "zscore"))
    if "mmr_lambda" in names:
        out.append({**base, "mmr_lambda": 0.5})
    return out


def test_property_every_executable_function_bounds_hostile_arguments(corpus: Corpus) -> None:
    functions = [
        f
        for f in executable_functions(corpus.db)
        if f.qualified not in CHECKED_BY_CALLERS | FUZZED_WRITERS
    ]
    names = {f.qualified for f in functions}
    assert {
        "public.vector_search",
        "public.keyword_search",
        "public.hybrid_search",
        "public.chunk_windows",
        "public.build_context",
        "public.build_context_for",
        "pgrag.context_from_hits",
    } | (KNOWN_WRITERS - FUZZED_WRITERS) <= names
    by_type = strategies(corpus)
    missing = {t for f in functions for _, t, _ in f.args if t not in by_type}
    assert not missing, f"add a strategy for argument types {missing}"
    worst = Worst()
    started = time.perf_counter()
    with api_connection(corpus.db) as conn:
        for fn in functions:
            for role in fn.roles:
                property_check(conn, corpus, fn, role, by_type, worst)()
    elapsed = time.perf_counter() - started
    print(
        f"\nproperty test: {worst.calls} calls reached pgrag ({worst.refused} refused with "
        f"22023), {worst.type_errors} refused by argument types, {elapsed:.1f} s\n"
        f"slowest call: {worst.seconds * 1000:.0f} ms: {worst.seconds_call}\n"
        f"most temp bytes: {worst.temp_bytes}: {worst.temp_call or '(none)'}"
    )
    assert set(worst.per_function) == names, names - set(worst.per_function)
    assert not math.isnan(elapsed)


def run_writer(
    conn: psycopg.Connection[Any],
    fn: Function,
    role: str,
    args: dict[str, Any],
    worst: Worst,
) -> None:
    """One call of a writing RPC, rolled back: documented SQLSTATEs only, bounded, and what it
    wrote belongs to the caller's tenant (read back in the same transaction, as the caller)."""
    body = json.dumps(args, allow_nan=False)
    if args:
        types = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t))
            for n, t, _ in fn.args
            if n in args
        )
        _, state, _, _ = call(
            conn,
            role,
            sql.SQL("select * from json_to_record(%s::json) as _({})").format(types).as_string(),
            (body,),
        )
        if state is not None:
            worst.type_errors += 1
            return
    what = f"{role}: {fn.qualified}({describe(args)})"
    statement = rpc_statement(fn, args).as_string()
    started = time.perf_counter()
    state = message = None
    try:
        with replay(conn, role, rollback=True):
            rows = conn.execute(statement, (body,) if args else ()).fetchall()
            ids = [r[0]["document_id"] for r in rows]
            owners = conn.execute(
                "select d.tenant_id, q.tenant_id from unnest(%s::int8[]) as i (id) "
                "left join pgrag.documents as d on d.id = i.id "
                "left join pgrag.document_queue as q on q.document_id = i.id",
                (ids,),
            ).fetchall()
            assert owners == [("acme", "acme")] * len(ids), (what, owners)
    except psycopg.Error as exc:
        state, message = exc.sqlstate, str(exc)
    seconds = time.perf_counter() - started
    worst.calls += 1
    worst.per_function[fn.qualified] = worst.per_function.get(fn.qualified, 0) + 1
    if seconds > worst.seconds:
        worst.seconds, worst.seconds_call = seconds, what
    assert state != "57014", f"hit the {TIMEOUT_S} s statement_timeout: {what}"
    documented = DOCUMENTED_SQLSTATES | WRITER_SQLSTATES.get(fn.qualified, set())
    assert state is None or state in documented, f"{state} {message}: {what}"
    assert seconds < TIMEOUT_S, what
    if state is not None:
        worst.refused += 1
        assert re.match(r"^[a-z_0-9]+ ", message or ""), message


def writer_check(
    conn: psycopg.Connection[Any],
    fn: Function,
    by_type: dict[str, st.SearchStrategy[Any]],
    worst: Worst,
) -> Any:
    """A hypothesis test calling the writing RPC ``fn`` as authenticated, each call rolled
    back."""
    parts = {
        name: (
            st.one_of(st.just(...), st.none(), by_type[typ])
            if has_default
            else st.one_of(st.none(), by_type[typ])
        )
        for name, typ, has_default in fn.args
    }
    arguments = st.fixed_dictionaries(parts).map(
        lambda d: {k: v for k, v in d.items() if v is not ...}
    )

    @settings(
        max_examples=EXAMPLES_PER_FUNCTION_AND_ROLE * 2,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(args=arguments)
    def check(args: dict[str, Any]) -> None:
        run_writer(conn, fn, "authenticated", args, worst)

    return check


def test_property_the_writing_rpcs_bound_hostile_arguments_and_write_only_the_callers_tenant(
    corpus: Corpus,
) -> None:
    functions = [f for f in executable_functions(corpus.db) if f.qualified in FUZZED_WRITERS]
    assert {f.qualified for f in functions} == FUZZED_WRITERS
    by_type = strategies(corpus)
    worst = Worst()
    with api_connection(corpus.db) as conn:
        for fn in functions:
            assert fn.roles == ["authenticated"], fn.roles  # anon writes nothing
            writer_check(conn, fn, by_type, worst)()
    with connect(corpus.db) as admin:
        left = admin.execute("select count(*) from pgrag.document_queue").fetchone()
    print(
        f"\nwriters: {worst.calls} calls ({worst.refused} refused), {worst.type_errors} refused "
        f"by argument types; slowest {worst.seconds * 1000:.0f} ms: {worst.seconds_call}"
    )
    assert worst.calls > worst.refused > 0  # some submissions went through, some were refused
    assert left == (0,)  # every call was rolled back


def test_the_python_client_reports_an_out_of_range_argument_as_a_config_error(
    corpus: Corpus,
) -> None:
    options = SearchOptions(mode="hybrid", window=11)
    with connect(corpus.db) as conn, pytest.raises(ConfigError, match="window_size must be"):
        search(
            conn,
            "hybrid search",
            options,
            tenant="acme",
            query_embedding=np.asarray(corpus.query_embedding, dtype=np.float32),
        )
