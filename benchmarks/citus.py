"""Per-tenant search latency on a Citus cluster against one server, for the same tenant data.

Starts (unless given DSNs) a Citus 13.2.2 coordinator with two workers and a plain server, all
Debian PostgreSQL 15 with pgvector 0.8.6 on loopback ports (the test fixtures' helpers:
tests/plugins/pgservers.py; Citus must be built, e.g. by one run of the slow Citus test),
installs pgrag (``pgrag migrate --citus`` on the coordinator, ``pgrag migrate`` on the single
server) and ingests the first --docs SciFact abstracts (``../shared/data/scifact``) as one
tenant into both, with the real local model (embedded once: the second load reuses the
vectors). On the cluster a second tenant, on the other worker, gets the same abstracts, so
the cluster holds other data than the tenant's as a real one would. Both are analyzed after
loading.

Each query is one PostgREST-style request: a transaction in which a login role (not a
superuser) acts as the tenant (pgrag.set_request_tenant, which on the coordinator also hands the
claims to the workers, as PostgREST's db-pre-request pgrag.propagate_request_claims() does) and
switches to ``authenticated``; timed is the round trip of ``select * from public.<function>(...)``
alone, for the first --queries SciFact test claims (after --warmup untimed ones), through one
connection per function and server. Reported: p50/p95/mean per function and server, the
cluster/single ratios, and how many top-10 chunk ids agree (both loads assign the same ids).

    .venv/bin/python benchmarks/citus.py                    # 500 abstracts, 100 queries
    .venv/bin/python benchmarks/citus.py --docs 300 --queries 50
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from common import SCIFACT, latency_summary  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.ingest import ingest_documents  # noqa: E402
from pgrag.install.citus import migrate_citus  # noqa: E402
from pgrag.install.migrator import Migrator  # noqa: E402
from pgrag.pipeline.embedders import LocalEmbedder  # noqa: E402
from pgrag.pipeline.extract import ExtractedDocument  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATA = SCIFACT
RESULTS = ROOT / "benchmarks" / "results" / "citus.json"
AUTHENTICATOR = "pgrag_bench_authenticator"
TENANT_CANDIDATES = ("acme", "globex", "initech", "umbrella", "hooli", "wonka", "stark")
CALLS = {
    "hybrid_search": "select * from public.hybrid_search(%(q)s, %(e)s, 10)",
    "keyword_search": "select * from public.keyword_search(%(q)s, 10)",
    "vector_search": "select * from public.vector_search(%(e)s, 10)",
    "build_context": "select * from public.build_context(%(q)s, %(e)s, 2000, 5)",
}


class CachedEmbedder:
    """The local model, each text embedded once (the second load reuses the vectors)."""

    def __init__(self) -> None:
        self.model = LocalEmbedder()
        self.cache: dict[str, np.ndarray] = {}

    @property
    def dims(self) -> int:
        return self.model.dims

    @property
    def max_tokens(self) -> int:
        return self.model.max_tokens

    def count_tokens(self, text: str) -> int:
        return self.model.count_tokens(text)

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        return self.model.count_tokens_many(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            for text, vector in zip(missing, self.model.embed(missing), strict=True):
                self.cache[text] = vector
        return np.stack([self.cache[t] for t in texts])

    def __getattr__(self, name: str) -> Any:  # model name, provider, ... as the model's
        return getattr(self.model, name)


def scifact(docs: int, queries: int) -> tuple[list[ExtractedDocument], list[str]]:
    corpus = []
    with open(DATA / "corpus.jsonl") as f:
        for line in f:
            row = json.loads(line)
            corpus.append(
                ExtractedDocument.from_text(
                    f"scifact:{row['_id']}", row["text"], title=row.get("title", "")
                )
            )
            if len(corpus) == docs:
                break
    test_ids = {
        line.split("\t")[0] for line in (DATA / "qrels" / "test.tsv").read_text().splitlines()[1:]
    }
    texts = []
    with open(DATA / "queries.jsonl") as f:
        for line in f:
            row = json.loads(line)
            if row["_id"] in test_ids:
                texts.append(row["text"])
    return corpus, texts[:queries]


def ensure_authenticator(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute(
            "select 1 from pg_roles where rolname = %s", (AUTHENTICATOR,)
        ).fetchone():
            conn.execute(
                sql.SQL("create role {} login noinherit").format(sql.Identifier(AUTHENTICATOR))
            )
        conn.execute(
            sql.SQL("grant anon, authenticated, service_role to {}").format(
                sql.Identifier(AUTHENTICATOR)
            )
        )
        # It acts as the tenant with pgrag.set_request_tenant (the claims, and on Citus their
        # hand-over to the workers, as PostgREST's pre-request hook does), then switches role.
        conn.execute(
            sql.SQL(
                "grant usage on schema pgrag to {0}; "
                "grant execute on function pgrag.set_request_tenant(text), "
                "pgrag.propagate_request_claims() to {0}"
            ).format(sql.Identifier(AUTHENTICATOR))
        )


def worker_port(dsn: str, tenant: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select nodeport from citus_shards where table_name = 'pgrag.documents'::regclass "
            "and shardid = get_shard_id_for_distribution_column('pgrag.documents', %s::text)",
            (tenant,),
        ).fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def servers(args: argparse.Namespace) -> Iterator[tuple[str, str, str]]:
    """(coordinator DSN, single server DSN, what they are)."""
    if args.citus_dsn and args.single_dsn:
        yield args.citus_dsn, args.single_dsn, "given DSNs"
        return
    from plugins.pgservers import Steps, new_pg15_cluster, start_citus_cluster

    with ExitStack() as stack:
        steps = Steps(say=lambda line: print(f"[servers] {line}", file=sys.stderr))
        cluster = start_citus_cluster(steps)
        stack.callback(cluster.remove)
        single = new_pg15_cluster("pgrag-bench-single-")
        stack.callback(single.remove)
        single.start()
        with psycopg.connect(single.dsn(), autocommit=True) as conn:
            conn.execute("create extension vector")
        yield (
            cluster.coordinator_dsn,
            single.dsn(),
            (
                f"{cluster.version.split(' on ')[0]}, coordinator + 2 workers; single server: "
                "the same PostgreSQL 15 build"
            ),
        )


def request_timer(dsn: str, tenant: str, call: str, queries, embeddings, warmup):
    """Round-trip milliseconds of ``call`` per query, each in its own PostgREST-style request."""
    times: list[float] = []
    top: list[list[int]] = []
    with connect(make_conninfo(dsn, user=AUTHENTICATOR)) as conn:
        for i, (q, e) in enumerate(zip(queries, embeddings, strict=True)):
            with conn.transaction():
                set_request_tenant(conn, tenant)
                conn.execute("set local role authenticated")
                start = time.perf_counter()
                rows = conn.execute(call, {"q": q, "e": e}).fetchall()
                took = (time.perf_counter() - start) * 1000
            if i >= warmup:
                times.append(took)
                top.append([r[0] for r in rows])
    return times, top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=500, help="SciFact abstracts to load")
    parser.add_argument("--queries", type=int, default=100, help="SciFact test claims timed")
    parser.add_argument("--warmup", type=int, default=10, help="untimed queries first")
    parser.add_argument("--citus-dsn", help="a Citus coordinator's superuser DSN (else started)")
    parser.add_argument("--single-dsn", help="a single server's superuser DSN (else started)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    corpus, queries = scifact(args.docs, args.queries + args.warmup)
    embedder = CachedEmbedder()
    embeddings = list(embedder.model.embed(queries))
    with servers(args) as (citus, single, what):
        migrate_citus(citus)
        Migrator(single).migrate()
        ports = {t: worker_port(citus, t) for t in TENANT_CANDIDATES}
        tenant = TENANT_CANDIDATES[0]
        neighbour = next(t for t in TENANT_CANDIDATES if ports[t] != ports[tenant])
        loads: dict[str, float] = {}
        for name, dsn, tenants in (
            ("single", single, [tenant]),
            ("citus", citus, [tenant, neighbour]),
        ):
            ensure_authenticator(dsn)
            for t in tenants:
                start = time.perf_counter()
                summary = ingest_documents(dsn, corpus, tenant=t, embedder=embedder)  # type: ignore[arg-type]
                assert not summary.failures, summary.failures
                loads[f"{name}:{t}"] = round(time.perf_counter() - start, 1)
                print(
                    f"loaded {t} into {name}: {summary.chunks_written} chunks in "
                    f"{loads[f'{name}:{t}']} s",
                    file=sys.stderr,
                )
        # Fresh tables have no planner statistics yet (autovacuum analyzes them some time
        # later): analyze both (on the coordinator Citus analyzes every shard).
        for dsn in (single, citus):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "analyze pgrag.documents, pgrag.chunks, pgrag.bm25_postings, "
                    "pgrag.bm25_lexicon, pgrag.corpus_stats"
                )
        with psycopg.connect(single) as conn:
            (chunks,) = conn.execute("select count(*) from pgrag.chunks").fetchone()  # type: ignore[misc]

        functions: dict[str, Any] = {}
        for name, call in CALLS.items():
            measured = {}
            tops = {}
            for server, dsn in (("single", single), ("citus", citus)):
                times, top = request_timer(dsn, tenant, call, queries, embeddings, args.warmup)
                measured[server] = latency_summary(times)
                tops[server] = top
            same = sum(a == b for a, b in zip(tops["single"], tops["citus"], strict=True))
            functions[name] = {
                **measured,
                "ratio_p50": round(measured["citus"]["p50_ms"] / measured["single"]["p50_ms"], 2),
                "ratio_p95": round(measured["citus"]["p95_ms"] / measured["single"]["p95_ms"], 2),
                "same_results": f"{same}/{len(tops['single'])}",
            }
            print(
                f"{name:15s} single p50 {measured['single']['p50_ms']:7.2f} ms "
                f"p95 {measured['single']['p95_ms']:7.2f} | citus p50 "
                f"{measured['citus']['p50_ms']:7.2f} p95 {measured['citus']['p95_ms']:7.2f} | "
                f"ratio p50 {functions[name]['ratio_p50']:.2f}x p95 "
                f"{functions[name]['ratio_p95']:.2f}x | same rows "
                f"{functions[name]['same_results']}"
            )
    result = {
        "what": "per-tenant search latency, Citus cluster vs single server, same tenant data",
        "servers": what,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
        "corpus": f"first {args.docs} SciFact abstracts, {chunks} chunks, tenant {tenant!r}"
        f" (on the cluster also {neighbour!r} on the other worker)",
        "queries": f"{args.queries} SciFact test claims after {args.warmup} untimed",
        "request": "authenticator: pgrag.set_request_tenant (claims, on the coordinator also for "
        "the workers), set local role authenticated; round trip of the call timed",
        "load_seconds": loads,
        "functions": functions,
        "command": "python benchmarks/citus.py " + " ".join(sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
