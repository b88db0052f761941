"""Cold-process latency of ``pgrag search``, per local-model backend, every figure from ONE run.

A user's ``pgrag search "question"`` starts a new Python process, imports pgrag, loads the
embedding model, embeds the query and runs ``hybrid_search``. This benchmark times exactly
that, as a subprocess, on the sample corpus (``samples/``) in a database of the embedded cluster:

  * ``first``: the very first ONNX search, with the cached graph deleted (it is rebuilt);
  * ``cold``: ``--runs`` searches per backend, each a new process, the backends interleaved
    (``onnx``, the default, vs ``sentence-transformers``, the old path, chosen with
    ``PGRAG_LOCAL_BACKEND``), plus ``--mode keyword`` (no model at all) as the floor;
  * ``repeated``: ``--runs`` different queries in ONE process after the model is loaded (the
    library path: ``pgrag.search.search``), per backend;
  * ``query cache``: ``--runs`` pairs of cold processes searching the same query, the cache
    emptied before the first: the first embeds (and caches) the query, the repeated one reads
    it from the query-embedding cache and never loads the model.

    PGRAG_HOME=/tmp/pgrag-cli-bench .venv/bin/python benchmarks/cli.py

Writes benchmarks/results/cli.json. Goal: hybrid search from a cold process
p50 <= 1.5 s on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import admin_url

from pgrag.testing import drop_database, fresh_database

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "cli.json"
PGRAG = [sys.executable, "-c", "from pgrag.cli import main; main()"]
BACKENDS = ("onnx", "sentence-transformers")
GOAL_P50_S = 1.5
QUERIES = [
    "what happens when an ingest is killed?",
    "how does hybrid search combine BM25 and vectors?",
    "which roles can call the search functions?",
    "how are chunks cut from a PDF?",
    "where does the embedded database keep its data?",
    "how do I install the SQL without Python?",
    "what does the context builder return?",
    "how are tenants kept apart?",
    "what is reciprocal rank fusion?",
    "how are unchanged documents skipped?",
]


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one ``pgrag`` process, start to exit.

    CPU time is what the process itself costs; on a shared machine the wall clock also counts
    the time spent waiting for a core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([*PGRAG, *args], env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def summary(seconds: list[float], cpu: list[float] | None = None) -> dict[str, float]:
    ordered = sorted(seconds)
    out = {
        "p50_s": round(statistics.median(ordered), 3),
        "min_s": round(ordered[0], 3),
        "max_s": round(ordered[-1], 3),
        "runs": len(ordered),
    }
    if cpu:
        out["cpu_p50_s"] = round(statistics.median(cpu), 3)
    return out


def repeated(dsn: str, backend: str, queries: list[str]) -> dict[str, float]:
    """Per-query seconds of ``search`` in one process, the model loaded once beforehand."""
    from pgrag.db import DEFAULT_TENANT, connect
    from pgrag.pipeline.embedders import LocalEmbedder
    from pgrag.search import SearchOptions, search

    embedder = LocalEmbedder(backend=backend)
    started = time.perf_counter()
    embedder.embed(["load the model"])
    load_s = time.perf_counter() - started
    seconds = []
    with connect(dsn) as conn:
        for q in queries:
            t0 = time.perf_counter()
            search(conn, q, SearchOptions(limit=5), tenant=DEFAULT_TENANT, embedder=embedder)
            seconds.append(time.perf_counter() - t0)
            conn.rollback()
    return {"model_load_s": round(load_s, 3), **summary(seconds)}


def clear_query_cache(dsn: str) -> None:
    """Empty the query-embedding cache (every tenant, every model)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("delete from pgrag.query_embeddings")


