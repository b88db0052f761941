"""Two tenants and a PostgREST-like login role, for the tenancy and security tests.

Fixtures: ``authenticator`` (session: the LOGIN NOINHERIT role granted the API roles) and
``two_tenants`` (CORPUS loaded with real embeddings, and CACHED_QUERY in each tenant's
query-embedding cache). Helpers: ``request`` (one PostgREST-style
request as a role with claims), ``claims_for``, ``api_dsn``, ``load_two_tenants``,
``tenant_tables``, ``tenants_in``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.db import connect

AUTHENTICATOR = "pgrag_test_authenticator"
API_ROLES = ("anon", "authenticated", "service_role")
TENANTS = ("acme", "globex")
# A query each tenant's query-embedding cache holds (pgrag.query_embeddings).
CACHED_QUERY = "what is the vacation policy?"

# Same words in both tenants, so every query matches rows of both and only RLS tells them apart.
CORPUS: dict[str, list[tuple[str, bool, list[str]]]] = {
    "acme": [
        (
            "acme/handbook.md",
            False,
            [
                "Acme vacation policy: employees get thirty days of paid leave per year.",
                "Acme expense reports are filed within two weeks of travel.",
                "The Acme widget factory runs three shifts.",
            ],
        ),
        (
            "acme/press.md",
            True,
            ["Acme announces its public vacation policy for contractors."],
        ),
    ],
    "globex": [
        (
            "globex/secret.md",
            False,
            [
                "Globex secret vacation policy: executives get unlimited paid leave.",
                "Globex expense reports for the doomsday device are never filed.",
                "The Globex widget factory is hidden in a volcano.",
            ],
        ),
    ],
}


def ensure_authenticator(pg_admin_dsn: str) -> str:
    """Create (once per cluster) a LOGIN NOINHERIT role granted the three API roles."""
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(
            """
            do $$
            begin
                if not exists (select 1 from pg_roles where rolname = 'pgrag_test_authenticator')
                then
                    create role pgrag_test_authenticator login noinherit;
                end if;
            end
            $$
            """
        )
        for role in API_ROLES:
            exists = conn.execute("select 1 from pg_roles where rolname = %s", (role,)).fetchone()
            if exists:  # created by the migrations; present once the template is migrated
                conn.execute(
                    sql.SQL("grant {} to {}").format(
                        sql.Identifier(role), sql.Identifier(AUTHENTICATOR)
                    )
                )
    return AUTHENTICATOR


@pytest.fixture(scope="session")
def authenticator(pg_admin_dsn: str, template_db: str) -> str:
    """Name of the PostgREST-like login role (the template's migration created the API roles)."""
    return ensure_authenticator(pg_admin_dsn)


def api_dsn(db: str) -> str:
    return make_conninfo(db, user=AUTHENTICATOR, password="")


@contextmanager
def request(
    db: str, role: str, claims: dict[str, Any] | None = None, *, commit: bool = True
) -> Iterator[psycopg.Connection[Any]]:
    """One PostgREST-style request: a transaction as ``role`` with ``claims``.

    Commits at the end (as PostgREST does for a successful request) unless ``commit`` is false;
    an exception rolls back.
    """
    with connect(api_dsn(db)) as conn:
        assert conn.execute(
            "select rolsuper, rolbypassrls from pg_roles where rolname = current_user"
        ).fetchone() == (False, False)
        conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
        conn.execute(
            "select pg_catalog.set_config('request.jwt.claims', %s, true)",
            (json.dumps(claims if claims is not None else {"role": role}),),
        )
        yield conn
        if commit:
            conn.commit()
        else:
            conn.rollback()


def claims_for(tenant: str) -> dict[str, Any]:
    return {"sub": f"user-of-{tenant}", "role": "authenticated", "tenant_id": tenant}


@dataclass
class Loaded:
    """What the two-tenant fixture inserted (ids per tenant)."""

    db: str
    documents: dict[str, list[int]]
    chunks: dict[str, list[int]]
    public_documents: list[int]
    public_chunks: list[int]


@pytest.fixture
def two_tenants(db: str, local_embedder: Any, authenticator: str) -> Loaded:
    """Two tenants' documents and chunks with real embeddings, inserted as superuser."""
    return load_two_tenants(db, local_embedder)


def load_two_tenants(db: str, local_embedder: Any) -> Loaded:
    """Insert CORPUS (as superuser, real embeddings) into ``db``; return the ids."""
    documents: dict[str, list[int]] = {t: [] for t in TENANTS}
    chunks: dict[str, list[int]] = {t: [] for t in TENANTS}
    public_documents: list[int] = []
    public_chunks: list[int] = []
    with connect(db) as conn:
        for tenant, docs in CORPUS.items():
            for uri, is_public, texts in docs:
                (doc_id,) = conn.execute(
                    "insert into pgrag.documents (tenant_id, title, source_type, source_uri, "
                    "status, is_public, chunk_count, metadata) "
                    "values (%s, %s, 'markdown', %s, 'ready', %s, %s, %s) returning id",
                    (tenant, uri, uri, is_public, len(texts), json.dumps({"team": tenant})),
                ).fetchone()
                documents[tenant].append(doc_id)
                if is_public:
                    public_documents.append(doc_id)
                embeddings = local_embedder.embed(texts)
                for i, (text, emb) in enumerate(zip(texts, embeddings, strict=True)):
                    (chunk_id,) = conn.execute(
                        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
                        "embedding, content_sha256, token_count) "
                        "values (%s, %s, %s, %s, %s, md5(%s), 10) returning id",
                        (tenant, doc_id, i, text, emb, text),
                    ).fetchone()
                    chunks[tenant].append(chunk_id)
                    if is_public:
                        public_chunks.append(chunk_id)
            # Every tenant table holds rows of both tenants: a cached query embedding each.
            conn.execute(
                "insert into pgrag.query_embeddings (tenant_id, model, query_sha256, embedding) "
                "values (%s, 'all-MiniLM-L6-v2', pgrag.query_cache_key(%s), %s)",
                (tenant, CACHED_QUERY, local_embedder.embed([CACHED_QUERY])[0]),
            )
        conn.execute(
            "update pgrag.embedding_config set model = 'all-MiniLM-L6-v2', provider = 'local'"
        )
        conn.commit()
    return Loaded(db, documents, chunks, public_documents, public_chunks)


def tenant_tables(db: str, readable_by: str | None = None) -> list[str]:
    """Every table of schema pgrag with a tenant_id column (read from the catalog); with
    ``readable_by``, those that role may select from (a running re-embed's queue is the owner's
    alone)."""
    with connect(db) as conn:
        return [
            r[0]
            for r in conn.execute(
                "select c.relname from pg_class c "
                "where c.relnamespace = 'pgrag'::regnamespace and c.relkind in ('r', 'p') "
                "and exists (select 1 from pg_attribute a where a.attrelid = c.oid "
                "and a.attname = 'tenant_id' and not a.attisdropped) "
                "and (%s::text is null or has_table_privilege(%s::text, c.oid, 'select')) "
                "order by 1",
                (readable_by, readable_by),
            )
        ]


def usage_and_search_log_rows(db: str) -> None:
    """A row of usage and of the search log for each tenant (written as the owner), and of the
    query-embedding cache and the answer cache (an entry and its counters) where installed."""
    with connect(db) as conn:
        cache = conn.execute("select to_regclass('pgrag.query_embeddings')").fetchone()
        answers = conn.execute("select to_regclass('pgrag.answer_cache')").fetchone()
        conn.execute("update pgrag.settings set search_log = true")
        for tenant in TENANTS:
            conn.execute("select pgrag.set_request_tenant(%s)", (tenant,))
            conn.execute("select pgrag.record_usage('query', 'local', 'm', 7)")
            conn.execute("select public.log_search('hybrid', 5, 1, 0.5)")
            if cache and cache[0]:
                conn.execute("select pgrag.query_cache_put('m', 'vacation', '[1,2,3]')")
            if answers and answers[0]:
                conn.execute(
                    "insert into pgrag.answer_cache (tenant_id, model, settings_key, question, "
                    "question_embedding, answer, sources, chunk_ids, sources_fingerprint) "
                    "values (%s, 'm', repeat('0', 64), 'vacation?', '[1,2,3]', 'Thirty days.', "
                    "'[]', '{1}', repeat('0', 64))",
                    (tenant,),
                )
                conn.execute(
                    "insert into pgrag.answer_cache_counters (tenant_id, lookups) values (%s, 1)",
                    (tenant,),
                )
        conn.execute("update pgrag.settings set search_log = false")
        conn.commit()


def tenants_in(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    rows = conn.execute(
        sql.SQL("select tenant_id, count(*) from pgrag.{} group by 1").format(sql.Identifier(table))
    ).fetchall()
    return {r[0]: r[1] for r in rows}
