"""Read replicas: every client-facing function runs on a hot standby and returns there exactly
what the primary returns; nothing a search does writes; the CLI reads from ``--read-dsn``.

A dedicated embedded PostgreSQL 18 primary (``replication_primary``) gets a database migrated and
loaded with ``samples/`` by the real ingester for two tenants (one document published); each test
that needs one starts a streaming hot standby of it (``hot_standby``, ``pg_basebackup -R``) and
waits for replay. Calls are made as PostgREST makes them (a LOGIN NOINHERIT role, ``SET LOCAL
ROLE``, transaction-local claims), as each tenant and as anon.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from plugins.pgservers import Standby
from plugins.tenancy import claims_for, ensure_authenticator, request
from psycopg.conninfo import conninfo_to_dict

from pgrag.cli import main
from pgrag.db import connect, wait_for_replay
from pgrag.errors import ReplicaLagging
from pgrag.ingest import IngestOptions, ingest_paths
from pgrag.install.migrator import Migrator
from pgrag.testing import create_database, drop_database, dsn_for

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SMALL_CHUNKS = IngestOptions(chunk_size=48)  # several chunks per sample, for windows
QUERIES = (
    "how are unchanged documents skipped when loading again?",
    "roll back a release",
)
# Who calls: (role, claims); anon has no tenant and sees the published document only.
CALLERS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "acme": ("authenticated", claims_for("acme")),
    "globex": ("authenticated", claims_for("globex")),
    "anon": ("anon", None),
}

# Every client-facing function, with each option that changes its plan (name, SQL, arguments).
# Arguments: q = query text, e = its embedding, ids = chunk ids the caller found.
CALLS: list[tuple[str, str, Callable[[str, Any, list[int]], tuple[Any, ...]]]] = [
    ("vector_search", "select * from public.vector_search(%s, 5)", lambda q, e, ids: (e,)),
    ("keyword_search", "select * from public.keyword_search(%s, 5)", lambda q, e, ids: (q,)),
    (
        "hybrid_search",
        "select * from public.hybrid_search(%s, %s, 5)",
        lambda q, e, ids: (q, e),
    ),
    (
        "hybrid_search",
        "select * from public.hybrid_search(%s, %s, 5, fusion => 'rrf')",
        lambda q, e, ids: (q, e),
    ),
    (
        "hybrid_search",
        "select * from public.hybrid_search(%s, %s, 5, window_size => 1)",
        lambda q, e, ids: (q, e),
    ),
    (
        "hybrid_search",
        "select * from public.hybrid_search(%s, %s, 5, mmr_lambda => 0.5)",
        lambda q, e, ids: (q, e),
    ),
    (
        "hybrid_search",
        "select * from public.hybrid_search(%s, %s, 5, fusion => 'rrf', window_size => 1,"
        " mmr_lambda => 0.5)",
        lambda q, e, ids: (q, e),
    ),
    (
        "chunk_windows",
        "select * from public.chunk_windows(%s, 1)",
        lambda q, e, ids: (ids,),
    ),
    (
        "build_context",
        "select * from public.build_context(%s, %s, min_score => -1)",
        lambda q, e, ids: (q, e),
    ),
    # The context of chunks in an order the caller chose (here hybrid_search's, reversed).
    (
        "build_context_for",
        "select * from public.build_context_for(%s, null, 400, 4, 1)",
        lambda q, e, ids: (list(reversed(ids)),),
    ),
    # What a search page adds: the snippets of the rows shown, facets, "did you mean".
    (
        "highlight",
        "select * from public.highlight(%s, %s)",
        lambda q, e, ids: (ids, q),
    ),
    (
        "search_facets",
        "select * from public.search_facets(%s, array['team'])",
        lambda q, e, ids: (q,),
    ),
    ("suggest_query", "select * from public.suggest_query(%s)", lambda q, e, ids: (q,)),
    # The embedded server has no PL/Python: re-ranking in the database is refused (PR301) on
    # both alike; the text search answers from the query-embedding
    # cache (filled on the primary for both tenants) and refuses anon with PR301.
    ("rerank", "select * from public.rerank(%s, %s, 3)", lambda q, e, ids: (q, ids)),
    (
        "hybrid_search_text",
        "select * from public.hybrid_search_text(%s, 5)",
        lambda q, e, ids: (q,),
    ),
    # The document queue as its submitter sees it (oldest_queued_seconds, read from the clock, left
    # out); acme has one document waiting.
    (
        "queue_status",
        "select queued, retrying, processing, failed, failed_last_hour, oldest_queued_at"
        " from public.queue_status()",
        lambda q, e, ids: (),
    ),
    ("document_status", "select * from public.document_status()", lambda q, e, ids: ()),
    (
        "document_status",
        "select * from public.document_status(source_uris => array[%s])",
        lambda q, e, ids: (QUEUED_URI,),
    ),
]
# Written by a client, so not in CALLS: log_search (tests/test_query_cache_clients.py),
# submit_document (tests/test_queue.py) and the answer cache, whose lookup counts hits and
# removes stale entries (tests/test_answer_cache.py); a standby refuses them all.
WRITERS = {"log_search", "submit_document", "answer_cache_lookup", "answer_cache_store"}
QUEUED_URI = "note://replica/queued"
QUEUE_READERS = {"queue_status", "document_status"}
TEXT_SEARCH = next(statement for name, statement, _ in CALLS if name == "hybrid_search_text")
RERANK = next(statement for name, statement, _ in CALLS if name == "rerank")


@pytest.fixture(scope="module")
def primary_db(replication_primary: str, local_embedder: Any) -> Iterator[str]:
    """A database on the primary: migrated, samples/ ingested for acme (Markdown and HTML) and
    globex (Markdown), acme's getting-started.md published."""
    dsn = create_database(replication_primary)
    Migrator(dsn).migrate(384)
    ensure_authenticator(replication_primary)
    for tenant, glob in (("acme", None), ("globex", "*.md")):
        summary = ingest_paths(
            dsn, [str(SAMPLES)], glob=glob, tenant=tenant, embedder=local_embedder,
            options=SMALL_CHUNKS,
        )  # fmt: skip
        assert summary.documents_failed == 0 and summary.documents_new >= 3
    with connect(dsn) as conn:
        published = conn.execute(
            "update pgrag.documents set is_public = true"
            " where tenant_id = 'acme' and source_uri like '%getting-started.md' returning id"
        ).fetchall()
        conn.commit()
    assert len(published) == 1
    with request(dsn, "authenticated", claims_for("acme")) as conn:
        conn.execute(
            "select * from public.submit_document(%s, 'A queued note.', 'text')", (QUEUED_URI,)
        )
    # The tenants' query embeddings in the cache, as a client that embedded them would leave them.
    for tenant in ("acme", "globex"):
        with request(dsn, "authenticated", claims_for(tenant)) as conn:
            for query, vector in zip(QUERIES, local_embedder.embed(list(QUERIES)), strict=True):
                conn.execute(
                    "select pgrag.query_cache_put(%s, %s, %s)",
                    (local_embedder.model_name, query, vector),
                )
    yield dsn
    drop_database(replication_primary, dsn)


