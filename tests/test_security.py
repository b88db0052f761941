"""The search API under a hostile caller: every function as each role and tenant, forged tenants,
SQL injection, search_path hijacking, and an audit of SECURITY DEFINER functions and grants.

Connections are the ordinary login role of test_tenancy (``pgrag_test_authenticator``) switching
role per request, exactly as PostgREST does; never the superuser.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.dev_tools import INLINED_FUNCTIONS, dev_tool, pgspot_codes
from plugins.tenancy import (
    API_ROLES,
    Loaded,
    claims_for,
    request,
)
from psycopg import sql

from pgrag.db import connect, vector_schema
from pgrag.install.migrator import SECURE_SEARCH_PATH_SQL, discover, sql_dir

API_FUNCTIONS = (
    "vector_search",
    "keyword_search",
    "hybrid_search",
    "chunk_windows",
    "build_context",
    "hybrid_search_text",
    "rerank",
    "build_context_for",
    "log_search",
    "search_facets",
    "suggest_query",
    "highlight",
)
# The document queue's RPCs: a tenant submits and reads its queue (authenticated and
# service_role; anon has no tenant and writes nothing).
QUEUE_FUNCTIONS = ("submit_document", "document_status", "queue_status")
# The semantic answer cache's RPCs: a tenant's own lookups and answers (authenticated and
# service_role; anon has no tenant).
ANSWER_CACHE_FUNCTIONS = ("answer_cache_lookup", "answer_cache_store")
PUBLIC_FUNCTIONS = API_FUNCTIONS + QUEUE_FUNCTIONS + ANSWER_CACHE_FUNCTIONS
QUERY = "vacation policy paid leave"


@pytest.fixture(scope="module")
def query_embedding(local_embedder: Any) -> np.ndarray:
    return np.asarray(local_embedder.embed([QUERY])[0], dtype=np.float32)


def call_all(conn: psycopg.Connection[Any], emb: np.ndarray, **extra: Any) -> dict[str, set[int]]:
    """Chunk ids every API function returns for QUERY (build_context: its sources' chunk ids)."""
    args = {"query_text": QUERY, "query_embedding": emb, "match_count": 20, **extra}
    out: dict[str, set[int]] = {}
    named = ", ".join(f"{k} := %({k})s" for k in ("query_embedding", "match_count"))
    vext = {k: v for k, v in extra.items() if k != "language"}
    vnamed = ", ".join(f"{k} := %({k})s" for k in vext)
    out["vector_search"] = {
        r[0]
        for r in conn.execute(
            f"select chunk_id from public.vector_search({named}{', ' if vnamed else ''}{vnamed})",
            args,
        )
    }
    knamed = ", ".join(f"{k} := %({k})s" for k in extra)
    out["keyword_search"] = {
        r[0]
        for r in conn.execute(
            "select chunk_id from public.keyword_search(query_text := %(query_text)s, "
            f"match_count := %(match_count)s{', ' if knamed else ''}{knamed})",
            args,
        )
    }
    out["hybrid_search"] = {
        r[0]
        for r in conn.execute(
            "select chunk_id from public.hybrid_search(query_text := %(query_text)s, "
            "query_embedding := %(query_embedding)s, match_count := %(match_count)s"
            f"{', ' if knamed else ''}{knamed})",
            args,
        )
    }
    bnamed = ", ".join(f"{k} := %({k})s" for k in extra if k != "language")
    context = conn.execute(
        "select context, sources from public.build_context(query_text := %(query_text)s, "
        f"query_embedding := %(query_embedding)s{', ' if bnamed else ''}{bnamed})",
        args,
    ).fetchall()
    out["build_context"] = set()
    for text, sources in context:
        for source in sources or []:
            out["build_context"].update(source_chunk_ids(source))
        if text:
            out["build_context_text"] = {1}
    return out


def source_chunk_ids(source: dict[str, Any]) -> set[int]:
    ids: set[int] = set()
    for key in ("chunk_ids", "hit_chunk_ids"):
        ids.update(int(i) for i in source.get(key) or [])
    if "chunk_id" in source and source["chunk_id"] is not None:
        ids.add(int(source["chunk_id"]))
    return ids


def document_ids_of_sources(conn: psycopg.Connection[Any], emb: np.ndarray) -> set[int]:
    rows = conn.execute(
        "select sources from public.build_context(query_text := %s, query_embedding := %s)",
        (QUERY, emb),
    ).fetchall()
    return {int(s["document_id"]) for (sources,) in rows for s in (sources or [])}


def windows(conn: psycopg.Connection[Any], ids: list[int]) -> set[int]:
    rows = conn.execute(
        "select chunk_ids from public.chunk_windows(chunk_ids := %s, window_size := 1)", (ids,)
    ).fetchall()
    return {i for (chunk_ids,) in rows for i in chunk_ids}


# -- every function, each tenant -----------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["acme", "globex"])
def test_every_function_returns_only_the_callers_tenant(
    two_tenants: Loaded, query_embedding: np.ndarray, tenant: str
) -> None:
    own = set(two_tenants.chunks[tenant])
    other = set(two_tenants.chunks["globex" if tenant == "acme" else "acme"])
    with request(two_tenants.db, "authenticated", claims_for(tenant)) as conn:
        results = call_all(conn, query_embedding)
        all_ids = sorted(own | other)
        windowed = windows(conn, all_ids)
        docs = document_ids_of_sources(conn, query_embedding)
    for name in ("vector_search", "keyword_search", "hybrid_search"):
        assert results[name], f"{name} found nothing for {tenant}"
        assert results[name] <= own, (name, results[name] - own)
        assert not results[name] & other
    # The vacation chunk of the caller's own handbook is found by every arm.
    vacation = two_tenants.chunks[tenant][0]
    assert vacation in results["hybrid_search"]
    assert windowed == own
    assert docs and docs <= set(two_tenants.documents[tenant])
    assert results.get("build_context_text")


def test_postgrest_rpc_with_a_json_body_works_as_supabase_js_sends_it(
    two_tenants: Loaded, query_embedding: np.ndarray
) -> None:
    # supabase.rpc('hybrid_search', {query_text, query_embedding, match_count}): PostgREST turns
    # the JSON body into named arguments with json_to_record, the embedding a JSON array.
    body = json.dumps(
        {"query_text": QUERY, "query_embedding": query_embedding.tolist(), "match_count": 3}
    )
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        vschema = vector_schema(conn)
        assert vschema is not None
        rows = conn.execute(
            sql.SQL(
                "with pgrst_args as (select * from json_to_record(%s::json) as _("
                "query_text text, query_embedding {}.vector, match_count integer)) "
                "select to_jsonb(pgrst_call) from public.hybrid_search("
                '"query_text" := (select query_text from pgrst_args), '
                '"query_embedding" := (select query_embedding from pgrst_args), '
                '"match_count" := (select match_count from pgrst_args)) as pgrst_call'
            ).format(sql.Identifier(vschema)),
            (body,),
        ).fetchall()
    assert len(rows) == 3
    assert {r[0]["chunk_id"] for r in rows} <= set(two_tenants.chunks["acme"])
    assert {"title", "source_uri", "content", "score", "vector_score", "keyword_score"} <= set(
        rows[0][0]
    )


def test_anon_search_returns_only_public_documents(
    two_tenants: Loaded, query_embedding: np.ndarray
) -> None:
    public = set(two_tenants.public_chunks)
    with request(two_tenants.db, "anon") as conn:
        results = call_all(conn, query_embedding)
        windowed = windows(conn, sorted(c for t in two_tenants.chunks.values() for c in t))
    for name in ("vector_search", "keyword_search", "hybrid_search", "build_context"):
        assert results[name] <= public, (name, results[name] - public)
    # Public documents are searchable without a login (the vector arm; BM25 statistics are
    # not exposed to anon).
    assert results["vector_search"] == public
    assert windowed == public


@pytest.mark.parametrize(
    "claims",
    [{}, {"role": "authenticated"}, {"role": "authenticated", "tenant_id": ""}],
    ids=["empty", "no-tenant", "blank-tenant"],
)
def test_claims_without_tenant_find_nothing(
    two_tenants: Loaded, query_embedding: np.ndarray, claims: dict[str, Any]
) -> None:
    with request(two_tenants.db, "authenticated", claims) as conn:
        results = call_all(conn, query_embedding)
        windowed = windows(conn, sorted(c for t in two_tenants.chunks.values() for c in t))
    for name in ("vector_search", "keyword_search", "hybrid_search", "build_context"):
        assert results[name] == set(), name
    assert windowed == set()


# -- forged tenants ------------------------------------------------------------------------------


def test_no_api_function_takes_a_tenant_argument(db: str) -> None:
    with connect(db) as conn:
        rows = conn.execute(
            "select p.proname, a.name from pg_proc p, unnest(p.proargnames, "
            "coalesce(p.proargmodes::text[], array_fill('i'::text, "
            "array[cardinality(p.proargnames)]))) as a(name, mode) "
            "where p.pronamespace = 'public'::regnamespace and p.proname = any(%s) "
            "and a.mode in ('i', 'b', 'v')",  # arguments only: results may name the tenant
            (list(PUBLIC_FUNCTIONS),),
        ).fetchall()
    assert {r[0] for r in rows} == set(PUBLIC_FUNCTIONS) - {"queue_status"}  # no arguments
    assert [r for r in rows if "tenant" in r[1].lower()] == []


@pytest.mark.parametrize(
    "extra",
    [
        {"metadata_filter": json.dumps({"team": "globex"})},
        {"metadata_filter": json.dumps({"tenant_id": "globex"})},
        {"source_types": ["markdown"], "metadata_filter": json.dumps({"team": "globex"})},
    ],
    ids=["metadata-team", "metadata-tenant", "source-and-metadata"],
)
def test_filters_naming_another_tenant_yield_nothing(
    two_tenants: Loaded, query_embedding: np.ndarray, extra: dict[str, Any]
) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        results = call_all(conn, query_embedding, **extra)
    for name in ("vector_search", "keyword_search", "hybrid_search", "build_context"):
        assert results[name] == set(), (name, results[name])


def test_document_ids_of_another_tenant_yield_nothing(
    two_tenants: Loaded, query_embedding: np.ndarray
) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        results = call_all(conn, query_embedding, document_ids=two_tenants.documents["globex"])
        windowed = windows(conn, two_tenants.chunks["globex"])
    for name in ("vector_search", "keyword_search", "hybrid_search", "build_context"):
        assert results[name] == set(), name
    assert windowed == set()


def test_internal_helpers_called_directly_with_a_forged_tenant_reach_nothing(
    two_tenants: Loaded,
) -> None:
    globex = two_tenants.chunks["globex"]
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        assert conn.execute("select pgrag.tenant_chunk_count('globex')").fetchone() == (0,)
        rows = conn.execute(
            "select * from pgrag.windows(%s, %s, 1)", (["globex"] * len(globex), globex)
        ).fetchall()
        assert rows == []
        assert conn.execute("select pgrag.current_tenant_id()").fetchone() == ("acme",)


def test_a_tenant_cannot_switch_claims_inside_an_rpc(two_tenants: Loaded) -> None:
    # Over PostgREST no SQL of the caller's runs; the only functions reachable are the API's.
    # set_config is not among them: the exposed schema (public) holds no wrapper of it.
    with connect(two_tenants.db) as conn:
        rows = conn.execute(
            "select p.oid::regprocedure::text from pg_proc p "
            "where p.pronamespace = 'public'::regnamespace and p.prosrc ~* 'set_config' "
            "and p.proname = any(%s)",
            (list(API_FUNCTIONS),),
        ).fetchall()
    assert rows == []


# -- SQL injection -------------------------------------------------------------------------------

INJECTIONS = [
    "'; drop table pgrag.chunks; --",
    "vacation' or '1'='1",
    "$$; delete from pgrag.documents; $$",
    "vacation) | (globex",
    "!!! && || <-> :* & ' \" \\",
    '-vacation OR "paid leave" globex:*',
    "vacation'::text; select pg_sleep(5); --",
    "' union select tenant_id, id from pgrag.chunks --",
]


@pytest.mark.parametrize("text", INJECTIONS)
def test_injection_strings_in_query_text_are_just_text(
    two_tenants: Loaded, query_embedding: np.ndarray, text: str
) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        rows = conn.execute(
            "select chunk_id from public.hybrid_search(query_text := %s, query_embedding := %s)",
            (text, query_embedding),
        ).fetchall()
        kw = conn.execute(
            "select chunk_id from public.keyword_search(query_text := %s)", (text,)
        ).fetchall()
        conn.execute(
            "select * from public.build_context(query_text := %s, query_embedding := %s)",
            (text, query_embedding),
        ).fetchall()
    assert {r[0] for r in rows + kw} <= set(two_tenants.chunks["acme"])
    with connect(two_tenants.db) as admin:
        counts = admin.execute(
            "select (select count(*) from pgrag.chunks), (select count(*) from pgrag.documents)"
        ).fetchone()
    assert counts == (7, 3)


@pytest.mark.parametrize(
    "extra",
    [
        {"metadata_filter": json.dumps({"team": "acme' or '1'='1"})},
        {"source_types": ["markdown') or true --", "text"]},
        {"language": "english'; drop table pgrag.chunks; --"},
        {"language": "pg_catalog.simple"},
    ],
    ids=["metadata", "source-types", "language-injection", "language-qualified"],
)
def test_injection_strings_in_filters_are_harmless(
    two_tenants: Loaded, query_embedding: np.ndarray, extra: dict[str, Any]
) -> None:
    try:
        with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
            results = call_all(conn, query_embedding, **extra)
        for name in ("vector_search", "keyword_search", "hybrid_search", "build_context"):
            assert results[name] <= set(two_tenants.chunks["acme"]), name
    except (
        psycopg.errors.DataError,
        psycopg.errors.InvalidName,
        psycopg.errors.UndefinedObject,
    ):
        pass  # a language that is no text-search configuration is rejected: also fine
    with connect(two_tenants.db) as admin:
        assert admin.execute("select count(*) from pgrag.chunks").fetchone() == (7,)


# -- search_path hijacking -----------------------------------------------------------------------

HIJACK_SQL = """
create schema evil;
grant usage on schema evil to public;
create table evil.log (what text);
grant select, insert, delete on evil.log to public;
create function evil.websearch_to_tsquery(regconfig, text) returns tsquery
    language plpgsql as $$ begin insert into evil.log values ('websearch');
    return 'globex'::tsquery; end $$;
create function evil.websearch_to_tsquery(text) returns tsquery
    language plpgsql as $$ begin insert into evil.log values ('websearch1');
    return 'globex'::tsquery; end $$;
create function public.websearch_to_tsquery(text) returns tsquery
    language plpgsql as $$ begin insert into evil.log values ('public-websearch');
    return 'globex'::tsquery; end $$;
create function evil.current_setting(text, boolean) returns text
    language plpgsql as $$ begin insert into evil.log values ('current_setting');
    return '{"tenant_id": "globex"}'; end $$;
create function evil.current_setting(text) returns text
    language plpgsql as $$ begin insert into evil.log values ('current_setting1');
    return '{"tenant_id": "globex"}'; end $$;
create function evil.text_eq_always(text, text) returns boolean
    language plpgsql as $$ begin insert into evil.log values ('='); return true; end $$;
create operator evil.= (leftarg = text, rightarg = text, function = evil.text_eq_always);
create function evil.jsonb_path_text(jsonb, text[]) returns text
    language plpgsql as $$ begin insert into evil.log values ('#>>'); return 'globex'; end $$;
create operator evil.#>> (leftarg = jsonb, rightarg = text[], function = evil.jsonb_path_text);
create function evil.array_agg_sfunc(anycompatiblearray, anycompatible) returns anycompatiblearray
    language plpgsql as $$ begin insert into evil.log values ('array_agg'); return $1 || $2; end $$;
create function evil.unnest(anyarray) returns setof anyelement
    language plpgsql as $$ begin insert into evil.log values ('unnest'); return; end $$;
create function evil.coalesce_like(text) returns text language sql as $$ select 'x' $$;
-- An attacker makes its own functions executable (the migrating role's default privileges
-- no longer do).
grant execute on all functions in schema evil to public;
grant execute on function public.websearch_to_tsquery(text) to public;
"""


def test_objects_on_the_callers_search_path_do_not_hijack_any_function(
    two_tenants: Loaded, query_embedding: np.ndarray
) -> None:
    db = two_tenants.db
    with connect(db) as admin:
        admin.execute(HIJACK_SQL)
        vschema = vector_schema(admin)
        assert vschema is not None
        admin.execute(
            sql.SQL(
                "create function evil.vec_dist(v1 {0}.vector, v2 {0}.vector) returns float8 "
                "language plpgsql as $$ begin insert into evil.log values ('<=>'); return 0; end $$"
            ).format(sql.Identifier(vschema))
        )
        admin.execute(
            sql.SQL(
                "create operator evil.<=> (leftarg = {0}.vector, rightarg = {0}.vector, "
                "function = evil.vec_dist)"
            ).format(sql.Identifier(vschema))
        )
        admin.commit()

    with request(db, "authenticated", claims_for("acme")) as conn:
        # evil before pg_catalog: unqualified names in the caller's own SQL would resolve there.
        conn.execute(
            sql.SQL("set local search_path = evil, public, {}, pg_catalog").format(
                sql.Identifier(vschema)
            )
        )
        assert conn.execute("select 'a' = 'b'").fetchone() == (True,)  # the trap is armed
        conn.execute("delete from evil.log")
        results = call_all(conn, query_embedding)
        windowed = windows(conn, sorted(c for t in two_tenants.chunks.values() for c in t))
        tenant = conn.execute("select pgrag.current_tenant_id()").fetchone()
        # pgrag.searchable pins no search_path (it must be inlined): called directly, with
        # every filter set, it must not reach the caller's operators either.
        ready = conn.execute(
            "select pgrag.searchable('ready', 1, '{\"a\": 1}', '{}', 'text', 'epoch', "
            "document_ids => array[1], metadata_filter => '{\"a\": 1}', "
            "source_types => array['pdf', 'markdown', 'html', 'text', 'url'], "
            "created_after => '-infinity', created_before => 'infinity'), "
            "pgrag.searchable('pending', 1, '{}', '{}', 'text', 'epoch')"
        ).fetchone()
        logged = [r[0] for r in conn.execute("select what from evil.log")]
    assert logged == []
    assert tenant == ("acme",)
    for name in ("vector_search", "keyword_search", "hybrid_search", "build_context"):
        assert results[name], name
        assert results[name] <= set(two_tenants.chunks["acme"]), name
    assert windowed == set(two_tenants.chunks["acme"])
    assert ready == (True, False)


# -- audit -----------------------------------------------------------------------------------------

# Every privilege held on pgrag's objects by a role other than the owner: (object, grantee,
# privilege). A change here is a security decision; update the list together with
# sql/idempotent/9NN-*.sql (the privileges band) and docs/security.md.
TENANT_TABLES = (
    "chunks",
    "documents",
    "query_embeddings",
)
# The BM25 index: written by the chunks triggers alone (as the owner), read by every API role.
BM25_TABLES = ("bm25_backlog", "bm25_lexicon", "bm25_postings", "corpus_stats")
# Tenant tables a tenant may not write freely (sql/idempotent/900-row-security.sql): its usage it
# only reads, its search log it adds to (column by column), reads and deletes, the re-embed
# queue is the owner's and service_role's alone; the saved embeddings of a long document being
# loaded a tenant reads and deletes (its loads reuse and drop them), never adds to.
READ_ONLY_TENANT_TABLES = ("token_usage",)
READ_DELETE_TENANT_TABLES = ("saved_embeddings",)
APPEND_ONLY_TENANT_TABLES = ("search_log",)
OWNER_TENANT_TABLES = ("chunk_embeddings_next",)
# The answer cache and its counters: a tenant's lookups read and write them (as the caller),
# anon has no tenant and no grant.
ANSWER_CACHE_TABLES = ("answer_cache", "answer_cache_counters")
# The internal helpers the API functions reach (docs/security.md, "Functions each role can
# execute"); delete_documents for the writing roles only.
PGRAG_FUNCTIONS = (
    "bm25_corpus",
    "bm25_maxscore",
    "bm25_maxscore_candidates",
    "bm25_maxscore_complete",
    "bm25_maxscore_essential",
    "bm25_maxscore_floor",
    "bm25_scan_tenant",
    "bm25_scan_tenants",
    "bm25_terms",
    "cached_query_embedding(text)",
    "check_argument",
    "check_length",
    "check_filters",
    "check_query_embedding",
    "check_query_text(text)",
    "check_rerank_arguments(text,integer,integer)",
    "chunk_fts",
    "closest_lexemes",
    "compute_query_embedding(text)",
    "context_from_hits",
    "current_tenant_id()",
    "distributed()",
    "edit_distance",
    "embed_query(text)",
    "facet_counts",
    "fused_candidates",
    "hnsw_order_sql",
    "highlight_matches",
    "highlight_snippet",
    "html_escape",
    "identifier_terms",
    "keyword_candidates",
    "keyword_flags",
    "keyword_phrases",
    "keyword_query",
    "keyword_required",
    "keyword_walk",
    "keyword_walk_unfenced",
    "mmr_order",
    "normalize_query(text)",
    "own_graph_walk_name(text)",
    "own_graph_walk_sql(text,boolean)",
    "propagate_request_claims()",
    "query_cache_key(text)",
    "rerank_scores(text,text[])",
    "searchable",
    "surface_word",
    "tenant_chunk_count(text)",
    "tenant_index_name(text)",
    "text_search_config",
    "trgm_schema()",
    "vector_candidates",
    "vector_exact",
    "vector_exact_tenant",
    "vector_sizing",
    "vector_walk_general",
    "vector_walk_own",
    "vector_walk_public",
    "vector_walk_shared",
    "vector_walk_sql",
    "vector_walk_tenant_shared",
    "window_hits_unfenced",
    "windows",
)
# Writers: the chunks triggers' helper, the documents' field check, delete_documents (and the
# delete of chunks it shares with the loader's swap), the query-embedding cache's writers, and
# chunk_text (chunking, for the roles that write documents). (bm25_apply and bm25_write_sql
# are the owner's: the BM25 trigger function runs as the owner.)
WRITER_FUNCTIONS = (
    "check_chunk_arguments",
    "check_document_fields",
    "chunk_text",
    "delete_document_chunks",
    "delete_documents",
    "prune_query_cache",
    "query_cache_get",
    "query_cache_max_entries",
    "query_cache_put",
    "search_log_max_rows",
    "text_search_config_allowed",
    "answer_cache_max_entries",
    "answer_settings_key",
    "answer_sources_fingerprint",
    "check_cache_entry",
)

# The loader's and the worker's functions (the document lifecycle): the owner and service_role.
WORKER_FUNCTIONS = (
    "abort_documents",
    "begin_documents",
    "check_worker",
    "claim_documents",
    "complete_documents",
    "create_stage",
    "due_tenants_after",
    "fail_attempts",
    "fail_documents",
    "fail_exhausted_leases",
    "fail_sources",
    "insert_staged_chunks",
    "loader_tenant",
    "next_claim_at",
    "record_embedding_model",
    "relabel_documents",
    "release_documents",
    "renew_leases",
    "replace_document_chunks",
    "set_request_tenant",
    "skip_documents",
)
# The document queue: authenticated reads its rows and writes only what it submits.
QUEUE_TABLE = "document_queue"
QUEUE_SUBMITTED_COLUMNS = (
    "tenant_id",
    "document_id",
    "source_type",
    "content",
    "title",
    "metadata",
)
# Documents: authenticated writes what describes a document, never the loader's and the
# worker's bookkeeping (status, error, chunk_count, content_sha256, embedding_model, timestamps).
DOCUMENT_DESCRIBING_COLUMNS = ("tenant_id", "title", "source_type", "source_uri", "metadata")


def writable_columns(conn: psycopg.Connection[Any], tables: tuple[str, ...]) -> set[str]:
    """Columns authenticated may write: all but identities, generated columns, is_public and
    in_shared_graph (kept by a trigger: only the owner's bulk load leaves the shared graph); of
    the document queue, see QUEUE_SUBMITTED_COLUMNS; of documents, DOCUMENT_DESCRIBING_COLUMNS."""
    rows = conn.execute(
        "select c.relname || '.' || a.attname from pg_class c join pg_attribute a "
        "on a.attrelid = c.oid where c.relnamespace = 'pgrag'::regnamespace "
        "and c.relname = any(%s) and a.attnum > 0 and not a.attisdropped "
        "and a.attidentity = '' and a.attgenerated = '' "
        "and a.attname not in ('is_public', 'in_shared_graph') "
        "and (c.relname <> 'documents' or a.attname = any(%s))",
        (list(tables), list(DOCUMENT_DESCRIBING_COLUMNS)),
    ).fetchall()
    return {r[0] for r in rows}


def expected_grants(
    columns: set[str], appended: set[str], tables: tuple[str, ...] = TENANT_TABLES
) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    out |= {("schema pgrag", role, "USAGE") for role in API_ROLES}
    every = (
        *tables,
        *READ_ONLY_TENANT_TABLES,
        *READ_DELETE_TENANT_TABLES,
        *APPEND_ONLY_TENANT_TABLES,
        *OWNER_TENANT_TABLES,
    )
    for table in every:
        for priv in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            out.add((f"table pgrag.{table}", "service_role", priv))
    for table in ANSWER_CACHE_TABLES:
        out |= {
            (f"table pgrag.{table}", "service_role", p)
            for p in ("SELECT", "INSERT", "UPDATE", "DELETE")
        }
    for table in (
        *tables,
        *APPEND_ONLY_TENANT_TABLES,
        *READ_DELETE_TENANT_TABLES,
        *ANSWER_CACHE_TABLES,
    ):
        out |= {(f"table pgrag.{table}", "authenticated", p) for p in ("SELECT", "DELETE")}
    out |= {(f"table pgrag.{t}", "authenticated", "SELECT") for t in READ_ONLY_TENANT_TABLES}
    out |= {(f"table pgrag.{t}", r, "SELECT") for t in BM25_TABLES for r in API_ROLES}
    # authenticated writes column by column: never an id, is_public or in_shared_graph.
    assert not {
        c for c in columns | appended if c.endswith((".id", ".is_public", ".in_shared_graph"))
    }
    for column in columns:
        out |= {(f"column pgrag.{column}", "authenticated", p) for p in ("INSERT", "UPDATE")}
    out |= {(f"column pgrag.{column}", "authenticated", "INSERT") for column in appended}
    out |= {
        (f"table pgrag.{table}", "anon", "SELECT")
        for table in (*tables, *READ_ONLY_TENANT_TABLES, *APPEND_ONLY_TENANT_TABLES)
    }
    # The queue: no DELETE for authenticated (withdraw with delete_documents), nothing for anon.
    for priv in ("SELECT", "INSERT", "UPDATE", "DELETE"):
        out.add((f"table pgrag.{QUEUE_TABLE}", "service_role", priv))
    out.add((f"table pgrag.{QUEUE_TABLE}", "authenticated", "SELECT"))
    out |= {("table pgrag.queue_status", r, "SELECT") for r in ("authenticated", "service_role")}
    out |= {("table pgrag.embedding_config", role, "SELECT") for role in API_ROLES}
    out |= {("table pgrag.settings", role, "SELECT") for role in API_ROLES}
    out |= {("table pgrag.text_search_configs", role, "SELECT") for role in API_ROLES}
    out |= {("table pgrag.queue_settings", r, "SELECT") for r in ("authenticated", "service_role")}
    out.add(("table pgrag.fetch_allowlist", "service_role", "SELECT"))
    out |= {("table pgrag.queue_rotation", "service_role", p) for p in ("SELECT", "UPDATE")}
    for seq in ("chunks_id_seq", "documents_id_seq", "search_log_id_seq", "answer_cache_id_seq"):
        out |= {(f"sequence pgrag.{seq}", r, "USAGE") for r in ("authenticated", "service_role")}
    for fn in PGRAG_FUNCTIONS:
        out |= {(f"function pgrag.{fn}", role, "EXECUTE") for role in API_ROLES}
    for fn in WRITER_FUNCTIONS:
        out |= {(f"function pgrag.{fn}", r, "EXECUTE") for r in ("authenticated", "service_role")}
    for fn in WORKER_FUNCTIONS:
        out.add((f"function pgrag.{fn}", "service_role", "EXECUTE"))
    for fn in API_FUNCTIONS:
        out |= {(f"function public.{fn}", role, "EXECUTE") for role in API_ROLES}
    for fn in (*QUEUE_FUNCTIONS, *ANSWER_CACHE_FUNCTIONS):
        out |= {(f"function public.{fn}", r, "EXECUTE") for r in ("authenticated", "service_role")}
    return out


AUDIT_SQL = r"""
with acl as (
    select 'schema ' || n.nspname as object, a.grantee, a.privilege_type, n.nspowner as owner
    from pg_namespace n, aclexplode(n.nspacl) a where n.nspname = 'pgrag'
    union all
    select case c.relkind when 'S' then 'sequence ' else 'table ' end || c.oid::regclass::text,
           a.grantee, a.privilege_type, c.relowner
    from pg_class c, aclexplode(c.relacl) a
    where c.relnamespace = 'pgrag'::regnamespace
    union all
    select 'column ' || c.oid::regclass::text || '.' || at.attname, a.grantee, a.privilege_type,
           c.relowner
    from pg_class c join pg_attribute at on at.attrelid = c.oid, aclexplode(at.attacl) a
    where c.relnamespace = 'pgrag'::regnamespace and at.attnum > 0 and not at.attisdropped
    union all
    select 'function ' || p.pronamespace::regnamespace::text || '.'
               || regexp_replace(p.oid::regprocedure::text, '^.*\.', ''),
           a.grantee, a.privilege_type, p.proowner
    from pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
    where p.pronamespace = 'pgrag'::regnamespace
       or (p.pronamespace = 'public'::regnamespace and p.proname = any(%s))
)
select object, case when grantee = 0 then 'PUBLIC' else grantee::regrole::text end, privilege_type
from acl where grantee <> owner
"""


def _normalise(obj: str) -> str:
    """Function objects: keep the argument list only for the names listed with one."""
    m = re.match(r"function (\w+)\.(\w+)\((.*)\)$", obj)
    if not m:
        return obj
    schema, name, args = m.groups()
    with_args = f"{name}({args})"
    if schema == "pgrag" and with_args in PGRAG_FUNCTIONS:
        return f"function pgrag.{with_args}"
    return f"function {schema}.{name}"


def test_audit_every_grant_on_pgrag_objects_and_the_api(db: str) -> None:
    with connect(db) as conn:
        rows = conn.execute(AUDIT_SQL, (list(PUBLIC_FUNCTIONS),)).fetchall()
        tables = TENANT_TABLES
        queue = {f"{QUEUE_TABLE}.{c}" for c in QUEUE_SUBMITTED_COLUMNS}
        expected = expected_grants(
            writable_columns(conn, tables + ANSWER_CACHE_TABLES) | queue,
            writable_columns(conn, APPEND_ONLY_TENANT_TABLES),
            tables,
        )
    granted = {(_normalise(o), g, p) for o, g, p in rows}
    assert not [r for r in granted if r[1] == "PUBLIC"], "PUBLIC holds a privilege"
    assert granted == expected, (
        f"unexpected: {sorted(granted - expected)}; missing: {sorted(expected - granted)}"
    )


def test_audit_the_one_security_definer_function_is_the_bm25_trigger(db: str) -> None:
    with connect(db) as conn:
        rows = conn.execute(
            "select p.oid::regprocedure::text from pg_proc p "
            "where p.prosecdef and p.pronamespace not in "
            "('pg_catalog'::regnamespace, 'information_schema'::regnamespace) "
            "and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass "
            "and d.objid = p.oid and d.deptype = 'e')"
        ).fetchall()
    # The search functions run as the caller so RLS applies. The one exception writes the BM25
    # index, which no API role may write (justified in sql/idempotent/002-bm25-maintenance.sql;
    # tests/test_tenant_write_limits.py). Any addition here must carry a justification comment
    # in its SQL file and a test of its own.
    assert rows == [("pgrag.bm25_chunks_changed()",)]


def test_audit_every_function_pins_its_search_path(db: str) -> None:
    with connect(db) as conn:
        rows = conn.execute(
            "select p.oid::regprocedure::text, p.proconfig from pg_proc p "
            "where p.pronamespace = 'pgrag'::regnamespace "
            "or (p.pronamespace = 'public'::regnamespace and p.proname = any(%s))",
            (list(API_FUNCTIONS),),
        ).fetchall()
    assert rows
    unpinned = [
        name for name, config in rows if "search_path=pg_catalog, pg_temp" not in (config or [])
    ]
    assert sorted(unpinned) == sorted(INLINED_FUNCTIONS)
    assert [config for name, config in rows if name in INLINED_FUNCTIONS] == [None] * len(
        INLINED_FUNCTIONS
    )


def test_each_api_function_has_one_signature_for_postgrest(db: str) -> None:
    with connect(db) as conn:
        rows = conn.execute(
            "select proname, count(*) from pg_proc where pronamespace = 'public'::regnamespace "
            "and proname = any(%s) group by 1",
            (list(PUBLIC_FUNCTIONS),),
        ).fetchall()
    assert dict(rows) == dict.fromkeys(PUBLIC_FUNCTIONS, 1)


def test_policies_file_grants_every_public_function_the_sql_creates() -> None:
    created = set()
    for path in (sql_dir() / "idempotent").glob("*.sql"):
        created |= set(
            re.findall(r"create\s+(?:or\s+replace\s+)?function\s+public\.(\w+)", path.read_text())
        )
    policies = (sql_dir() / "idempotent" / "910-function-privileges.sql").read_text()
    api_block = policies.split("p.pronamespace = 'public'::regnamespace")[1]
    listed = set(re.findall(r"'(\w+)'", api_block.split("proname = any (array[")[1].split("])")[0]))
    assert created == listed == set(PUBLIC_FUNCTIONS)


# Findings pgspot reports on the installed SQL that are accepted, as (file, code), each with
# its reason in a comment here and next to the SQL. None at present.
ACCEPTED_PGSPOT: set[tuple[str, str]] = set()


def test_pgspot_reports_nothing_unjustified_on_the_installed_sql(tmp_path: Path) -> None:
    pgspot = dev_tool("pgspot")
    if pgspot is None:
        pytest.skip("pgspot is not installed")
    unexplained = []
    for f in discover():
        # Exactly what the migrator runs: the pinned search_path, then the rendered file.
        path = tmp_path / f.name.replace("/", "-")
        path.write_text(f"{SECURE_SEARCH_PATH_SQL};\n{f.render('public')}")
        out = subprocess.run(
            [pgspot, "--ignore", "PS002", str(path)], capture_output=True, text=True
        ).stdout
        for code in sorted(pgspot_codes(out)):
            if (f.name, code) not in ACCEPTED_PGSPOT:
                unexplained.append((f.name, code, out))
    assert unexplained == []


# -- catalog metadata of an isolated tenant -------------------------------------------------------


def test_no_catalog_name_or_comment_names_an_isolated_tenant(two_tenants: Loaded) -> None:
    # Any role reads pg_class, pg_proc and pg_description: the isolated tenant's index and walk
    # function are named by a hash, and their comments name no tenant (docs/security.md,
    # "Catalog metadata an API role can read").
    with connect(two_tenants.db) as conn:
        conn.execute("select pgrag.isolate_tenant('acme')")
        conn.commit()
    with request(two_tenants.db, "anon") as conn:
        names = conn.execute(
            "select c.relname, obj_description(c.oid, 'pg_class') from pg_class as c "
            "where c.relnamespace = 'pgrag'::regnamespace "
            "union all select p.proname, obj_description(p.oid, 'pg_proc') from pg_proc as p "
            "where p.pronamespace = 'pgrag'::regnamespace"
        ).fetchall()
        assert any(n.startswith("chunks_embedding_hnsw_t_") for n, _ in names)
        assert [(n, c) for n, c in names if "acme" in n or "acme" in (c or "")] == []
        # The index's predicate names the tenant by its key, a constant the planner needs (the
        # other catalog columns: tests/test_catalog_tenant_ids.py).
        (indexdef,) = conn.execute(
            "select indexdef from pg_indexes where indexname like 'chunks_embedding_hnsw_t_%'"
        ).fetchone()  # type: ignore[misc]
        assert "hashtextextended(tenant_id" in indexdef
        assert "acme" not in indexdef
