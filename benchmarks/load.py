"""Concurrent load on one server: pgbench calling ``hybrid_search`` as PostgREST would.

Corpora: the 10k and 100k synthetic SciFact corpora of ``benchmarks/latency.py`` (its builder,
embedding cache and binary-COPY loader, imported, not copied), spread over --tenants tenants
(default 4: 2,500 and 25,000 chunks each), each given its own HNSW graph with
``pgrag.isolate_tenants()`` as ``pgrag ingest`` does. Queries: the 300 SciFact test claims with
their real MiniLM embeddings, in a table ``loadbench.queries``.

Every pgbench transaction replays one PostgREST request (as ``tests/test_security_privileges.py``'s
``postgrest_request`` does, on a LOGIN NOINHERIT role granted the API roles): a random query and a
random tenant are looked up (``\\gset``, outside the request), then in one transaction the
request's settings are made transaction-local in one statement (``search_path``, the role's own
settings such as ``statement_timeout = 8s``, ``role = authenticated``, ``request.jwt.claims`` with
the tenant), the function is called with the result aggregated to JSON as PostgREST does, and the
transaction commits. Prepared statements (``-M prepared``), as PostgREST uses by default.

Scripts, interleaved at each client count (1, 4, 16, 64 by default) so that their ratios come from
neighbouring runs on this shared machine:

* ``pgrag hybrid_search``: ``public.hybrid_search(query, embedding, 10)`` (default weighted fusion);
* ``supabase guide RRF`` and ``pg ts_rank OR``: the peer SQL of ``benchmarks/beir.py`` (imported),
  run in the same request pattern, so row-level security applies to them as to an RPC function;
* ``request overhead`` (1 client): the same transaction with ``select 1`` instead of a search;
* at the largest client count, the pgrag script with ``-M extended`` directly and through
  PgBouncer in transaction mode (pools of --pgbouncer-pools server connections with the reset
  docs/security.md asks for, DISCARD ALL after every transaction, and the largest pool without);
* ``pgrag hybrid_search + ingest``: the pgrag script again while ``pgrag ingest`` loads SciFact
  abstracts (not in the corpus) into another tenant, embedding them with the local model (the
  ingest is measured alone first).

Per run: queries/s, p50/p95/p99 of the per-transaction latencies (``pgbench --log``), failed
transactions and aborted clients (must be 0), the mean of each statement (``pgbench -r``: the
lookup is negligible), and what the CPUs did (``/proc/stat`` sampled every 0.5 s: machine busy,
runnable processes, CPU seconds of the server's processes, of pgbench and of the ingest, and the
server's CPU per query; wait events of the active backends from ``pg_stat_activity``). Output
``benchmarks/results/load.json``; docs/scaling.md reads it.

    .venv/bin/python benchmarks/load.py                              # 10k and 100k, ~40 minutes
    .venv/bin/python benchmarks/load.py --sizes 10000 --duration 5 --clients 1 4   # a quick look

``--admin-dsn`` runs on an existing server (superuser; pgbench connects as a role it creates);
with ``--keep`` the loaded databases stay there, and a later ``--keep`` run reuses them when the
corpus parameters and the SQL files are unchanged (the 100k load takes minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import latency  # noqa: E402  (the corpora, the embedding cache and the loader)
from beir import SUPABASE_RRF, TS_RANK_OR  # noqa: E402  (the peers' SQL)
from common import percentile  # noqa: E402

from pgrag.db import VECTOR_SCHEMA_SQL  # noqa: E402
from pgrag.local_server import server_binary  # noqa: E402
from pgrag.testing import drop_database, dsn_for, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "load.json"
AUTHENTICATOR = "pgrag_bench_authenticator"
INGEST_TENANT = "load-ingest"
CLK_TCK = os.sysconf("SC_CLK_TCK")

PGRAG = "pgrag hybrid_search"
SUPABASE = "supabase guide RRF"
TS_RANK = "pg ts_rank OR"
OVERHEAD = "request overhead"
WITH_INGEST = "pgrag hybrid_search + ingest"
EXTENDED = "pgrag hybrid_search, -M extended"
POOLED = "pgrag hybrid_search via PgBouncer, pool {}{}"


# -- the database: corpus, tenants, queries, the login role ------------------------------------


def sql_digest() -> str:
    """A digest of the SQL files (a kept database is reused only when they are unchanged)."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "sql").rglob("*.sql")):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def ensure_authenticator(admin: str) -> None:
    """A LOGIN NOINHERIT role granted the API roles, like PostgREST's ``authenticator``."""
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_roles where rolname = %s", (AUTHENTICATOR,))
        if not exists.fetchone():
            conn.execute(
                sql.SQL("create role {} login noinherit").format(sql.Identifier(AUTHENTICATOR))
            )
        for role in ("anon", "authenticated", "service_role"):
            conn.execute(
                sql.SQL("grant {} to {}").format(
                    sql.Identifier(role), sql.Identifier(AUTHENTICATOR)
                )
            )


