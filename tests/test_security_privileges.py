"""Privileges an untrusted client holds, exercised the way PostgREST uses them.

* Limits that apply: PostgREST reads the settings of the roles it impersonates with its own
  query (``pg_roles.rolconfig``, see ``POSTGREST_ROLE_SETTINGS``) and, per request, applies
  them with ``set_config(name, value, true)`` before switching role; ``SET LOCAL ROLE`` alone
  applies none. ``postgrest_request`` replays exactly that.
* Writes: no client-set ids, no self-publishing, results that name the owning tenant.
* Functions: each role executes exactly the documented list; internal helpers refuse other
  tenants before taking locks; functions created later are not executable by PUBLIC; pgspot
  on both SQL tiers.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.dev_tools import dev_tool, pgspot_codes
from plugins.tenancy import (
    AUTHENTICATOR,
    Loaded,
    api_dsn,
    claims_for,
    ensure_authenticator,
    load_two_tenants,
    request,
)
from psycopg import sql

from pgrag.db import connect
from pgrag.install.migrator import SECURE_SEARCH_PATH_SQL, discover, sql_dir

ROOT = Path(__file__).resolve().parents[1]

# PostgREST's query for the settings of the roles it may impersonate, as in
# src/PostgREST/Config/Database.hs (queryRoleSettings, PostgreSQL >= 15), run as its login
# role (current_user quoted here: the test's login role has an underscore-free name either
# way). Only pg_roles.rolconfig (settings for every database) is read; every value is
# lower-cased; a setting whose context is not 'user' is applied only if the login role may SET
# it.
POSTGREST_ROLE_SETTINGS = """
      with
      role_setting as (
        select r.rolname, unnest(r.rolconfig) as setting
        from pg_auth_members m
        join pg_roles r on r.oid = m.roleid
        where member = quote_ident(current_user)::regrole::oid
      ),
      kv_settings AS (
        SELECT
          rolname,
          substr(setting, 1, strpos(setting, '=') - 1) as key,
          lower(substr(setting, strpos(setting, '=') + 1)) as value
        FROM role_setting
      ),
      iso_setting AS (
        SELECT rolname, value
        FROM kv_settings
        WHERE key = 'default_transaction_isolation'
      )
      select
        kv.rolname,
        i.value as iso_lvl,
        coalesce(array_agg(row(kv.key, kv.value)) filter (where key <> 'default_transaction_isolation'), '{}') as role_settings
      from kv_settings kv
      join pg_settings ps on ps.name = kv.key and (ps.context = 'user' or has_parameter_privilege(quote_ident(current_user)::regrole::oid, ps.name, 'set'))
      left join iso_setting i on i.rolname = kv.rolname
      group by kv.rolname, i.value;
