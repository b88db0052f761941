"""What a tenant's HNSW graph build costs when its graph does not fit the memory it is given, in
one run.

``pgrag.isolate_tenant`` (the end of a bulk load, ``pgrag.finish_bulk_load``) builds a tenant's
own graph with ``maintenance_work_mem`` from ``pgrag.graph_build_memory``: what the graph needs
(``pgrag.graph_memory_needed``), at most 1 GB on pgrag's own, never below the session's. Past
that limit pgvector goes on building on disk. This builds the same graph both ways over a bare
table of ``first_load.py``'s embeddings (SciFact abstracts and their noisy copies, real MiniLM
vectors), in a database with pgrag installed: with the memory pgrag gives a session that set
nothing (1 GB at this size) and with a session that gives the build what
``pgrag.graph_memory_needed`` says, the two alternating ``--rounds`` times, the index dropped
between builds. Default m and ef_construction, 2 parallel workers, as pgrag builds a tenant's
graph. Results: ``benchmarks/results/graph_memory.json``, quoted in docs/benchmarks.md.

    .venv/bin/python benchmarks/graph_memory.py [--size 1000000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import latency
from first_load import bare_vector_table

from pgrag.db import connect
from pgrag.testing import drop_database, fresh_database, server

RESULTS = Path(__file__).resolve().parent / "results" / "graph_memory.json"


def build(dsn: str, rows: int, session_memory: str | None) -> dict[str, Any]:
    """One build with ``pgrag.graph_build_memory(rows)`` as ``maintenance_work_mem``, in a
    session that set ``session_memory`` first (None: the server's); seconds, the memory, and
    where pgvector said the graph stopped fitting (None: it never did)."""
    notices: list[str] = []
    with connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        if session_memory is not None:
            conn.execute("select set_config('maintenance_work_mem', %s, false)", (session_memory,))
        got = conn.execute("select pgrag.graph_build_memory(%s)", (rows,)).fetchone()
        memory = str(got[0]) if got else ""
        conn.execute("select set_config('maintenance_work_mem', %s, false)", (memory,))
        conn.execute("set max_parallel_maintenance_workers = 2")
        t = time.perf_counter()
        conn.execute(
            "create index graph_rows_hnsw on public.graph_rows using hnsw "
            "(embedding vector_cosine_ops)"
        )
        seconds = time.perf_counter() - t
        conn.execute("drop index public.graph_rows_hnsw")
    spilled = [n for n in notices if "no longer fits" in n]
    return {
        "seconds": round(seconds, 1),
        "maintenance_work_mem": memory,
        "spilled": spilled[0] if spilled else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=1_000_000, help="rows of the graph")
    parser.add_argument("--rounds", type=int, default=1, help="builds of each kind, alternating")
    parser.add_argument("--base-docs", type=int, default=1000)
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    texts, _ = latency.load_scifact()
    texts = texts[: args.base_docs]
    vectors = latency.embed_cached("scifact-corpus", [t[: latency.EMBED_CHARS] for t in texts])
    _, s_vecs = latency.synthetic(args.size, texts, vectors, np.random.default_rng(42))
    result: dict[str, Any] = {
        "command": "python benchmarks/graph_memory.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "size": args.size,
        "dims": int(s_vecs.shape[1]),
    }
    with server(args.admin_dsn, "pgrag-graph-memory-") as admin:
        dsn = fresh_database(admin, "graph_memory")
        try:
            with connect(dsn, autocommit=True) as conn:
                bare_vector_table(conn, "graph_rows", s_vecs)
            with connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "select current_setting('maintenance_work_mem'), "
                    "pg_size_pretty(pgrag.graph_memory_needed(%s)), "
                    "(pgrag.graph_memory_needed(%s) / 1024 + 1)::text || 'kB'",
                    (args.size, args.size),
                ).fetchone()
            assert row is not None
            result["server_maintenance_work_mem"], result["needed"], needed_kb = row
            kinds = {"pgrag_default": None, "session_gives_what_is_needed": needed_kb}
            builds: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
            for r in range(args.rounds):
                for kind, session in kinds.items():
                    print(f"== round {r + 1}: {kind}", flush=True)
                    builds[kind].append(build(dsn, args.size, session))
                    print(f"   {builds[kind][-1]}", flush=True)
                    result["builds"] = builds
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(result, indent=2) + "\n")
        finally:
            drop_database(admin, dsn)
    slow = min(b["seconds"] for b in builds["pgrag_default"])
    fast = min(b["seconds"] for b in builds["session_gives_what_is_needed"])
    result["speedup"] = round(slow / fast, 2)
    result["machine"]["load_avg_at_end"] = list(os.getloadavg())
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}: {slow} s against {fast} s, {result['speedup']}x")


if __name__ == "__main__":
    main()
