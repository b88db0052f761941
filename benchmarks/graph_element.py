"""What one element of an HNSW graph build takes in ``maintenance_work_mem``, by dimension,
``m`` and the build's workers: the measure ``pgrag.graph_memory_needed`` is made from.

pgvector builds the graph in memory until it has used ``maintenance_work_mem``, then says
"hnsw graph no longer fits into maintenance_work_mem after N tuples" and goes on on disk. Each
case here builds an index over a bare table of random vectors with a small setting
(``--memory-mb``) and a table large enough to pass it, and reads N from that notice: the setting
over N is what an element takes (its vector or, above 2,000 dimensions, its halfvec copy, as
pgrag keys such graphs, and its neighbour lists). Then the same build on one process with
settings that are not whole megabytes (``PART_MB_SETTINGS``): what such a build holds. Results:
``benchmarks/results/graph_element.json``, quoted in docs/benchmarks.md.

    .venv/bin/python benchmarks/graph_element.py [--memory-mb 16]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pgrag.db import connect
from pgrag.testing import create_database, drop_database, server

RESULTS = Path(__file__).resolve().parent / "results" / "graph_element.json"
# (dimensions, m): pgrag's dimensions (384 local, 768, 1536 OpenAI, 3072 as halfvec) at
# pgvector's default m = 16, and m = 8 and 32 at 384
CASES = ((384, 16), (768, 16), (1536, 16), (3072, 16), (384, 8), (384, 32))
# settings in kB: a whole 4 MB, most of a fifth MB, a whole 5 MB (384 dimensions, one process)
PART_MB_SETTINGS = (4096, 4950, 5120)
FITS = re.compile(r"after (\d+) tuples")


def key_bytes(dims: int) -> int:
    """Bytes of the key pgrag's graphs hold per row: a vector, or a halfvec above 2,000."""
    return dims * 4 if dims <= 2000 else dims * 2


def element_bytes(dsn: str, dims: int, m: int, workers: int, memory_kb: int) -> dict[str, Any]:
    """One build; bytes per element from where pgvector said the graph stopped fitting."""
    # rows enough to pass the setting (an element takes more than its key), a third more
    rows = memory_kb * 1024 * 4 // 3 // key_bytes(dims)
    key = "v vector_cosine_ops" if dims <= 2000 else f"(v::halfvec({dims})) halfvec_cosine_ops"
    notices: list[str] = []
    with connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("drop table if exists public.elements")
        conn.execute(
            "create table public.elements as select i, "
            f"(select array_agg(random())::vector({dims}) from generate_series(1, {dims}) "
            f"where i >= 0) as v from generate_series(1, {rows}) as i"
        )
        conn.execute("vacuum analyze public.elements")
        conn.execute(f"set maintenance_work_mem = '{memory_kb}kB'")
        conn.execute(f"set max_parallel_maintenance_workers = {workers}")
        conn.execute(
            f"create index elements_hnsw on public.elements using hnsw ({key}) with (m = {m})"
        )
        conn.execute("drop table public.elements")
    fitted = next((int(f.group(1)) for f in map(FITS.search, notices) if f), None)
    return {
        "dims": dims,
        "m": m,
        "workers": workers,
        "rows": rows,
        "memory_kb": memory_kb,
        "fitted_rows": fitted,
        "bytes_per_element": round(memory_kb * 1024 / fitted) if fitted else None,
        "key_bytes": key_bytes(dims),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--memory-mb", type=int, default=16, help="maintenance_work_mem of each build"
    )
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "command": "python benchmarks/graph_element.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "memory_mb": args.memory_mb,
        "cases": [],
        "part_mb_settings": [],
    }
    with server(args.admin_dsn, "pgrag-graph-element-") as admin:
        dsn = create_database(admin)
        try:
            with connect(dsn, autocommit=True) as conn:
                conn.execute("create extension vector")
                row = conn.execute(
                    "select extversion from pg_extension where extname = 'vector'"
                ).fetchone()
                result["pgvector"] = row[0] if row else None
            for dims, m in CASES:
                for workers in (0, 2):
                    case = element_bytes(dsn, dims, m, workers, args.memory_mb * 1024)
                    print(case, flush=True)
                    result["cases"].append(case)
            for memory_kb in PART_MB_SETTINGS:
                case = element_bytes(dsn, 384, 16, 0, memory_kb)
                print(case, flush=True)
                result["part_mb_settings"].append(case)
        finally:
            drop_database(admin, dsn)
    result["machine"]["load_avg_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