def on(server_dsn: str, db: str) -> str:
    """The database ``db`` names, on the server of ``server_dsn`` (e.g. the standby)."""
    return dsn_for(server_dsn, str(conninfo_to_dict(db)["dbname"]))


def replica_of(primary_db: str, hot_standby: Callable[[str], Standby], primary: str) -> str:
    standby = hot_standby(primary)
    standby.wait_for_replay(timeout=60)
    return on(standby.dsn, primary_db)


def call_as(db: str, caller: str, statement: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The rows of one call, or [("error", SQLSTATE)] when it is refused (compared alike)."""
    role, claims = CALLERS[caller]
    try:
        with request(db, role, claims) as conn:
            return conn.execute(statement, args).fetchall()
    except psycopg.Error as exc:
        return [("error", exc.sqlstate)]


def every_call(db: str, embedder: Any) -> dict[tuple[str, str, str], list[tuple[Any, ...]]]:
    """Each caller's result of each call for each query, on ``db``."""
    out: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    embeddings = embedder.embed(list(QUERIES))
    for caller in CALLERS:
        for q, e in zip(QUERIES, embeddings, strict=True):
            found = call_as(
                db, caller, "select chunk_id from public.hybrid_search(%s, %s, 5)", (q, e)
            )
            ids = [r[0] for r in found]
            for _, statement, args in CALLS:
                out[(caller, q, statement)] = call_as(db, caller, statement, args(q, e, ids))
    return out


def test_every_client_function_returns_on_the_standby_what_the_primary_returns(
    primary_db: str,
    replication_primary: str,
    hot_standby: Callable[[str], Standby],
    local_embedder: Any,
) -> None:
    replica = replica_of(primary_db, hot_standby, replication_primary)
    with connect(replica) as conn:
        assert conn.execute("select pg_is_in_recovery()").fetchone() == (True,)
    on_primary = every_call(primary_db, local_embedder)
    on_standby = every_call(replica, local_embedder)
    assert on_standby.keys() == on_primary.keys()
    for key, rows in on_primary.items():
        assert on_standby[key] == rows, key
    # Not vacuous: each tenant finds its own rows, anon only the published document's.
    for caller in ("acme", "globex"):
        found = on_primary[(caller, QUERIES[0], CALLS[2][1])]
        assert found and {r[-1] for r in found} == {caller}
    anon = on_primary[("anon", QUERIES[0], CALLS[0][1])]
    assert anon and all("getting-started" in r[4] for r in anon)
    # Refused alike on both: anon's text search (no tenant, so no cache, and no PL/Python),
    # anon's queue calls (executable by authenticated only) and every re-ranking (no PL/Python);
    # nothing else.
    refused = {
        key: rows[0][1] for key, rows in on_primary.items() if rows and rows[0][0] == "error"
    }
    queue_calls = {statement for name, statement, _ in CALLS if name in QUEUE_READERS}
    assert refused == {
        **{("anon", q, TEXT_SEARCH): "PR301" for q in QUERIES},
        **{("anon", q, statement): "42501" for q in QUERIES for statement in queue_calls},
        **{(caller, q, RERANK): "PR301" for caller in CALLERS for q in QUERIES},
    }
    # acme's queued document shows in its queue and its status; globex's queue is empty.
    queue = next(statement for name, statement, _ in CALLS if name == "queue_status")
    assert on_primary[("acme", QUERIES[0], queue)][0][0] == 1
    assert on_primary[("globex", QUERIES[0], queue)][0][0] == 0
    # The text search answers from the cached embedding exactly as hybrid_search does.
    for caller in ("acme", "globex"):
        assert (
            on_primary[(caller, QUERIES[0], TEXT_SEARCH)]
            == on_primary[(caller, QUERIES[0], CALLS[2][1])]
        )


def test_the_replica_check_calls_every_function_the_api_roles_may_execute(primary_db: str) -> None:
    with connect(primary_db) as conn:
        executable = {
            r[0]
            for r in conn.execute(
                """
                select p.proname from pg_proc p
                where p.pronamespace = 'public'::regnamespace
                  and (has_function_privilege('anon', p.oid, 'execute')
                       or has_function_privilege('authenticated', p.oid, 'execute'))
                  and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass
                                  and d.objid = p.oid and d.deptype = 'e')
                """
            )
        }
    assert executable == {name for name, _, _ in CALLS} | WRITERS


def test_client_functions_run_in_a_read_only_transaction_on_the_primary(
    primary_db: str, local_embedder: Any
) -> None:
    # What PostgREST does for a POST to a STABLE function; a write anywhere in a call fails.
    (embedding,) = local_embedder.embed([QUERIES[0]])
    for caller, (role, claims) in CALLERS.items():
        with request(primary_db, role, claims) as conn:
            conn.execute("set transaction read only")
            for name, statement, args in CALLS:
                try:
                    with conn.transaction():  # a savepoint: anon's refused text search
                        rows = conn.execute(statement, args(QUERIES[0], embedding, [1, 2]))
                        assert rows.fetchall() is not None, (caller, name)
                except psycopg.errors.ReadOnlySqlTransaction:
                    raise
                except psycopg.Error as exc:
                    assert caller == "anon" or name == "rerank", (caller, name, exc.sqlstate)
                    assert (name, exc.sqlstate) in {
                        ("hybrid_search_text", "PR301"),
                        ("rerank", "PR301"),
                    } | {(reader, "42501") for reader in QUEUE_READERS}


# -- what a reader on the standby sees while the primary writes ---------------------------------

VERSIONS = {
    "alpha": [f"Zeppelin alpha part {i}: the airship manual, first edition." for i in range(6)],
    "beta": [f"Zeppelin beta part {i}: the airship manual, second edition." for i in range(3)],
}


def write_version(path: Path, version: str) -> None:
    path.write_text("\n\n".join(VERSIONS[version]) + "\n")


SWAP_QUERY = "select content from public.keyword_search('zeppelin airship', 50)"


def document_as_found(db: str) -> tuple[str, ...]:
    """What a search as acme returns of the manual: its chunks' text, sorted."""
    role, claims = CALLERS["acme"]
    with request(db, role, claims) as conn:
        return tuple(sorted(r[0] for r in conn.execute(SWAP_QUERY)))


def observe(replica: str, stop: threading.Event, seen: list[tuple[str, ...]]) -> None:
    """Search the standby as acme without pause, recording each result."""
    while not stop.is_set():
        seen.append(document_as_found(replica))


def test_a_document_swap_replays_atomically_on_the_standby(
    primary_db: str,
    replication_primary: str,
    hot_standby: Callable[[str], Standby],
    local_embedder: Any,
    tmp_path: Path,
) -> None:
    manual = tmp_path / "manual.md"
    options = IngestOptions(chunk_size=24)  # a few chunks per version
    whole: dict[str, tuple[str, ...]] = {}  # each version as the primary returns it
    for version in ("alpha", "beta"):
        write_version(manual, version)
        ingest_paths(
            primary_db, [str(manual)], tenant="acme", embedder=local_embedder, options=options
        )
        whole[version] = document_as_found(primary_db)
    assert len(whole["alpha"]) >= 2 and len(whole["beta"]) >= 2
    assert not set(whole["alpha"]) & set(whole["beta"])
    replica = replica_of(primary_db, hot_standby, replication_primary)
    seen: list[tuple[str, ...]] = []
    stop = threading.Event()
    reader = threading.Thread(target=observe, args=(replica, stop, seen))
    reader.start()
    try:
        for version in ("alpha", "beta", "alpha", "beta", "alpha", "beta"):
            write_version(manual, version)
            summary = ingest_paths(
                primary_db, [str(manual)], tenant="acme", embedder=local_embedder,
                options=options,
            )  # fmt: skip
            assert summary.documents_changed == 1
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while (not seen or seen[-1] != whole["beta"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join()
    partial = [s for s in seen if s not in whole.values()]
    assert not partial, partial[:3]
    assert set(seen) == set(whole.values())  # both versions seen, each only whole
    assert seen[-1] == whole["beta"]


# -- the CLI: --read-dsn / PGRAG_READ_DSN ----------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env=env)


def test_search_and_ask_read_from_the_read_dsn(
    primary_db: str,
    replication_primary: str,
    hot_standby: Callable[[str], Standby],
    tmp_path: Path,
    local_embedder: Any,
) -> None:
    replica = replica_of(primary_db, hot_standby, replication_primary)
    query = ["search", QUERIES[0], "--tenant", "acme", "--json"]
    from_primary = cli("--dsn", primary_db, *query)
    from_replica = cli("--dsn", primary_db, "--read-dsn", replica, *query)
    assert from_primary.exit_code == 0 and from_replica.exit_code == 0, from_replica.output
    assert json.loads(from_replica.output) == json.loads(from_primary.output) != []
    ask = ["ask", QUERIES[1], "--tenant", "acme", "--context-only", "--json"]
    asked = cli("--dsn", primary_db, *ask, env={"PGRAG_READ_DSN": replica})
    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.output) == json.loads(cli("--dsn", primary_db, *ask).output)

    # Proof that the reads go to the replica: with its replay paused, a new document on the
    # primary is found through --dsn and not through --read-dsn.
    with psycopg.connect(replica, autocommit=True) as conn:
        conn.execute("select pg_wal_replay_pause()")
    try:
        note = tmp_path / "note.md"
        note.write_text("The quokka inventory is counted every Tuesday.\n")
        ingest_paths(primary_db, [str(note)], tenant="acme", embedder=local_embedder)
        quokka = ["search", "quokka inventory", "--tenant", "acme", "--mode", "keyword", "--json"]
        assert json.loads(cli("--dsn", primary_db, *quokka).output)
        lagging = cli("--dsn", primary_db, "--read-dsn", replica, *quokka)
        assert lagging.exit_code == 0 and json.loads(lagging.output) == []
    finally:
        with psycopg.connect(replica, autocommit=True) as conn:
            conn.execute("select pg_wal_replay_resume()")


def test_eval_ingests_through_the_dsn_and_searches_the_read_dsn(
    primary_db: str,
    replication_primary: str,
    hot_standby: Callable[[str], Standby],
    tmp_path: Path,
) -> None:
    replica = replica_of(primary_db, hot_standby, replication_primary)
    data = tmp_path / "tiny"
    (data / "qrels").mkdir(parents=True)
    docs = {
        "d1": "Zebras have black and white stripes that confuse biting flies.",
        "d2": "Penguins cannot fly but swim fast in cold water.",
        "d3": "Owls hunt at night with silent feathers.",
    }
    (data / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
    )
    (data / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "why do zebras have stripes"}) + "\n"
        + json.dumps({"_id": "q2", "text": "which bird hunts at night"}) + "\n"
    )  # fmt: skip
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    # The standby refuses writes: the ingest can only have gone to --dsn.
    result = cli("--dsn", primary_db, "--read-dsn", replica, "eval", str(data), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["hybrid"]["ndcg@10"] == 1.0


def test_waiting_for_replay_is_a_no_op_when_the_read_server_is_not_a_standby(
    primary_db: str,
) -> None:
    with connect(primary_db, autocommit=True) as writer, connect(primary_db) as reader:
        assert wait_for_replay(writer, reader, timeout=0.1) is None


def test_a_replica_that_does_not_replay_is_a_one_line_error_after_the_timeout(
    primary_db: str,
    replication_primary: str,
    hot_standby: Callable[[str], Standby],
) -> None:
    replica = replica_of(primary_db, hot_standby, replication_primary)
    with psycopg.connect(replica, autocommit=True) as conn:
        conn.execute("select pg_wal_replay_pause()")
    with connect(primary_db, autocommit=True) as writer, connect(replica) as reader:
        writer.execute("create table replay_probe (id int)")  # WAL the standby will not replay
        with pytest.raises(ReplicaLagging, match=r"replayed WAL up to .* after 1 s, short of"):
            wait_for_replay(writer, reader, timeout=1)
    with psycopg.connect(replica, autocommit=True) as conn:
        conn.execute("select pg_wal_replay_resume()")
    with connect(primary_db, autocommit=True) as writer, connect(replica) as reader:
        assert wait_for_replay(writer, reader, timeout=30) is not None
        writer.execute("drop table replay_probe")


@pytest.mark.parametrize("how", ["option", "env"])
def test_an_unreachable_read_dsn_is_a_one_line_error_naming_it(how: str) -> None:
    dead = "postgresql://nobody@127.0.0.1:1/pgrag"
    args = ["--dsn", "postgresql://nobody@127.0.0.1:2/unused"]
    env = {"PGRAG_READ_DSN": dead} if how == "env" else None
    extra = ["--read-dsn", dead] if how == "option" else []
    result = cli(*args, *extra, "search", "anything", "--mode", "keyword", env=env)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(
        "Error: cannot connect to the database postgresql://nobody@127.0.0.1:1"
    )
    assert "--read-dsn / PGRAG_READ_DSN" in lines[0]
