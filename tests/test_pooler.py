"""Tenants stay apart through a real PgBouncer in transaction pooling mode.

PgBouncer (Debian package ``pgbouncer``) runs on a free loopback port in front of the test
cluster, with one server connection per database and user, so every client's transactions take
turns on the same server backend. Clients authenticate with a userlist file. When PgBouncer is
missing, the fixture installs it with apt-get if running as root, else the tests are skipped
with the reason (``-ra`` prints it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from plugins.pgservers import ServerUnavailable, Steps, apt_install
from plugins.tenancy import (
    AUTHENTICATOR,
    Loaded,
    claims_for,
)
from psycopg.conninfo import conninfo_to_dict

PASSWORD = "pooled-secret"  # the client's password in PgBouncer's userlist (the server trusts)


def _find_pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )


@pytest.fixture(scope="session")
def pgbouncer_bin(server_steps: Steps) -> str:
    """Debian's PgBouncer: installed when missing, as the other servers' packages are (root
    only, ``--no-upgrade``, never when that would upgrade anything, not with
    PGRAG_TEST_NO_INSTALL); otherwise the pooler tests skip with the reason."""
    found = _find_pgbouncer()
    if found:
        return found
    try:
        apt_install(("pgbouncer",), server_steps)
    except ServerUnavailable as exc:
        server_steps.say(f"SKIPPING pooler tests: {exc}")
        pytest.skip(f"PgBouncer: {exc}")
    found = _find_pgbouncer()
    if not found:
        pytest.skip("PgBouncer: installed, but no pgbouncer binary was found")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


StartPooler = Callable[..., int]


@pytest.fixture(scope="module")
def start_pooler(pgbouncer_bin: str, pg_admin_dsn: str) -> Iterator[StartPooler]:
    """Start a PgBouncer (transaction mode, one server connection) with extra settings; its port."""
    with psycopg.connect(pg_admin_dsn) as conn:
        (server_port,) = conn.execute("select current_setting('port')").fetchone()
    # The embedded cluster listens on a Unix socket only (in its data folder, readable by the
    # server's own user alone): PgBouncer connects there, running as that user when root.
    server_host = str(conninfo_to_dict(pg_admin_dsn).get("host") or "127.0.0.1")
    admin_user = str(conninfo_to_dict(pg_admin_dsn).get("user") or "postgres")
    run_as = "nobody"
    if server_host.startswith("/"):
        import pwd

        run_as = pwd.getpwuid(os.stat(server_host).st_uid).pw_name
    procs: list[subprocess.Popen[bytes]] = []
    folders: list[str] = []

    def start(**settings: str) -> int:
        folder = tempfile.mkdtemp(prefix="pgrag-pgbouncer-")
        folders.append(folder)
        port = _free_port()
        values = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(port),
            "unix_socket_dir": "",
            "auth_type": "scram-sha-256",
            "auth_file": f"{folder}/userlist.txt",
            "pool_mode": "transaction",
            "default_pool_size": "1",
            "max_db_connections": "1",
            "logfile": f"{folder}/pgbouncer.log",
            "pidfile": f"{folder}/pgbouncer.pid",
            "client_login_timeout": "20",
            **settings,
        }
        config = "[databases]\n"
        config += f"* = host={server_host} port={server_port}\n\n[pgbouncer]\n"
        config += "".join(f"{k} = {v}\n" for k, v in values.items())
        Path(folder, "pgbouncer.ini").write_text(config)
        users = (AUTHENTICATOR, admin_user)
        Path(folder, "userlist.txt").write_text("".join(f'"{u}" "{PASSWORD}"\n' for u in users))
        command = [pgbouncer_bin, f"{folder}/pgbouncer.ini"]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            shutil.chown(folder, run_as)
            for name in ("pgbouncer.ini", "userlist.txt"):
                shutil.chown(Path(folder, name), run_as)
            command[1:1] = ["-u", run_as]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(proc)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return port
            time.sleep(0.1)
        raise RuntimeError("pgbouncer did not start listening")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def reset_pooler(start_pooler: StartPooler) -> int:
    """The configuration docs/security.md asks for: DISCARD ALL after every transaction."""
    return start_pooler(server_reset_query="DISCARD ALL", server_reset_query_always="1")


@pytest.fixture(scope="module")
def default_pooler(start_pooler: StartPooler) -> int:
    """PgBouncer's defaults: in transaction mode the reset query is not run."""
    return start_pooler()


def pooled(
    db: str, port: int, *, autocommit: bool = False, user: str = AUTHENTICATOR
) -> psycopg.Connection[Any]:
    """A client connection through PgBouncer as the PostgREST-like authenticator.

    prepare_threshold=None: PgBouncer 1.18 does not carry prepared statements across
    transactions (psycopg would prepare a query after its fifth run).
    """
    return psycopg.connect(
        host="127.0.0.1",
        port=port,
        dbname=str(conninfo_to_dict(db)["dbname"]),
        user=user,
        password=PASSWORD,
        autocommit=autocommit,
        prepare_threshold=None,
    )


def postgrest_request(
    conn: psycopg.Connection[Any], role: str, claims: dict[str, Any] | None
) -> tuple[int, list[str], str | None]:
    """One PostgREST request on a pooled client: (server pid, tenants of chunks seen, tenant)."""
    import json

    with conn.transaction():
        conn.execute(f"set local role {role}")
        if claims is not None:
            conn.execute(
                "select pg_catalog.set_config('request.jwt.claims', %s, true)",
                (json.dumps(claims),),
            )
        pid, tenant = conn.execute("select pg_backend_pid(), pgrag.current_tenant_id()").fetchone()  # type: ignore[misc]
        seen = [r[0] for r in conn.execute("select distinct tenant_id from pgrag.chunks")]
        seen += [
            r[0]
            for r in conn.execute(
                "select c.tenant_id from public.keyword_search('vacation policy', 20) as k "
                "join pgrag.chunks as c on c.id = k.chunk_id"
            )
        ]
    return pid, sorted(set(seen)), tenant


