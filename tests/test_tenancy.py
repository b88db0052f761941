"""Row-level security on every pgrag table, exercised the way PostgREST does it.

Every check connects as an ordinary LOGIN NOINHERIT role (``pgrag_test_authenticator``, like
Supabase's ``authenticator``) and, per request, runs ``BEGIN; SET LOCAL ROLE <role>;
set_config('request.jwt.claims', <json>, true); ...; COMMIT``. Superusers and table owners bypass
RLS, so no assertion about isolation is ever made on the superuser connection. Each test checks
both sides: the caller's rows are there, the other tenant's are not.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from plugins.tenancy import (
    API_ROLES,
    TENANTS,
    Loaded,
    api_dsn,
    claims_for,
    request,
    tenant_tables,
    tenants_in,
    usage_and_search_log_rows,
)
from psycopg import sql

from pgrag.db import connect

# -- the catalog -----------------------------------------------------------------------------


EXPECTED_TENANT_POLICIES = {
    ("pgrag_authenticated_select", "SELECT", "{authenticated}"),
    ("pgrag_authenticated_insert", "INSERT", "{authenticated}"),
    ("pgrag_authenticated_update", "UPDATE", "{authenticated}"),
    ("pgrag_authenticated_delete", "DELETE", "{authenticated}"),
    ("pgrag_service_role_select", "SELECT", "{service_role}"),
    ("pgrag_service_role_insert", "INSERT", "{service_role}"),
    ("pgrag_service_role_update", "UPDATE", "{service_role}"),
    ("pgrag_service_role_delete", "DELETE", "{service_role}"),
}


def test_every_tenant_table_has_rls_and_one_policy_per_command_and_role(db: str) -> None:
    tables = tenant_tables(db)
    assert {"documents", "chunks", "bm25_postings", "corpus_stats"} <= set(tables)
    with connect(db) as conn:
        for table in tables:
            rls = conn.execute(
                "select relrowsecurity from pg_class where oid = %s::regclass",
                (f"pgrag.{table}",),
            ).fetchone()
            assert rls == (True,), table
            policies = {
                (r[0], r[1], r[2])
                for r in conn.execute(
                    "select policyname, cmd, roles::text from pg_policies "
                    "where schemaname = 'pgrag' and tablename = %s",
                    (table,),
                )
            }
            anon = {p for p in policies if p[0].startswith("pgrag_anon_")}
            assert policies - anon == EXPECTED_TENANT_POLICIES, table
            assert anon <= {("pgrag_anon_select", "SELECT", "{anon}")}, table
            quals = conn.execute(
                "select policyname, qual, with_check from pg_policies "
                "where schemaname = 'pgrag' and tablename = %s "
                "and policyname like 'pgrag_authenticated_%%'",
                (table,),
            ).fetchall()
            for name, qual, check in quals:
                for expr in (qual, check):
                    if expr is not None:
                        # Evaluated once per query (an InitPlan), not once per row.
                        assert "SELECT pgrag.current_tenant_id()" in expr, (table, name, expr)
            update_check = [c for n, _, c in quals if n == "pgrag_authenticated_update"]
            assert update_check and update_check[0] is not None, f"{table}: UPDATE lacks WITH CHECK"


def test_every_column_a_policy_reads_is_indexed(db: str) -> None:
    with connect(db) as conn:
        for table in tenant_tables(db):
            leading = conn.execute(
                "select 1 from pg_index i where i.indrelid = %s::regclass "
                "and i.indkey[0] = (select attnum from pg_attribute "
                "where attrelid = i.indrelid and attname = 'tenant_id')",
                (f"pgrag.{table}",),
            ).fetchone()
            assert leading, f"pgrag.{table} has no index leading with tenant_id"
        public = conn.execute(
            "select pg_get_indexdef(indexrelid) from pg_index "
            "where indrelid = 'pgrag.documents'::regclass and pg_get_expr(indpred, indrelid) "
            "= 'is_public'"
        ).fetchone()
    assert public and "(tenant_id, id)" in public[0]


def test_api_roles_exist_like_on_supabase(db: str) -> None:
    with connect(db) as conn:
        roles = {
            r[0]: r[1:]
            for r in conn.execute(
                "select rolname, rolcanlogin, rolinherit, rolbypassrls, rolsuper from pg_roles "
                "where rolname = any(%s)",
                (list(API_ROLES),),
            )
        }
    assert roles == {
        "anon": (False, False, False, False),
        "authenticated": (False, False, False, False),
        "service_role": (False, False, True, False),
    }


# -- authenticated: own tenant only ------------------------------------------------------------


def test_authenticated_reads_only_its_tenant_in_every_table(two_tenants: Loaded) -> None:
    db = two_tenants.db
    usage_and_search_log_rows(db)
    with connect(db) as admin:
        # A queued resubmission per tenant: the document queue holds rows of both tenants too;
        # so do the BM25 backlog (a bulk load's unindexed chunks; an id no chunk has) and the
        # saved embeddings (of a long document being loaded).
        for tenant in TENANTS:
            admin.execute(
                "insert into pgrag.document_queue (tenant_id, document_id, source_type, content) "
                "values (%s, %s, 'text', 'resubmitted text')",
                (tenant, two_tenants.documents[tenant][0]),
            )
            admin.execute(
                "insert into pgrag.bm25_backlog (tenant_id, chunk_id) values (%s, -1)", (tenant,)
            )
            admin.execute(
                "insert into pgrag.saved_embeddings (tenant_id, document_id, content_sha256,"
                " model, embedding) values (%s, -1, 'x', 'm', '[1]')",
                (tenant,),
            )
        admin.commit()
        everything = {t: tenants_in(admin, t) for t in tenant_tables(db, "authenticated")}
    # Both tenants have rows in every tenant table (postings and statistics come from triggers)
    # a tenant may read (the re-embed queue is the owner's).
    for table, counts in everything.items():
        assert set(counts) == set(TENANTS), (table, counts)

    for tenant in TENANTS:
        other = next(t for t in TENANTS if t != tenant)
        with request(db, "authenticated", claims_for(tenant)) as conn:
            for table in everything:
                seen = tenants_in(conn, table)
                assert seen == {tenant: everything[table][tenant]}, (tenant, table, seen)
                assert other not in seen
            ids = {r[0] for r in conn.execute("select id from pgrag.documents")}
            assert ids == set(two_tenants.documents[tenant])


def test_authenticated_writes_land_in_its_own_tenant(two_tenants: Loaded) -> None:
    db = two_tenants.db
    with request(db, "authenticated", claims_for("acme")) as conn:
        # tenant_id defaults to the caller's tenant.
        (doc_tenant,) = conn.execute(
            "insert into pgrag.documents (source_type, source_uri) values ('text', 'new.txt') "
            "returning tenant_id"
        ).fetchone()
        assert doc_tenant == "acme"
        # Published documents need the publishing privilege to change (test_security_privileges).
        updated = conn.execute(
            "update pgrag.documents set title = 'renamed' where not is_public"
        ).rowcount
        private = [
            d for d in two_tenants.documents["acme"] if d not in two_tenants.public_documents
        ]
        assert updated == len(private) + 1
        deleted = conn.execute("delete from pgrag.chunks where content like '%%factory%%'").rowcount
        assert deleted == 1
    with connect(db) as admin:
        titles = dict(
            admin.execute(
                "select tenant_id, min(title) from pgrag.documents where not is_public group by 1"
            )
        )
        factories = admin.execute(
            "select tenant_id from pgrag.chunks where content like '%factory%'"
        ).fetchall()
    assert titles == {"acme": "renamed", "globex": "globex/secret.md"}
    assert factories == [("globex",)]


@pytest.mark.parametrize("table", ["documents", "chunks"])
def test_authenticated_cannot_touch_the_other_tenants_rows(two_tenants: Loaded, table: str) -> None:
    db = two_tenants.db
    globex = (
        two_tenants.documents["globex"] if table == "documents" else two_tenants.chunks["globex"]
    )
    with request(db, "authenticated", claims_for("acme")) as conn:
        stmt = sql.SQL("update pgrag.{} set metadata = '{{\"pwned\": true}}' where id = any(%s)")
        assert conn.execute(stmt.format(sql.Identifier(table)), (globex,)).rowcount == 0
        stmt = sql.SQL("delete from pgrag.{} where id = any(%s)")
        assert conn.execute(stmt.format(sql.Identifier(table)), (globex,)).rowcount == 0
    with connect(db) as admin:
        left = admin.execute(
            sql.SQL(
                "select count(*) from pgrag.{} where id = any(%s) and metadata ? 'pwned'"
            ).format(sql.Identifier(table)),
            (globex,),
        ).fetchone()
        still = admin.execute(
            sql.SQL("select count(*) from pgrag.{} where id = any(%s)").format(
                sql.Identifier(table)
            ),
            (globex,),
        ).fetchone()
    assert left == (0,)
    assert still == (len(globex),)


def test_insert_into_another_tenant_is_rejected(two_tenants: Loaded) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(
            "insert into pgrag.documents (tenant_id, source_type, source_uri) "
            "values ('globex', 'text', 'planted.txt')"
        )


def test_update_moving_a_row_to_another_tenant_is_rejected(two_tenants: Loaded) -> None:
    doc = two_tenants.documents["acme"][0]
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute("update pgrag.chunks set tenant_id = 'globex' where document_id = %s", (doc,))


@pytest.mark.parametrize(
    "statement",
    [
        "insert into pgrag.bm25_postings (tenant_id, lexeme, chunk_id, tf, doc_len) "
        "values ('globex', 'vacat', 1, 100, 1)",
        "update pgrag.corpus_stats set chunk_count = 0 where tenant_id = 'globex'",
        "delete from pgrag.bm25_postings where tenant_id = 'globex'",
    ],
)
def test_bm25_tables_are_not_writable_by_a_tenant(two_tenants: Loaded, statement: str) -> None:
    # Written only by the chunks triggers, as the owner (docs/security.md, "The BM25 index is
    # pgrag's to write"): not even the tenant's own rows.
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(statement)


def test_authenticated_chunk_insert_maintains_its_own_bm25_rows(two_tenants: Loaded) -> None:
    db = two_tenants.db
    doc = two_tenants.documents["acme"][0]
    with request(db, "authenticated", claims_for("acme")) as conn:
        conn.execute(
            "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256) "
            "values (%s, 99, 'zanzibar quokka', 'x')",
            (doc,),
        )
        seen = conn.execute(
            "select tenant_id from pgrag.bm25_postings where lexeme = 'quokka'"
        ).fetchall()
    assert seen == [("acme",)]


# -- claims: missing, empty, forged -----------------------------------------------------------


@pytest.mark.parametrize(
    "claims",
    [
        {},
        {"role": "authenticated", "sub": "someone"},
        {"role": "authenticated", "tenant_id": ""},
        {"role": "authenticated", "tenant_id": None},
        {"role": "authenticated", "app_metadata": {"tenant_id": "acme"}},
        {"role": "authenticated", "tenant": "acme"},
    ],
    ids=["empty", "no-tenant", "blank", "null", "nested-not-configured", "other-claim"],
)
def test_claims_without_a_tenant_see_nothing_and_write_nothing(
    two_tenants: Loaded, claims: dict[str, Any]
) -> None:
    db = two_tenants.db
    usage_and_search_log_rows(db)
    with request(db, "authenticated", claims) as conn:
        for table in tenant_tables(db, "authenticated"):
            assert tenants_in(conn, table) == {}, table
    with (
        pytest.raises(psycopg.Error),
        request(db, "authenticated", claims) as conn,
    ):
        conn.execute(
            "insert into pgrag.documents (source_type, source_uri) values ('text', 'orphan.txt')"
        )


def test_no_claims_setting_at_all_sees_nothing(two_tenants: Loaded) -> None:
    with connect(api_dsn(two_tenants.db)) as conn:
        conn.execute("set local role authenticated")
        assert conn.execute("select count(*) from pgrag.chunks").fetchone() == (0,)


def test_malformed_claims_are_rejected(two_tenants: Loaded) -> None:
    with connect(api_dsn(two_tenants.db)) as conn:
        conn.execute("set local role authenticated")
        conn.execute("select set_config('request.jwt.claims', 'not json', true)")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            conn.execute("select count(*) from pgrag.chunks")


def test_tenant_claim_can_be_a_nested_path(two_tenants: Loaded) -> None:
    with request(
        two_tenants.db, "authenticated", {"app_metadata": {"tenant_id": "globex"}}
    ) as conn:
        conn.execute("select set_config('pgrag.tenant_claim', 'app_metadata.tenant_id', true)")
        assert tenants_in(conn, "chunks") == {"globex": 3}


def test_a_tenant_id_in_metadata_grants_nothing(two_tenants: Loaded) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        rows = conn.execute(
            "select tenant_id from pgrag.documents where metadata @> %s",
            (json.dumps({"team": "globex"}),),
        ).fetchall()
    assert rows == []


# -- anon: public documents only ----------------------------------------------------------------


def test_anon_reads_only_public_documents_and_their_chunks(two_tenants: Loaded) -> None:
    with request(two_tenants.db, "anon") as conn:
        docs = [r[0] for r in conn.execute("select id from pgrag.documents")]
        chunks = [r[0] for r in conn.execute("select id from pgrag.chunks order by id")]
        for table in ("bm25_lexicon", "bm25_postings", "corpus_stats"):
            assert tenants_in(conn, table) == {}, table
    assert docs == two_tenants.public_documents
    assert chunks == sorted(two_tenants.public_chunks)


def test_anon_with_a_forged_tenant_claim_still_sees_only_public_rows(two_tenants: Loaded) -> None:
    with request(two_tenants.db, "anon", {"role": "anon", "tenant_id": "globex"}) as conn:
        docs = [r[0] for r in conn.execute("select id from pgrag.documents")]
    assert docs == two_tenants.public_documents


@pytest.mark.parametrize(
    "statement",
    [
        "insert into pgrag.documents (tenant_id, source_type, source_uri) "
        "values ('acme', 'text', 'x')",
        "update pgrag.documents set title = 'x'",
        "delete from pgrag.chunks",
        "update pgrag.embedding_config set model = 'x'",
    ],
)
def test_anon_writes_nothing(two_tenants: Loaded, statement: str) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(two_tenants.db, "anon") as conn,
    ):
        conn.execute(statement)


# -- service_role, global tables, dangerous privileges -------------------------------------------


def test_service_role_sees_and_writes_every_tenant(two_tenants: Loaded) -> None:
    with request(two_tenants.db, "service_role", {"role": "service_role"}) as conn:
        assert tenants_in(conn, "chunks") == {"acme": 4, "globex": 3}
        conn.execute(
            "insert into pgrag.documents (tenant_id, source_type, source_uri) "
            "values ('initech', 'text', 'tps.txt')"
        )


@pytest.mark.parametrize("role", API_ROLES)
def test_global_tables_are_read_only_or_hidden(two_tenants: Loaded, role: str) -> None:
    db = two_tenants.db
    with request(db, role, claims_for("acme")) as conn:
        assert conn.execute("select dims, model from pgrag.embedding_config").fetchone() == (
            384,
            "all-MiniLM-L6-v2",
        )
    for statement in (
        "update pgrag.embedding_config set model = 'evil'",
        "insert into pgrag.embedding_config (singleton, dims) values (true, 3)",
        "delete from pgrag.embedding_config",
        "select * from pgrag.schema_migrations",
        "insert into pgrag.schema_migrations values ('x', 'idempotent', 'x', now(), 'x')",
        "truncate pgrag.chunks",
        "truncate pgrag.bm25_postings",
        "create table pgrag.planted (id int)",
    ):
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            request(db, role, claims_for("acme")) as conn,
        ):
            conn.execute(statement)


def test_statement_timeouts_for_api_roles_in_this_database(empty_db: str) -> None:
    # Set on the roles for every database (pg_roles.rolconfig), the only place PostgREST reads
    # them from; nothing left for this database alone (PostgREST ignores those).
    from pgrag.install.migrator import Migrator

    Migrator(empty_db).migrate()
    with connect(empty_db) as conn:
        settings = dict(
            conn.execute(
                "select rolname, rolconfig from pg_roles where rolname in ('anon', 'authenticated')"
            ).fetchall()
        )
        per_database = conn.execute(
            "select count(*) from pg_db_role_setting s join pg_roles r on r.oid = s.setrole "
            "where r.rolname in ('anon', 'authenticated') and s.setdatabase = "
            "(select oid from pg_database where datname = current_database())"
        ).fetchone()
    assert "statement_timeout=3000" in settings["anon"]
    assert "statement_timeout=8000" in settings["authenticated"]
    assert per_database == (0,)


def _apply_policies(db: str, **settings: str) -> None:
    from pgrag.install.migrator import SECURE_SEARCH_PATH_SQL, discover

    late_band = [f for f in discover() if f.kind == "idempotent" and f.path.name >= "900"]
    with connect(db) as conn:
        for name, value in settings.items():
            conn.execute("select set_config(%s, %s, true)", (f"pgrag.{name}", value))
        conn.execute(SECURE_SEARCH_PATH_SQL)
        for f in late_band:
            conn.execute(f.render("public").encode())
        conn.commit()


def test_statement_timeout_is_configurable(db: str) -> None:
    try:
        _apply_policies(db, authenticated_statement_timeout="15s")
        with connect(db) as conn:
            row = conn.execute(
                "select rolconfig from pg_roles where rolname = 'authenticated'"
            ).fetchone()
        assert row is not None and "statement_timeout=15000" in row[0]
    finally:  # roles are cluster-wide: put the default back for the other tests
        _apply_policies(db, authenticated_statement_timeout="8s")


def test_authenticator_login_applies_no_rls_bypass(two_tenants: Loaded) -> None:
    # The login role itself (before SET ROLE) has no table privileges at all.
    with (
        connect(api_dsn(two_tenants.db)) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("select * from pgrag.chunks")


# -- tables added later get policies on the next migrate ------------------------------------------


@pytest.fixture
def sql_with_extra_table(tmp_path: Any) -> Any:
    """A private copy of sql/ with one more incremental migration (callers fill it in)."""
    import shutil

    from pgrag.install.migrator import sql_dir

    copy = tmp_path / "sql"
    shutil.copytree(sql_dir(), copy)
    n = len(list((copy / "incremental").glob("*.sql"))) + 1
    return copy / "incremental" / f"{n:03d}-notes.sql"


def test_a_tenant_table_added_later_gets_every_policy(
    empty_db: str, sql_with_extra_table: Any
) -> None:
    from pgrag.install.migrator import Migrator

    sql_with_extra_table.write_text(
        "create table pgrag.notes (tenant_id text not null, id bigint, document_id bigint, "
        "body text, primary key (tenant_id, id));\n"
        "alter table pgrag.notes enable row level security;\n"
    )
    Migrator(empty_db, sql_with_extra_table.parent.parent).migrate()

    with connect(empty_db) as conn:
        policies = {
            (r[0], r[1], r[2])
            for r in conn.execute(
                "select policyname, cmd, roles::text from pg_policies "
                "where schemaname = 'pgrag' and tablename = 'notes'"
            )
        }
    assert policies == EXPECTED_TENANT_POLICIES | {("pgrag_anon_select", "SELECT", "{anon}")}


def test_a_tenant_table_without_rls_stops_the_migration(
    empty_db: str, sql_with_extra_table: Any
) -> None:
    from pgrag.errors import MigrationError
    from pgrag.install.migrator import Migrator

    sql_with_extra_table.write_text(
        "create table pgrag.notes (tenant_id text not null, id bigint, "
        "primary key (tenant_id, id));\n"
    )
    with pytest.raises(MigrationError, match=r"pgrag\.notes has a tenant_id column but row level"):
        Migrator(empty_db, sql_with_extra_table.parent.parent).migrate()