"""  # noqa: E501


def postgrest_role_settings(db: str) -> dict[str, dict[str, str]]:
    """What PostgREST (logged in as the authenticator) loads at start-up, per role."""
    with connect(api_dsn(db)) as conn:
        rows = conn.execute(
            f"select rolname, array(select array[(x).f1, (x).f2] from unnest(role_settings) "
            f"as x(f1 text, f2 text)) from ({POSTGREST_ROLE_SETTINGS.rstrip().rstrip(';')}) as q"
        ).fetchall()
    return {role: dict(tuple(kv) for kv in settings) for role, settings in rows}


@contextmanager
def postgrest_request(
    db: str, role: str, claims: dict[str, Any] | None = None
) -> Iterator[psycopg.Connection[Any]]:
    """One request as PostgREST runs it (PreQuery.txVarQuery): search_path, the role's
    settings, the role and the claims, all with set_config(..., true) in one statement."""
    settings = postgrest_role_settings(db).get(role, {})
    body = {**(claims or {}), "role": role}
    parts = ["set_config('search_path', %s, true)"]
    params: list[str] = ['"public", "public"']
    for key, value in settings.items():
        parts.append("set_config(%s, %s, true)")
        params += [key, value]
    parts += ["set_config('role', %s, true)", "set_config('request.jwt.claims', %s, true)"]
    params += [role, json.dumps(body)]
    with connect(api_dsn(db)) as conn:
        conn.execute("select " + ", ".join(parts), params)
        yield conn
        conn.commit()


def apply_policies(db: str, **settings: str) -> None:
    """Re-run the privileges band (idempotent/9NN-*.sql) as the migrator does, with
    pgrag.<name> settings."""
    late_band = [f for f in discover() if f.kind == "idempotent" and f.path.name >= "900"]
    with connect(db) as conn:
        for name, value in settings.items():
            conn.execute("select set_config(%s, %s, true)", (f"pgrag.{name}", value))
        conn.execute(SECURE_SEARCH_PATH_SQL)
        for f in late_band:
            conn.execute(f.render("public").encode())
        conn.commit()


def restore_default_limits(db: str) -> None:
    # Role settings are cluster-wide: put pgrag's defaults back for the other tests.
    apply_policies(
        db,
        anon_statement_timeout="3000",
        authenticated_statement_timeout="8000",
        anon_temp_file_limit="262144",
        authenticated_temp_file_limit="1048576",
    )


@pytest.fixture
def api_db(db: str, pg_admin_dsn: str, template_db: str) -> str:
    ensure_authenticator(pg_admin_dsn)
    return db


@pytest.fixture
def two_tenants(api_db: str, local_embedder: Any) -> Loaded:
    return load_two_tenants(api_db, local_embedder)


# -- 2. limits that apply through PostgREST ----------------------------------------------------


def test_postgrest_loads_the_api_role_limits_from_the_catalog(api_db: str) -> None:
    settings = postgrest_role_settings(api_db)
    assert settings["anon"]["statement_timeout"] == "3000"
    assert settings["authenticated"]["statement_timeout"] == "8000"


def test_every_role_setting_is_written_without_a_unit(api_db: str) -> None:
    # PostgREST lower-cases each value before set_config: '256MB' would become '256mb', which
    # PostgreSQL refuses (22023) on every request of the role.
    with connect(api_db) as conn:
        rows = conn.execute(
            "select r.rolname, c.item from pg_roles as r, unnest(r.rolconfig) as c (item) "
            "where r.rolname in ('anon', 'authenticated')"
        ).fetchall()
    values = {(role, item.split("=", 1)[0]): item.split("=", 1)[1] for role, item in rows}
    assert values == {
        ("anon", "statement_timeout"): "3000",
        ("authenticated", "statement_timeout"): "8000",
        ("anon", "temp_file_limit"): "262144",
        ("authenticated", "temp_file_limit"): "1048576",
        ("anon", "work_mem"): "32768",
        ("authenticated", "work_mem"): "32768",
    }


def test_a_limit_given_with_a_unit_is_stored_without_it(api_db: str) -> None:
    try:
        apply_policies(api_db, anon_temp_file_limit="2MB", anon_statement_timeout="2s")
        with connect(api_db) as conn:
            row = conn.execute("select rolconfig from pg_roles where rolname = 'anon'").fetchone()
        assert row is not None
        assert {"temp_file_limit=2048", "statement_timeout=2000"} <= set(row[0])
    finally:
        restore_default_limits(api_db)


def test_a_limit_an_earlier_version_wrote_with_a_unit_is_rewritten(api_db: str) -> None:
    try:
        with connect(api_db) as conn:
            conn.execute("alter role anon set temp_file_limit = '256MB'")
            conn.execute("alter role anon set statement_timeout = '1s'")  # stricter: kept
            conn.commit()
        apply_policies(api_db)
        settings = postgrest_role_settings(api_db)
        assert settings["anon"]["statement_timeout"] == "1000"
        with connect(api_db) as conn:
            row = conn.execute("select rolconfig from pg_roles where rolname = 'anon'").fetchone()
        assert row is not None and "temp_file_limit=262144" in row[0]
    finally:
        restore_default_limits(api_db)


def test_set_local_role_alone_applies_no_role_setting(api_db: str) -> None:
    # Why the settings must be where PostgREST reads them: switching role applies none.
    with request(api_db, "anon") as conn:
        assert conn.execute("select current_setting('statement_timeout')").fetchone() == ("0",)


@pytest.mark.parametrize(("role", "limit", "sleep"), [("anon", 3.0, 4), ("authenticated", 8.0, 9)])
def test_a_long_call_is_cancelled_at_the_roles_timeout(
    api_db: str, role: str, limit: float, sleep: int
) -> None:
    claims = claims_for("acme") if role == "authenticated" else None
    with postgrest_request(api_db, role, claims) as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled) as caught:
            conn.execute("select pg_sleep(%s)", (sleep,))
        elapsed = time.monotonic() - started
        conn.rollback()
    assert caught.value.sqlstate == "57014"
    assert limit - 0.2 <= elapsed < limit + 1.5  # slack for a loaded machine


def test_an_api_call_is_cancelled_at_the_roles_timeout(two_tenants: Loaded) -> None:
    # The same through an API function: a query argument that makes it sleep is impossible, so
    # the clock is started by the caller's statement running two calls back to back.
    with postgrest_request(two_tenants.db, "anon") as conn:
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(
                "select (select count(*) from public.chunk_windows(chunk_ids := %s)), pg_sleep(5)",
                (two_tenants.chunks["acme"],),
            )
        conn.rollback()


SPILLING_SORT = (
    "select count(*) from (select g from generate_series(1, 1000000) as g "
    "order by g desc offset 1) as s"
)


def test_temp_file_limit_does_not_apply_without_the_grant(two_tenants: Loaded) -> None:
    # A superuser-context setting: PostgREST skips it unless its login role may SET it, so a
    # sort that spills past the limit still runs.
    db = two_tenants.db
    try:
        apply_policies(db, anon_temp_file_limit="1024")
        assert "temp_file_limit" not in postgrest_role_settings(db)["anon"]
        with postgrest_request(db, "anon") as conn:
            conn.execute("set local work_mem = '64kB'")
            assert conn.execute(SPILLING_SORT).fetchone() == (999999,)
            assert conn.execute("select current_setting('temp_file_limit')").fetchone() == ("-1",)
    finally:
        restore_default_limits(db)


def test_temp_file_limit_applies_once_the_login_role_may_set_it(
    two_tenants: Loaded, pg_admin_dsn: str
) -> None:
    db = two_tenants.db
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("grant set on parameter temp_file_limit to {}").format(
                sql.Identifier(AUTHENTICATOR)
            )
        )
    try:
        # Every request of both roles still runs with the lower-cased values applied.
        assert postgrest_role_settings(db)["anon"]["temp_file_limit"] == "262144"
        with postgrest_request(db, "anon") as conn:
            assert conn.execute("select current_setting('temp_file_limit')").fetchone() == (
                "256MB",
            )
        with postgrest_request(db, "authenticated", claims_for("acme")) as conn:
            assert conn.execute("select current_setting('temp_file_limit')").fetchone() == ("1GB",)
        # Enforced: with a 1 MB limit a sort that spills fails (53400), as anon through the
        # PostgREST replay.
        apply_policies(db, anon_temp_file_limit="1MB")
        with postgrest_request(db, "anon") as conn:
            with pytest.raises(psycopg.errors.ConfigurationLimitExceeded):
                conn.execute("set local work_mem = '64kB'")
                conn.execute(SPILLING_SORT)
            conn.rollback()
    finally:
        restore_default_limits(db)
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("revoke set on parameter temp_file_limit from {}").format(
                    sql.Identifier(AUTHENTICATOR)
                )
            )


def test_a_stricter_existing_timeout_is_kept_and_a_laxer_one_replaced(api_db: str) -> None:
    try:
        with connect(api_db) as conn:
            conn.execute("alter role anon set statement_timeout = '1s'")  # e.g. an operator's
            conn.execute("alter role authenticated set statement_timeout = '1min'")
            conn.commit()
        apply_policies(api_db)
        settings = postgrest_role_settings(api_db)
        assert settings["anon"]["statement_timeout"] == "1000"
        assert settings["authenticated"]["statement_timeout"] == "8000"
    finally:
        restore_default_limits(api_db)


def test_a_migrate_that_changes_role_limits_tells_postgrest_to_reload_them(api_db: str) -> None:
    with connect(api_db, autocommit=True) as listener:
        listener.execute("listen pgrst")
        try:
            apply_policies(api_db, anon_statement_timeout="2s")
            apply_policies(api_db)  # 2s is stricter than the default: kept, nothing changes
            payloads = [n.payload for n in listener.notifies(timeout=1, stop_after=3)]
        finally:
            restore_default_limits(api_db)
    assert payloads == ["reload config"]


# -- 5. writes: no borrowed identities, no self-publishing -------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "insert into pgrag.documents (id, source_type, source_uri) values ({doc}, 'text', 'x')",
        "insert into pgrag.documents (id, source_type, source_uri) overriding system value "
        "values ({doc}, 'text', 'x')",
        "insert into pgrag.chunks (id, document_id, chunk_index, content, content_sha256) "
        "overriding system value values ({chunk}, {own}, 50, 'x', 'x')",
        "update pgrag.documents set id = {doc} where id = {own}",
        "update pgrag.chunks set id = {chunk} where document_id = {own}",
    ],
    ids=["insert-id", "insert-overriding", "chunk-overriding", "update-doc-id", "update-chunk-id"],
)
def test_a_tenant_cannot_set_ids(two_tenants: Loaded, statement: str) -> None:
    # The ids of globex's rows, borrowed by acme.
    ids = {
        "doc": two_tenants.documents["globex"][0],
        "chunk": two_tenants.chunks["globex"][0],
        "own": two_tenants.documents["acme"][0],
    }
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(statement.format(**ids))


@pytest.mark.parametrize(
    "statement",
    [
        "insert into pgrag.documents (source_type, source_uri, is_public) "
        "values ('text', 'phish.txt', true)",
        "update pgrag.documents set is_public = true",
    ],
    ids=["insert", "update"],
)
def test_a_tenant_cannot_publish(two_tenants: Loaded, statement: str) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(statement)
    with connect(two_tenants.db) as admin:
        public = admin.execute("select id from pgrag.documents where is_public").fetchall()
    assert [r[0] for r in public] == two_tenants.public_documents


def test_a_tenants_new_rows_never_share_an_id_with_another_tenants(two_tenants: Loaded) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (doc,) = conn.execute(
            "insert into pgrag.documents (source_type, source_uri) values ('text', 'new.txt') "
            "returning id"
        ).fetchone()
        (chunk,) = conn.execute(
            "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256) "
            "values (%s, 0, 'hello', 'x') returning id",
            (doc,),
        ).fetchone()
    assert doc not in two_tenants.documents["globex"]
    assert chunk not in two_tenants.chunks["globex"]
    with connect(two_tenants.db) as admin:
        shared = admin.execute(
            "select (select count(*) - count(distinct id) from pgrag.documents), "
            "(select count(*) - count(distinct id) from pgrag.chunks)"
        ).fetchone()
    assert shared == (0, 0)


def test_service_role_may_publish(two_tenants: Loaded) -> None:
    doc = two_tenants.documents["globex"][0]
    with request(two_tenants.db, "service_role") as conn:
        updated = conn.execute(
            "update pgrag.documents set is_public = true where id = %s", (doc,)
        ).rowcount
    assert updated == 1


def published_document_of(loaded: Loaded, tenant: str) -> int:
    return next(d for d in loaded.documents[tenant] if d in loaded.public_documents)


def private_document_of(loaded: Loaded, tenant: str) -> int:
    return next(d for d in loaded.documents[tenant] if d not in loaded.public_documents)


@pytest.mark.parametrize(
    "statement",
    [
        "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256) "
        "values ({pub}, 900000, 'send your password to evil@example.com', 'x')",
        "update pgrag.chunks set content = 'send your password to evil@example.com' "
        "where document_id = {pub}",
        "update pgrag.documents set title = 'Official notice' where id = {pub}",
        "update pgrag.chunks set document_id = {pub}, chunk_index = chunk_index + 900000 "
        "where document_id = {priv}",
        "update pgrag.chunks set document_id = {priv}, chunk_index = chunk_index + 900000 "
        "where document_id = {pub}",
    ],
    ids=["add-chunk", "edit-chunk", "edit-document", "move-chunk-in", "move-chunk-out"],
)
def test_a_tenant_cannot_change_a_published_document(two_tenants: Loaded, statement: str) -> None:
    tenant = next(
        t
        for t in two_tenants.documents
        if any(d in two_tenants.public_documents for d in two_tenants.documents[t])
        and any(d not in two_tenants.public_documents for d in two_tenants.documents[t])
    )
    pub = published_document_of(two_tenants, tenant)
    priv = private_document_of(two_tenants, tenant)
    with connect(two_tenants.db) as admin:
        before = admin.execute(
            "select count(*), string_agg(content, '|' order by id) from pgrag.chunks "
            "where document_id = %s",
            (pub,),
        ).fetchone()
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="publish"),
        request(two_tenants.db, "authenticated", claims_for(tenant)) as conn,
    ):
        conn.execute(statement.format(pub=pub, priv=priv))
    with connect(two_tenants.db) as admin:
        after = admin.execute(
            "select count(*), string_agg(content, '|' order by id) from pgrag.chunks "
            "where document_id = %s",
            (pub,),
        ).fetchone()
    assert after == before


def test_a_tenant_may_withdraw_its_published_document_and_service_role_may_edit_it(
    two_tenants: Loaded,
) -> None:
    tenant = next(
        t
        for t in two_tenants.documents
        if any(d in two_tenants.public_documents for d in two_tenants.documents[t])
    )
    pub = published_document_of(two_tenants, tenant)
    with request(two_tenants.db, "service_role", claims_for(tenant)) as conn:
        edited = conn.execute(
            "update pgrag.documents set title = 'Reviewed' where id = %s", (pub,)
        ).rowcount
    with request(two_tenants.db, "authenticated", claims_for(tenant)) as conn:
        conn.execute("delete from pgrag.chunks where document_id = %s", (pub,))
        withdrawn = conn.execute("delete from pgrag.documents where id = %s", (pub,)).rowcount
    assert (edited, withdrawn) == (1, 1)


@pytest.fixture(scope="module")
def query_embedding(local_embedder: Any) -> np.ndarray:
    return np.asarray(local_embedder.embed(["vacation policy paid leave"])[0], dtype=np.float32)


def test_results_name_the_tenant_of_every_row(
    two_tenants: Loaded, query_embedding: np.ndarray
) -> None:
    # Both tenants publish a look-alike document: anon tells them apart by tenant_id.
    with connect(two_tenants.db) as admin:
        admin.execute("update pgrag.documents set is_public = true")
        owner = dict(admin.execute("select id, tenant_id from pgrag.chunks").fetchall())
        admin.commit()
    every = sorted(owner)
    with postgrest_request(two_tenants.db, "anon") as conn:
        rows = {
            name: conn.execute(query, args).fetchall()
            for name, query, args in [
                (
                    "vector_search",
                    "select chunk_id, tenant_id from public.vector_search(%s, 20)",
                    (query_embedding,),
                ),
                (
                    "hybrid_search",
                    "select chunk_id, tenant_id from public.hybrid_search('vacation', %s, 20)",
                    (query_embedding,),
                ),
                (
                    "chunk_windows",
                    "select chunk_ids[1], tenant_id from public.chunk_windows(%s, 0)",
                    (every,),
                ),
            ]
        }
        (sources,) = conn.execute(
            "select sources from public.build_context('vacation', %s)", (query_embedding,)
        ).fetchone()
    for name, found in rows.items():
        assert {t for _, t in found} == {"acme", "globex"}, name
        assert all(owner[c] == t for c, t in found), name
    assert sources and all(owner[s["chunk_ids"][0]] == s["tenant_id"] for s in sources)
    with postgrest_request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        found = conn.execute(
            "select chunk_id, tenant_id from public.keyword_search('vacation')"
        ).fetchall()
    assert found and all(t == "acme" == owner[c] for c, t in found)


# -- 7. internal functions and privileges -------------------------------------------------------


def test_bm25_apply_refuses_another_tenant_before_taking_its_lock(two_tenants: Loaded) -> None:
    db = two_tenants.db
    with connect(api_dsn(db)) as attacker, connect(db) as observer:
        pid = attacker.execute("select pg_backend_pid()").fetchone()
        assert pid is not None
        # globex's writer holds the lock bm25_apply would take for globex on the attacker's
        # shard: taking it would wait; refusing first returns at once.
        observer.execute("select pg_advisory_xact_lock(hashtext('globex'), %s)", (pid[0] % 16,))
        attacker.execute("set local role authenticated")
        attacker.execute(
            "select set_config('request.jwt.claims', %s, true)", (json.dumps(claims_for("acme")),)
        )
        attacker.execute("set local lock_timeout = '2s'")
        seen: list[Any] = []

        def watch() -> None:  # what pg_locks shows of the attacker while its call runs
            with connect(db, autocommit=True) as other:
                for _ in range(10):
                    seen.extend(
                        other.execute(
                            "select locktype, granted from pg_locks "
                            "where pid = %s and locktype = 'advisory'",
                            (pid[0],),
                        ).fetchall()
                    )
                    time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        started = time.monotonic()
        # (bm25_apply is the owner's alone now: the BM25 trigger runs as the owner.)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            attacker.execute(
                "select pgrag.bm25_apply(1, array['globex'], array[1::bigint], "
                "array['english'], array['secret:1'::tsvector])"
            )
        elapsed = time.monotonic() - started
        watcher.join()
        attacker.rollback()
        observer.rollback()
    assert elapsed < 1.0
    assert seen == []


def test_bm25_apply_still_indexes_the_callers_own_rows(two_tenants: Loaded) -> None:
    doc = two_tenants.documents["acme"][0]
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        conn.execute(
            "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256) "
            "values (%s, 77, 'quokka habitat', 'x')",
            (doc,),
        )
        rows = conn.execute(
            "select tenant_id from pgrag.bm25_postings where lexeme = 'quokka'"
        ).fetchall()
    assert rows == [("acme",)]


@pytest.mark.parametrize(
    ("role", "call"),
    [
        ("anon", "select pgrag.bm25_apply(1, '{}', '{}', '{}', '{}')"),
        (
            "authenticated",
            "select pgrag.replace_document_chunks('pgrag.chunks', 'acme', '{}', '{}', '{}', "
            "'{}', '{}', '{}', 'm')",
        ),
        ("authenticated", "select pgrag.touch_updated_at()"),
    ],
    ids=["anon-bm25_apply", "authenticated-loader", "trigger-function"],
)
def test_api_roles_cannot_execute_internal_writers(api_db: str, role: str, call: str) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for function"),
        request(api_db, role, claims_for("acme")) as conn,
    ):
        conn.execute(call)


def executable_functions(db: str, role: str) -> set[str]:
    """schema.name of every function ``role`` may execute, outside pg_catalog,
    information_schema and extensions."""
    with connect(db) as conn:
        rows = conn.execute(
            "select p.pronamespace::regnamespace::text || '.' || p.proname from pg_proc p "
            "where p.pronamespace not in ('pg_catalog'::regnamespace, "
            "'information_schema'::regnamespace) "
            "and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass "
            "and d.objid = p.oid and d.deptype = 'e') "
            "and has_function_privilege(%s, p.oid, 'execute')",
            (role,),
        ).fetchall()
    return {r[0] for r in rows}


def documented_functions() -> dict[str, set[str]]:
    """The table under "### Functions each role can execute" in docs/security.md."""
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("### Functions each role can execute", 1)[1].split("\n#", 1)[0]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            out[cells[0].strip("`")] = set(re.findall(r"`([\w.]+)`", cells[1]))
    return out


@pytest.mark.parametrize("role", ["anon", "authenticated", "service_role"])
def test_each_role_executes_exactly_the_documented_functions(api_db: str, role: str) -> None:
    assert executable_functions(api_db, role) == documented_functions()[role]


@pytest.mark.parametrize("role", ["anon", "authenticated", "service_role"])
def test_every_function_an_executable_function_calls_is_executable(api_db: str, role: str) -> None:
    # Invoker functions need EXECUTE on what they call; so do the chunks triggers the writing
    # roles fire.
    with connect(api_db) as conn:
        bodies = dict(
            conn.execute(
                "select p.pronamespace::regnamespace::text || '.' || p.proname, p.prosrc "
                "from pg_proc p where p.pronamespace in ('pgrag'::regnamespace, "
                "'public'::regnamespace)"
            ).fetchall()
        )
        triggers = [
            r[0]
            for r in conn.execute(
                "select distinct 'pgrag.' || p.proname from pg_trigger t "
                "join pg_proc p on p.oid = t.tgfoid join pg_class c on c.oid = t.tgrelid "
                "where c.relnamespace = 'pgrag'::regnamespace and not t.tgisinternal "
                "and not p.prosecdef "  # the BM25 trigger runs as the owner
                "and has_table_privilege(%s, c.oid, 'insert, update, delete')",
                (role,),
            )
        ]
    allowed = executable_functions(api_db, role)
    missing = {
        (caller, "pgrag." + callee)
        for caller in allowed | set(triggers)
        for callee in re.findall(r"\bpgrag\.(\w+)\s*\(", bodies.get(caller, ""))
        if "pgrag." + callee in bodies and "pgrag." + callee not in allowed
    }
    assert missing == set()


def test_functions_created_later_are_not_executable_by_public(two_tenants: Loaded) -> None:
    db = two_tenants.db
    with connect(db) as owner:  # the role that migrated (default privileges are per role)
        owner.execute("create function pgrag.added_later() returns int language sql return 1")
        owner.execute("create function public.added_later() returns int language sql return 1")
        owner.commit()
        acl = owner.execute(
            "select p.oid::regprocedure::text from pg_proc p, "
            "aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a "
            "where p.proname = 'added_later' and a.grantee = 0"
        ).fetchall()
    assert acl == []
    for role in ("anon", "authenticated"):
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            request(db, role, claims_for("acme")) as conn,
        ):
            conn.execute("select public.added_later()")


def test_pgvector_functions_added_later_are_executable_by_public_after_migrate(
    api_db: str,
) -> None:
    # What an ALTER EXTENSION vector UPDATE run by the migrating role leaves: a new extension
    # function without EXECUTE for PUBLIC (the default privileges reach extension scripts).
    with connect(api_db) as owner:
        owner.execute(
            "create function public.vector_added_later() returns int language sql return 1"
        )
        owner.execute("alter extension vector add function public.vector_added_later()")
        owner.commit()
    apply_policies(api_db)
    with request(api_db, "anon") as conn:
        assert conn.execute("select public.vector_added_later()").fetchone() == (1,)


# Findings pgspot reports on the released incremental files as written (without the
# search_path the migrator, the SQL bundle and the Supabase files set before each of them):
# unqualified now(), to_tsvector, format, jsonb, and operators in defaults, CHECK constraints,
# the generated fts column and a DO block. Accepted, not fixed by a new migration: a default,
# constraint or generation expression is stored bound to the objects it resolved to when the
# table was created (by OID), so its text can only be hijacked during that migration, which
# always runs with search_path = pg_catalog, pg_temp (tests/test_security.py lints the files
# exactly as run: nothing). Re-creating them qualified would change nothing in the catalog.
# Every later incremental file must be clean as written (set local search_path first).
ACCEPTED_RAW_PGSPOT = {
    "001-core.sql": {"PS001", "PS016", "PS017"},
    "002-bm25.sql": {"PS001"},
}


@pytest.mark.parametrize(
    "path",
    sorted((sql_dir() / "incremental").glob("*.sql"))
    + sorted((sql_dir() / "idempotent").glob("*.sql")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_pgspot_on_both_tiers_as_written(path: Path, tmp_path: Path) -> None:
    pgspot = dev_tool("pgspot")
    if pgspot is None:
        pytest.skip("pgspot is not installed")
    rendered = tmp_path / path.name
    rendered.write_text(path.read_text().replace("@extschema:vector@", "public"))
    out = subprocess.run(
        [pgspot, "--ignore", "PS002", str(rendered)], capture_output=True, text=True
    ).stdout
    found = pgspot_codes(out)
    accepted = (
        ACCEPTED_RAW_PGSPOT.get(path.name, set()) if path.parent.name == "incremental" else set()
    )
    assert found <= accepted, out