def prepare_database(
    admin: str,
    size: int,
    texts: list[str],
    vectors: np.ndarray,
    queries: list[str],
    qvecs: np.ndarray,
    tenants: int,
    keep: bool,
    fingerprint: str,
) -> tuple[str, dict[str, Any]]:
    """The loaded database for ``size`` chunks (reused when ``keep`` and its fingerprint match)."""
    name = f"load_{size}_t{tenants}"
    dsn = dsn_for(admin, name)
    if keep:
        with psycopg.connect(admin, autocommit=True) as conn:
            row = conn.execute(
                "select shobj_description(oid, 'pg_database') from pg_database where datname = %s",
                (name,),
            ).fetchone()
        if row and row[0] == fingerprint:
            with psycopg.connect(dsn, autocommit=True) as conn:
                # back to the loaded state: the ingest tenant of an earlier run removed
                conn.execute("select pgrag.share_tenant(%s)", (INGEST_TENANT,))
                conn.execute("delete from pgrag.documents where tenant_id = %s", (INGEST_TENANT,))
                conn.execute("vacuum analyze")
                conn.execute("checkpoint")
            print(f"  reusing database {name} (loaded by an earlier --keep run)", flush=True)
            return dsn, {"reused": True}
    dsn = fresh_database(admin, name)
    ensure_authenticator(admin)  # after the first migrate made the API roles
    info: dict[str, Any] = latency.load(dsn, texts, vectors, tenants=tenants)
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set maintenance_work_mem = '512MB'")
        isolated = conn.execute("select tenant_id from pgrag.isolate_tenants()").fetchall()
        info["isolated_tenants"] = len(isolated)
        info["isolate_s"] = round(time.perf_counter() - started, 1)
        conn.execute("create schema loadbench")
        conn.execute(
            "create table loadbench.queries (id int primary key, query_text text not null,"
            " embedding text not null)"
        )
        conn.execute(
            "create table loadbench.tenants (id int primary key, tenant text not null,"
            " claims text not null)"
        )
        with conn.cursor() as cur:
            cur.executemany(
                "insert into loadbench.queries values (%s, %s, %s)",
                [
                    (i + 1, q, "[" + ",".join(f"{x:.7g}" for x in v) + "]")
                    for i, (q, v) in enumerate(zip(queries, qvecs, strict=True))
                ],
            )
            cur.executemany(
                "insert into loadbench.tenants values (%s, %s, %s)",
                [(t + 1, f"t{t}", jwt_claims(conn, f"t{t}")) for t in range(tenants)],
            )
        conn.execute("analyze loadbench.queries")
        conn.execute("analyze loadbench.tenants")
        for stmt in (
            "grant usage on schema loadbench to {}",
            "grant select on all tables in schema loadbench to {}",
        ):
            conn.execute(sql.SQL(stmt).format(sql.Identifier(AUTHENTICATOR)))
        conn.execute(
            sql.SQL("comment on database {} is {}").format(
                sql.Identifier(name), sql.Literal(fingerprint)
            )
        )
        conn.execute("checkpoint")
    return dsn, info