def leave_session_state(db: str, port: int, statement: str) -> int:
    """A client that sets something for the whole session and leaves; the server pid it used."""
    with pooled(db, port, autocommit=True) as conn:
        conn.execute(statement)
        (pid,) = conn.execute("select pg_backend_pid()").fetchone()  # type: ignore[misc]
    return int(pid)


def test_two_tenants_interleaved_over_one_server_connection_never_see_each_other(
    two_tenants: Loaded, reset_pooler: int
) -> None:
    db = two_tenants.db
    results: dict[str, list[tuple[int, list[str], str | None]]] = {"acme": [], "globex": []}
    errors: list[BaseException] = []

    def client(tenant: str) -> None:
        try:
            with pooled(db, reset_pooler) as conn:
                for _ in range(15):
                    results[tenant].append(
                        postgrest_request(conn, "authenticated", claims_for(tenant))
                    )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(t,)) for t in ("acme", "globex")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for tenant, rows in results.items():
        assert [(seen, current) for _, seen, current in rows] == [([tenant], tenant)] * 15
    pids = {pid for rows in results.values() for pid, _, _ in rows}
    assert len(pids) == 1, "both tenants' requests went over one server connection"


def test_a_session_claim_left_by_one_client_never_reaches_the_next(
    two_tenants: Loaded, reset_pooler: int
) -> None:
    db = two_tenants.db
    left_on = leave_session_state(
        db,
        reset_pooler,
        "select set_config('request.jwt.claims', '{\"tenant_id\": \"acme\"}', false)",
    )
    with pooled(db, reset_pooler) as conn:
        pid, seen, tenant = postgrest_request(conn, "authenticated", None)
    assert pid == left_on, "the next client got the same server connection"
    assert (seen, tenant) == ([], None)


def test_a_session_role_left_by_one_client_never_reaches_the_next(
    two_tenants: Loaded, reset_pooler: int
) -> None:
    db = two_tenants.db
    left_on = leave_session_state(db, reset_pooler, "set role service_role")
    with pooled(db, reset_pooler, autocommit=True) as conn:
        pid, user = conn.execute("select pg_backend_pid(), current_user").fetchone()  # type: ignore[misc]
    assert (pid, user) == (left_on, AUTHENTICATOR)


def test_pgbouncer_defaults_keep_a_session_claim_for_the_next_client(
    two_tenants: Loaded, default_pooler: int
) -> None:
    # Why docs/security.md asks for server_reset_query_always: in transaction mode PgBouncer
    # runs no reset query by default, so session state of one client reaches the next.
    db = two_tenants.db
    leave_session_state(
        db,
        default_pooler,
        "select set_config('request.jwt.claims', '{\"tenant_id\": \"acme\"}', false)",
    )
    with pooled(db, default_pooler) as conn:
        _, seen, tenant = postgrest_request(conn, "authenticated", None)
    assert (seen, tenant) == (["acme"], "acme")


def test_postgrest_requests_override_a_leaked_session_claim_even_without_reset(
    two_tenants: Loaded, default_pooler: int
) -> None:
    db = two_tenants.db
    leave_session_state(
        db,
        default_pooler,
        "select set_config('request.jwt.claims', '{\"tenant_id\": \"acme\"}', false)",
    )
    with pooled(db, default_pooler) as conn:
        _, seen, tenant = postgrest_request(conn, "authenticated", claims_for("globex"))
        assert (seen, tenant) == (["globex"], "globex")
        _, seen, tenant = postgrest_request(conn, "anon", {"role": "anon"})
        assert (seen, tenant) == (["acme"], None)  # acme's public document only
        with conn.transaction():
            conn.execute("set local role anon")
            chunks = {r[0] for r in conn.execute("select id from pgrag.chunks")}
        assert chunks == set(two_tenants.public_chunks)


def test_pgrag_searches_of_two_tenants_over_one_pooled_owner_connection_stay_apart(
    two_tenants: Loaded, reset_pooler: int, pg_admin_dsn: str, local_embedder: Any
) -> None:
    # The CLI's way: the owner (RLS bypassed), pgrag.set_request_tenant per transaction, here
    # with a nested claim path; only the search functions' own tenant filter keeps tenants apart.
    from psycopg import sql

    from pgrag.db import connect
    from pgrag.search import SearchOptions, search

    db = two_tenants.db
    name = str(conninfo_to_dict(db)["dbname"])
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            sql.SQL("alter database {} set pgrag.tenant_claim = 'app_metadata.tenant_id'").format(
                sql.Identifier(name)
            )
        )
    admin = str(conninfo_to_dict(pg_admin_dsn).get("user") or "postgres")
    url = psycopg.conninfo.make_conninfo(
        host="127.0.0.1", port=reset_pooler, dbname=name, user=admin, password=PASSWORD
    )
    chunk_tenant = {c: t for t, ids in two_tenants.chunks.items() for c in ids}
    with connect(url, prepare_threshold=None) as a, connect(url, prepare_threshold=None) as b:
        for _ in range(3):
            for conn, tenant in ((a, "acme"), (b, "globex")):
                for mode in ("vector", "keyword", "hybrid"):
                    hits = search(
                        conn,
                        "vacation policy paid leave",
                        SearchOptions(mode=mode, limit=10),
                        tenant=tenant,
                        embedder=local_embedder,
                    )
                    assert hits, (tenant, mode)
                    assert {chunk_tenant[h.chunk_id] for h in hits} == {tenant}, (tenant, mode)