def query_cache_runs(dsn: str, env: dict[str, str], runs: int) -> dict[str, Any]:
    """Cold ``pgrag search`` of a query the cache does not hold, then of the same query again
    (default backend), ``runs`` pairs; the cache is emptied before each pair."""
    import psycopg

    first: list[tuple[float, float]] = []
    repeated: list[tuple[float, float]] = []
    for i in range(runs):
        q = QUERIES[i % len(QUERIES)]
        clear_query_cache(dsn)
        first.append(run_cli(["search", q, "-k", "5"], env))
        repeated.append(run_cli(["search", q, "-k", "5"], env))
        print(
            f"cache pair {i + 1}: first {first[-1][0]:.2f} s, repeated {repeated[-1][0]:.2f} s",
            flush=True,
        )
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select coalesce(sum(cache_hits), 0) from pgrag.token_usage where operation = 'query'"
        ).fetchone()
    return {
        "first": summary([w for w, _ in first], [c for _, c in first]),
        "repeated": summary([w for w, _ in repeated], [c for _, c in repeated]),
        "cache_hits": int(row[0]) if row else 0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--dsn", default=os.environ.get("PGRAG_DSN"), help="admin DSN (default: embedded)"
    )
    p.add_argument("--runs", type=int, default=10, help="cold processes per backend")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)

    admin = admin_url(args.dsn)
    name = "pgrag_bench_cli"
    dsn = fresh_database(admin, name)
    env = {**os.environ, "PGRAG_DSN": dsn}
    env.pop("PGRAG_LOCAL_BACKEND", None)
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_sample_pdf.py")], check=True)
    subprocess.run([*PGRAG, "ingest", str(ROOT / "samples")], env=env, check=True)

    from pgrag.pipeline.embedders import model_cache_dir

    for cached in model_cache_dir().glob("all-minilm-l6-v2.*"):
        cached.unlink()
    first, first_cpu = run_cli(["search", QUERIES[0], "-k", "5"], env)
    print(f"first onnx search (graph rebuilt): {first:.2f} s (cpu {first_cpu:.2f} s)")

    kinds = (*BACKENDS, "keyword")
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(args.runs):
        q = QUERIES[i % len(QUERIES)]
        for kind in kinds:
            if kind == "keyword":
                w, c = run_cli(["search", q, "-k", "5", "--mode", "keyword"], env)
            else:  # the model embeds the query: not one the cache holds
                clear_query_cache(dsn)
                w, c = run_cli(["search", q, "-k", "5"], {**env, "PGRAG_LOCAL_BACKEND": kind})
            wall[kind].append(w)
            cpu[kind].append(c)
        print(
            f"run {i + 1}: "
            + ", ".join(f"{k} {wall[k][-1]:.2f} s (cpu {cpu[k][-1]:.2f})" for k in kinds),
            flush=True,
        )
    cold_summary = {k: summary(wall[k], cpu[k]) for k in kinds}
    ratio = cold_summary["sentence-transformers"]["p50_s"] / cold_summary["onnx"]["p50_s"]
    cpu_ratio = (
        cold_summary["sentence-transformers"]["cpu_p50_s"] / cold_summary["onnx"]["cpu_p50_s"]
    )
    for k, v in cold_summary.items():
        print(
            f"cold {k:<22} p50 {v['p50_s']:.2f} s  (min {v['min_s']:.2f}, max {v['max_s']:.2f}),"
            f" cpu p50 {v['cpu_p50_s']:.2f} s"
        )
    print(
        f"cold hybrid search, sentence-transformers / onnx: {ratio:.1f}x wall, {cpu_ratio:.1f}x cpu"
    )

    rep = {b: repeated(dsn, b, QUERIES * 2) for b in BACKENDS}
    for b, v in rep.items():
        print(
            f"repeated {b:<22} p50 {v['p50_s'] * 1000:.1f} ms"
            f" after a {v['model_load_s']:.2f} s load"
        )
    cache = query_cache_runs(dsn, env, args.runs)
    cache_ratio = cache["first"]["p50_s"] / cache["repeated"]["p50_s"]
    cache_cpu_ratio = cache["first"]["cpu_p50_s"] / cache["repeated"]["cpu_p50_s"]
    for k in ("first", "repeated"):
        v = cache[k]
        print(
            f"query cache {k:<9} p50 {v['p50_s']:.2f} s  (min {v['min_s']:.2f}, "
            f"max {v['max_s']:.2f}), cpu p50 {v['cpu_p50_s']:.2f} s"
        )
    print(
        f"cold search, first / repeated query: {cache_ratio:.1f}x wall, {cache_cpu_ratio:.1f}x cpu"
        f" ({cache['cache_hits']} cache hits recorded)"
    )
    drop_database(admin, dsn)

    result = {
        "benchmark": "cli",
        "command": "PGRAG_HOME=/tmp/pgrag-cli-bench .venv/bin/python benchmarks/cli.py"
        + (f" --runs {args.runs}" if args.runs != 10 else ""),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "corpus": "samples/ (Markdown, HTML, the generated 3-page PDF)",
        "first_onnx_search_graph_rebuilt_s": round(first, 3),
        "cold_process_search": cold_summary,
        "cold_ratio_sentence_transformers_over_onnx": round(ratio, 2),
        "cold_cpu_ratio_sentence_transformers_over_onnx": round(cpu_ratio, 2),
        "repeated_queries_one_process": rep,
        "query_cache_cold_process": cache,
        "query_cache_ratio_first_over_repeated": round(cache_ratio, 2),
        "query_cache_cpu_ratio_first_over_repeated": round(cache_cpu_ratio, 2),
        "goal_cold_hybrid_p50_s": GOAL_P50_S,
        "goal_met": cold_summary["onnx"]["p50_s"] <= GOAL_P50_S,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