def jwt_claims(conn: psycopg.Connection[Any], tenant: str) -> str:
    """The claims of a JWT for ``tenant``: the tenant where the database's ``pgrag.tenant_claim``
    reads it (``pgrag.set_request_tenant`` puts it there), PostgREST's role and a subject."""
    with conn.transaction():
        conn.execute("select pgrag.set_request_tenant(%s)", (tenant,))
        row = conn.execute(
            "select (current_setting('request.jwt.claims')::jsonb"
            " || jsonb_build_object('role', 'authenticated', 'sub', %s::text))::text",
            (f"user-of-{tenant}",),
        ).fetchone()
    assert row is not None
    return str(row[0])


def role_settings(dsn: str, role: str) -> list[tuple[str, str]]:
    """The settings PostgREST applies for ``role`` on each request: its settings for every
    database that the login role may set (context ``user``, or a SET privilege)."""
    with psycopg.connect(make_conninfo(dsn, user=AUTHENTICATOR), autocommit=True) as conn:
        rows = conn.execute(
            """
            select s.key, s.value
            from pg_roles r,
                 lateral (select split_part(c, '=', 1) as key,
                                 substr(c, strpos(c, '=') + 1) as value
                          from unnest(r.rolconfig) c) s
            join pg_settings p on p.name = s.key
            where r.rolname = %s
              and (p.context = 'user' or has_parameter_privilege(current_user, p.name, 'set'))
            order by s.key
            """,
            (role,),
        ).fetchall()
    return [(str(k), str(v)) for k, v in rows]


# -- pgbench scripts ---------------------------------------------------------------------------


def pgbench_sql(statement: str, vector_schema: str) -> str:
    """A psycopg statement of benchmarks/beir.py as a pgbench command: ``%(name)s`` becomes a
    pgbench variable (bound as a parameter with -M prepared), the limit 10."""
    return (
        statement.strip()
        .replace("%(text)s", ":query_text")
        .replace("%(tenant)s", ":tenant")
        .replace("%(limit)s", "10")
        .replace("%(embedding)s", f"cast(:embedding as {vector_schema}.vector)")
    )


def request_script(call: str, settings: list[tuple[str, str]], queries: int, tenants: int) -> str:
    """One PostgREST request per transaction: lookup, request settings, the call, commit."""
    quote = lambda s: "'" + s.replace("'", "''") + "'"  # noqa: E731
    sets = ["set_config('search_path', '\"public\", \"public\"', true)"]
    sets += [f"set_config({quote(k)}, {quote(v)}, true)" for k, v in settings]
    sets += ["set_config('role', 'authenticated', true)"]
    sets += ["set_config('request.jwt.claims', :claims, true)"]
    return "\n".join(
        [
            f"\\set q random(1, {queries})",
            f"\\set t random(1, {tenants})",
            "select q.query_text, q.embedding, t.tenant, t.claims"
            " from loadbench.queries as q, loadbench.tenants as t"
            " where q.id = :q and t.id = :t \\gset",
            "begin;",
            "select " + ", ".join(sets) + ";",
            f"select coalesce(json_agg(r), '[]')::text from ({call}) as r;",
            "commit;",
            "",
        ]
    )


def scripts(vector_schema: str) -> dict[str, str]:
    return {
        PGRAG: "select * from public.hybrid_search(:query_text,"
        f" cast(:embedding as {vector_schema}.vector), 10)",
        SUPABASE: pgbench_sql(SUPABASE_RRF, vector_schema),
        TS_RANK: pgbench_sql(TS_RANK_OR, vector_schema),
        OVERHEAD: "select 1",
    }


# -- CPU and wait sampling ---------------------------------------------------------------------


def proc_cpu_ticks(pid: int) -> tuple[int, int] | None:
    """(utime + stime, start time) of a process in clock ticks, or None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12]), int(fields[19])


def machine_ticks() -> tuple[int, int, int]:
    """(busy, total) jiffies of all CPUs and the runnable process count, from /proc/stat."""
    busy = total = running = 0
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            total = sum(values[:8])
            busy = total - values[3] - values[4]  # minus idle and iowait
        elif line.startswith("procs_running"):
            running = int(line.split()[1])
    return busy, total, running


class Sampler:
    """Samples, every ``interval`` s while a run lasts: machine CPU (/proc/stat), the CPU of the
    server's processes and of ``watch`` pids (/proc/PID/stat), and the wait events of the
    benchmark's active backends (pg_stat_activity)."""

    def __init__(self, admin: str, watch: dict[str, int] | None = None, interval: float = 0.5):
        self.admin = admin
        self.watch = watch or {}
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.waits: Counter[str] = Counter()
        self.running: list[int] = []
        self.server_ticks: dict[int, int] = {}  # pid -> ticks used during the run
        self._base: dict[int, int] = {}
        self.watch_ticks: dict[str, int] = {}
        self.local = True

    def __enter__(self) -> Sampler:
        self._conn = psycopg.connect(self.admin, autocommit=True)
        self._start_machine = machine_ticks()
        self._start_time = time.monotonic()
        self._start_uptime = self._uptime_ticks()
        for pid in self._server_pids():
            got = proc_cpu_ticks(pid)
            if got is None:
                self.local = False
            else:
                self._base[pid] = got[0]
        self._watch_base = {k: (proc_cpu_ticks(p) or (0, 0))[0] for k, p in self.watch.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._end_machine = machine_ticks()
        self._elapsed = time.monotonic() - self._start_time
        self._conn.close()

    @staticmethod
    def _uptime_ticks() -> int:
        return int(float(Path("/proc/uptime").read_text().split()[0]) * CLK_TCK)

    def _server_pids(self) -> list[int]:
        return [r[0] for r in self._conn.execute("select pid from pg_stat_activity")]

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        self.running.append(machine_ticks()[2])
        rows = self._conn.execute(
            "select pid, usename = %s and state = 'active', wait_event_type, wait_event"
            " from pg_stat_activity where pid <> pg_backend_pid()",
            (AUTHENTICATOR,),
        ).fetchall()
        for pid, ours, wtype, wevent in rows:
            if ours:
                self.waits["CPU (no wait event)" if wtype is None else f"{wtype}:{wevent}"] += 1
            got = proc_cpu_ticks(pid)
            if got is None:
                continue
            ticks, started = got
            if pid not in self._base:
                # a backend that started during the run counts from zero
                self._base[pid] = 0 if started >= self._start_uptime - CLK_TCK else ticks
            self.server_ticks[pid] = ticks - self._base[pid]
        for key, pid in self.watch.items():
            got = proc_cpu_ticks(pid)
            if got is not None:
                self.watch_ticks[key] = got[0] - self._watch_base[key]

    def summary(self) -> dict[str, Any]:
        busy = self._end_machine[0] - self._start_machine[0]
        total = self._end_machine[1] - self._start_machine[1]
        cores = os.cpu_count() or 1
        samples = sum(self.waits.values())
        out: dict[str, Any] = {
            "machine_busy_pct": round(100.0 * busy / total, 1) if total else None,
            "runnable_processes_mean": round(float(np.mean(self.running)), 1),
            "cores": cores,
            "active_backend_waits_pct": {
                k: round(100.0 * v / samples, 1) for k, v in self.waits.most_common(6)
            },
        }
        if self.local:
            out["server_cores_used"] = round(
                sum(self.server_ticks.values()) / CLK_TCK / self._elapsed, 2
            )
        for key, ticks in self.watch_ticks.items():
            out[f"{key}_cores_used"] = round(ticks / CLK_TCK / self._elapsed, 2)
        return out


# -- running pgbench -----------------------------------------------------------------------------

STATEMENT_NAMES = {
    "select q.query_text": "lookup (\\gset, outside the request)",
    "begin": "begin",
    "select set_config": "request settings (role, claims, timeouts)",
    "select coalesce(json_agg": "the call",
    "commit": "commit",
}


def run_pgbench(
    pgbench: Path,
    dsn: str,
    admin: str,
    script: str,
    clients: int,
    duration: float,
    workdir: Path,
    watch: dict[str, int] | None = None,
    protocol: str = "prepared",
) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix="pgbench-", dir=workdir))
    script_file = run_dir / "request.sql"
    script_file.write_text(script)
    conninfo = make_conninfo(dsn, user=AUTHENTICATOR)
    cmd = [
        str(pgbench),
        "--no-vacuum",
        f"--protocol={protocol}",
        f"--client={clients}",
        f"--jobs={min(clients, os.cpu_count() or 1)}",
        f"--time={max(1, round(duration))}",
        "--report-per-command",
        "--log",
        f"--log-prefix={run_dir / 'tx'}",
        f"--file={script_file}",
        conninfo,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with Sampler(admin, watch) as sampler:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    latencies: list[float] = []
    failed_in_log = 0
    for log in run_dir.glob("tx.*"):
        for line in log.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[2].isdigit():
                latencies.append(int(fields[2]) / 1000.0)
            elif len(fields) >= 3:
                failed_in_log += 1
    out = done.stdout
    tps = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", out, re.M)
    failed = re.search(r"^number of failed transactions: (\d+)", out, re.M)
    aborted = len(re.findall(r"client \d+ (?:script \d+ )?aborted", done.stderr))
    statements: dict[str, float] = {}
    in_report = False
    for line in out.splitlines():
        if line.startswith("statement latencies"):
            in_report = True
            continue
        m = re.match(r"^\s+([\d.]+)\s+(\d+)\s+(.*)$", line) if in_report else None
        if m:
            for prefix, label in STATEMENT_NAMES.items():
                if m.group(3).startswith(prefix):
                    statements[label] = round(float(m.group(1)), 3)
    cpu = sampler.summary()
    pgbench_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cpu["pgbench_cores_used"] = round(pgbench_s / max(duration, 1e-9), 2)
    qps = round(float(tps.group(1)), 1) if tps and latencies else None
    if qps and cpu.get("server_cores_used"):
        # what one request costs the server, whatever else the shared machine runs
        cpu["server_cpu_ms_per_query"] = round(1000.0 * cpu["server_cores_used"] / qps, 1)
    result = {
        "clients": clients,
        "protocol": protocol,
        "transactions": len(latencies),
        "queries_per_s": qps,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "failed_transactions": (int(failed.group(1)) if failed else 0) + failed_in_log,
        "aborted_clients": aborted,
        "statement_mean_ms": statements,
        "cpu": cpu,
    }
    if done.returncode not in (0,) or aborted:
        result["pgbench_exit_status"] = done.returncode
        result["pgbench_stderr"] = done.stderr.strip()[-2000:]
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def show(name: str, r: dict[str, Any]) -> None:
    cpu = r["cpu"]
    extra = f" ingest {cpu['ingest_cores_used']:.2f}" if "ingest_cores_used" in cpu else ""
    extra += (
        f"; {cpu['server_cpu_ms_per_query']} cpu-ms/q" if "server_cpu_ms_per_query" in cpu else ""
    )
    print(
        f"    {name:44s} c={r['clients']:<3d} {r['queries_per_s'] or 0:8.1f} q/s"
        f"  p50 {r['p50_ms']:8.2f}  p95 {r['p95_ms']:8.2f}  p99 {r['p99_ms']:8.2f} ms"
        f"  errors {r['failed_transactions'] + r['aborted_clients']}"
        f"  cpu {cpu['machine_busy_pct']}% (server {cpu.get('server_cores_used', '?')}"
        f" pgbench {cpu['pgbench_cores_used']:.2f}{extra} cores)",
        flush=True,
    )


# -- a pooler in front of the server ----------------------------------------------------------


@contextlib.contextmanager
def pgbouncer(admin: str, dsn: str, pool_size: int, reset: bool) -> Iterator[str]:
    """PgBouncer in transaction mode with ``pool_size`` server connections; yields a DSN through
    it. ``reset``: the reset docs/security.md asks for (DISCARD ALL after every transaction),
    else PgBouncer's default for transaction mode (no reset)."""
    exe = pgbouncer_exe()
    assert exe is not None
    params = conninfo_to_dict(admin)
    with psycopg.connect(admin, autocommit=True) as conn:
        port = str(conn.execute("select current_setting('port')").fetchone()[0])  # type: ignore[index]
    host = str(params.get("host") or "127.0.0.1")
    # its own folder under the temp dir (PgBouncer runs as another user when we are root)
    folder = Path(tempfile.mkdtemp(prefix="pgrag-pgbouncer-"))
    listen = free_port()
    values = {
        "listen_addr": "127.0.0.1",
        "listen_port": str(listen),
        "unix_socket_dir": "",
        "auth_type": "trust",
        "auth_file": f"{folder}/userlist.txt",
        "pool_mode": "transaction",
        "default_pool_size": str(pool_size),
        "max_client_conn": "500",
        "server_reset_query": "DISCARD ALL",
        "server_reset_query_always": "1" if reset else "0",
        "logfile": f"{folder}/pgbouncer.log",
        "pidfile": f"{folder}/pgbouncer.pid",
    }
    config = f"[databases]\n* = host={host} port={port}\n\n[pgbouncer]\n"
    config += "".join(f"{k} = {v}\n" for k, v in values.items())
    (folder / "pgbouncer.ini").write_text(config)
    (folder / "userlist.txt").write_text(f'"{AUTHENTICATOR}" ""\n')
    command = [exe, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses root: run it as the server's user (socket access)
        import pwd

        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
        for path in (folder, folder / "pgbouncer.ini", folder / "userlist.txt"):
            shutil.chown(path, owner)
        command[1:1] = ["-u", owner]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", listen)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("pgbouncer did not start listening")
            time.sleep(0.1)
        yield make_conninfo(dsn, host="127.0.0.1", port=listen)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def pgbouncer_exe() -> str | None:
    """PgBouncer (Debian's package puts it in /usr/sbin, often not on PATH), or None."""
    found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    return found if Path(found).exists() else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the concurrent ingest -------------------------------------------------------------------------


def ingest_folder(texts: list[str]) -> Path:
    """SciFact abstracts outside the benchmark corpus, one text file each (cached)."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    folder = latency.CACHE / f"load-ingest-{digest}"
    if not (folder / ".complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(texts):
            (folder / f"abstract-{i:05d}.txt").write_text(text + "\n")
        (folder / ".complete").write_text("")
    return folder


def ingest_counts(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select (select count(*) from pgrag.documents where tenant_id = %(t)s"
            " and status = 'ready'), (select count(*) from pgrag.chunks where tenant_id = %(t)s)",
            {"t": INGEST_TENANT},
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@contextlib.contextmanager
def running_ingest(dsn: str, folder: Path, log: Path) -> Any:
    """``pgrag ingest FOLDER --tenant load-ingest`` in the background; interrupted (Ctrl-C, which
    keeps every committed document) when the block ends."""
    exe = Path(sys.executable).with_name("pgrag")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    cmd = [str(exe), "--dsn", dsn, "ingest", str(folder), "--tenant", INGEST_TENANT]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "--progress"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            # A background job of a non-interactive shell starts with SIGINT ignored, and its
            # children inherit that: give the ingest the default, so Ctrl-C below stops it.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            deadline = time.monotonic() + 300
            while ingest_counts(dsn)[1] == 0:  # the model is loaded and documents arrive
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the ingest did not start; see {log}")
                time.sleep(0.5)
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    if proc.returncode not in (0, 130):  # recorded by the caller; the measurements stand
        print(f"      the ingest ended with exit status {proc.returncode}; see {log}", flush=True)


# -- main ----------------------------------------------------------------------------------------


def ratios(runs: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Single-client p50 ratio (peer / pgrag) and throughput ratio (pgrag / peer) per level."""
    out: dict[str, Any] = {}
    ours = runs.get(PGRAG, {})
    for peer in (SUPABASE, TS_RANK):
        theirs = runs.get(peer, {})
        levels = [c for c in ours if c in theirs]
        if not levels:
            continue
        entry: dict[str, Any] = {
            "throughput_ratio_pgrag_over_peer": {
                c: round(ours[c]["queries_per_s"] / theirs[c]["queries_per_s"], 2)
                for c in levels
                if ours[c]["queries_per_s"] and theirs[c]["queries_per_s"]
            },
            "best_throughput_ratio": round(
                max(r["queries_per_s"] or 0 for r in ours.values())
                / max(r["queries_per_s"] or 1e-9 for r in theirs.values()),
                2,
            ),
        }
        if "1" in levels:
            entry["single_client_p50_ratio_peer_over_pgrag"] = round(
                theirs["1"]["p50_ms"] / ours["1"]["p50_ms"], 2
            )
        out[peer] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per pgbench run")
    parser.add_argument("--tenants", type=int, default=4, help="tenants the corpus is spread over")
    parser.add_argument("--queries", type=int, default=300, help="SciFact test queries (max 300)")
    parser.add_argument("--base-docs", type=int, default=1000, help="as benchmarks/latency.py")
    parser.add_argument(
        "--ingest-docs", type=int, default=3000, help="abstracts offered to the concurrent ingest"
    )
    parser.add_argument(
        "--pgbouncer-pools",
        type=int,
        nargs="*",
        default=[2, 4, 8],
        help="at the largest client count, also through PgBouncer with these pool sizes",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip the Supabase/ts_rank runs")
    parser.add_argument("--no-ingest", action="store_true", help="skip the runs with an ingest")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server (default: a throwaway one)")
    parser.add_argument("--keep", action="store_true", help="keep and reuse loaded databases")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    all_texts, queries = latency.load_scifact()
    texts = all_texts[: args.base_docs]
    queries = queries[: args.queries]
    vectors = latency.embed_cached("scifact-corpus", [t[: latency.EMBED_CHARS] for t in texts])
    qvecs = latency.embed_cached("scifact-queries", queries)
    ingest_texts = all_texts[args.base_docs : args.base_docs + args.ingest_docs]
    print(
        f"SciFact: {len(texts)} abstracts, {len(queries)} queries, {args.tenants} tenants;"
        f" ingest offered {len(ingest_texts)} other abstracts",
        flush=True,
    )
    pgbench = server_binary("pgbench")  # the embedded server's own
    rng = np.random.default_rng(42)  # the corpora of latency.py (same seed, same order)
    result: dict[str, Any] = {
        "command": "python benchmarks/load.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "tenants": args.tenants,
        "queries": len(queries),
        "duration_s_per_run": args.duration,
        "request": (
            "lookup (\\gset, outside the transaction); begin; select set_config('search_path'),"
            " the role's settings, set_config('role', 'authenticated'),"
            " set_config('request.jwt.claims', {tenant_id}); the call, json_agg of its rows;"
            " commit (pgbench -M prepared)"
        ),
        "sizes": {},
    }
    workdir = Path(tempfile.mkdtemp(prefix="pgrag-load-"))
    with server(args.admin_dsn, "pgrag-load-") as admin:
        with psycopg.connect(admin, autocommit=True) as conn:
            settings = conn.execute(
                "select name, setting, unit from pg_settings where name = any(%s)",
                (
                    [
                        "max_connections",
                        "shared_buffers",
                        "work_mem",
                        "effective_cache_size",
                        "max_parallel_workers_per_gather",
                        "jit",
                        "synchronous_commit",
                    ],
                ),
            ).fetchall()
            result["server"] = {
                "version": conn.execute("show server_version").fetchone()[0],  # type: ignore[index]
                "settings": {n: f"{s}{' x ' + u if u else ''}" for n, s, u in settings},
            }
        # what the machine does without us, for reading the CPU columns
        busy0, total0, _ = machine_ticks()
        time.sleep(3)
        busy1, total1, _ = machine_ticks()
        result["machine"]["busy_pct_before"] = round(100.0 * (busy1 - busy0) / (total1 - total0), 1)
        print(f"machine CPU busy before the run: {result['machine']['busy_pct_before']} %")
        fingerprint = (
            f"pgrag load benchmark: {args.tenants} tenants, {args.base_docs} base documents,"
            f" seed 42, sql {sql_digest()}"
        )
        for size in args.sizes:
            s_texts, s_vecs = latency.synthetic(size, texts, vectors, rng)
            print(f"\n== {size} chunks over {args.tenants} tenants", flush=True)
            dsn, load_info = prepare_database(
                admin,
                size,
                s_texts,
                s_vecs,
                queries,
                qvecs,
                args.tenants,
                args.keep,
                f"{fingerprint}, {size} chunks",
            )
            print(f"  loaded: {load_info}", flush=True)
            with psycopg.connect(dsn, autocommit=True) as conn:
                vschema = str(conn.execute(VECTOR_SCHEMA_SQL).fetchone()[0])  # type: ignore[index]
            calls = scripts(vschema)
            settings_list = role_settings(dsn, "authenticated")
            script = {
                name: request_script(call, settings_list, len(queries), args.tenants)
                for name, call in calls.items()
            }
            entry: dict[str, Any] = {"load": load_info, "role_settings": dict(settings_list)}
            runs: dict[str, dict[str, dict[str, Any]]] = {}
            names = [PGRAG] + ([] if args.no_peers else [SUPABASE, TS_RANK])
            for name in names:  # warm-up: caches, plans, connections
                run_pgbench(pgbench, dsn, admin, script[name], 2, 5, workdir)
            for clients in args.clients:
                for name in names:
                    r = run_pgbench(
                        pgbench, dsn, admin, script[name], clients, args.duration, workdir
                    )
                    runs.setdefault(name, {})[str(clients)] = r
                    show(name, r)
            r = run_pgbench(pgbench, dsn, admin, script[OVERHEAD], 1, args.duration / 2, workdir)
            runs[OVERHEAD] = {"1": r}
            show(OVERHEAD, r)
            top = max(args.clients)
            if args.pgbouncer_pools and pgbouncer_exe():
                # PgBouncer < 1.21 keeps no prepared statements in transaction mode: the
                # extended protocol (unnamed statements), directly and through the pool.
                # Each pool with the reset docs/security.md asks for, and the largest without.
                pooled = [(p, True) for p in args.pgbouncer_pools]
                pooled.append((max(args.pgbouncer_pools), False))
                for pool, reset in [(0, False), *pooled]:
                    label = ", DISCARD ALL" if reset else ", no reset"
                    name = EXTENDED if pool == 0 else POOLED.format(pool, label)
                    with contextlib.ExitStack() as stack:
                        target = (
                            dsn
                            if pool == 0
                            else stack.enter_context(pgbouncer(admin, dsn, pool, reset))
                        )
                        r = run_pgbench(
                            pgbench, target, admin, script[PGRAG], top, args.duration, workdir,
                            protocol="extended",
                        )  # fmt: skip
                    runs[name] = {str(top): r}
                    show(name, r)
            elif args.pgbouncer_pools:
                print("    (no pgbouncer on this machine: pooled runs skipped)", flush=True)
            if not args.no_ingest:
                folder = ingest_folder(ingest_texts)
                log = workdir / f"ingest-{size}.log"
                with running_ingest(dsn, folder, log) as proc:
                    # the ingest alone first: what it does when no search competes
                    docs0, chunks0 = ingest_counts(dsn)
                    started = time.monotonic()
                    with Sampler(admin, {"ingest": proc.pid}) as sampler:
                        time.sleep(2 * args.duration)
                    docs1, chunks1 = ingest_counts(dsn)
                    took = time.monotonic() - started
                    entry["ingest_alone"] = {
                        "seconds": round(took, 1),
                        "documents_loaded": docs1 - docs0,
                        "chunks_loaded": chunks1 - chunks0,
                        "chunks_per_s": round((chunks1 - chunks0) / took, 1),
                        "cpu": sampler.summary(),
                    }
                    print(f"    ingest alone: {entry['ingest_alone']}", flush=True)
                    for clients in args.clients:
                        docs0, chunks0 = ingest_counts(dsn)
                        started = time.monotonic()
                        r = run_pgbench(
                            pgbench,
                            dsn,
                            admin,
                            script[PGRAG],
                            clients,
                            args.duration,
                            workdir,
                            watch={"ingest": proc.pid},
                        )
                        docs1, chunks1 = ingest_counts(dsn)
                        took = time.monotonic() - started
                        r["ingest"] = {
                            "documents_loaded": docs1 - docs0,
                            "chunks_loaded": chunks1 - chunks0,
                            "chunks_per_s": round((chunks1 - chunks0) / took, 1),
                        }
                        runs.setdefault(WITH_INGEST, {})[str(clients)] = r
                        show(WITH_INGEST, r)
                        print(f"      ingest during the run: {r['ingest']}", flush=True)
                entry["ingest_exit_status"] = proc.returncode  # 130: stopped by Ctrl-C
                entry["ingest_log_tail"] = log.read_text()[-600:]
            entry["runs"] = runs
            entry["ratios"] = ratios(runs)
            print(f"  ratios: {json.dumps(entry['ratios'])}", flush=True)
            result["sizes"][str(size)] = entry
            if not args.keep:
                drop_database(admin, dsn)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
