"""A tenant's first import beside other tenants, against the same import into an empty database.

The same ``--size`` rows (the Supabase guide's ``documents`` table of
``benchmarks/import_shapes.py``: 60 random words, random unit 384-dimension vectors,
``--per-doc`` rows per source document) are imported into a new tenant of a fresh database and
of a database already holding ``--tenants`` other tenants of as many rows, in turns (fresh,
busy, fresh, ...) for ``--rounds`` rounds: through the bulk path (a first import) and the
row-by-row path (``--other-size``: the other tenants' rows each, when not as many). The
tenant is new to the busy database's statistics, as any new tenant of a shared table is until
the next ANALYZE: a plan that takes it for one row must not make its load quadratic. Writes
``benchmarks/results/import_beside_tenants.json``.

    python benchmarks/import_beside_tenants.py [--size 5000] [--tenants 20] [--rounds 2]
        [--other-size N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_shapes import make_sources, run_import

from pgrag.importer.sources import open_table
from pgrag.install.migrator import Migrator
from pgrag.testing import create_database, drop_database, server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "import_beside_tenants.json"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=5000, help="rows of each import")
    parser.add_argument("--per-doc", type=int, default=10, help="rows sharing a source")
    parser.add_argument("--tenants", type=int, default=20, help="other tenants already loaded")
    parser.add_argument(
        "--other-size", type=int, help="rows of each other tenant (default: --size)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="imports of each kind")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "command": "python benchmarks/import_beside_tenants.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "git_head": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
        "size": args.size,
        "per_doc": args.per_doc,
        "tenants": args.tenants,
        "other_size": args.other_size or args.size,
        "runs": [],
    }
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(server(args.admin_dsn, "pgrag-beside-"))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        databases = {}
        for kind in ("fresh", "busy"):
            dsn = create_database(admin)
            stack.callback(drop_database, admin, dsn)
            Migrator(dsn).migrate(384)
            databases[kind] = dsn
        source = databases["fresh"]  # both read the same rows from the fresh database
        make_sources(source, tmp, args.size, args.per_doc)
        others = source
        if result["other_size"] != args.size:
            others = create_database(admin)
            stack.callback(drop_database, admin, others)
            Migrator(others).migrate(384)  # (pgvector, for the source tables)
            (tmp / "others").mkdir()
            make_sources(others, tmp / "others", result["other_size"], args.per_doc)
        started = time.perf_counter()
        for i in range(args.tenants):
            run_import(
                databases["busy"],
                open_table(others, "documents", own_database=False),
                f"other-{i}",
                True,
            )
        result["others_loaded_s"] = round(time.perf_counter() - started, 1)
        # Statistics that know the other tenants (and so, with fewer tenants than they keep
        # most common values, all of them), as autovacuum's ANALYZE soon has them.
        with psycopg.connect(databases["busy"], autocommit=True) as conn:
            conn.execute("analyze pgrag.documents, pgrag.chunks, pgrag.bm25_backlog")
        print(f"{args.tenants} other tenants loaded in {result['others_loaded_s']} s", flush=True)
        for r in range(args.rounds):
            for kind, dsn in databases.items():
                for bulk in (True, False):
                    tenant = f"new-{r}-{'bulk' if bulk else 'rows'}"
                    started = time.perf_counter()
                    s = run_import(
                        dsn,
                        open_table(source, "documents", own_database=dsn == source),
                        tenant,
                        bulk,
                    )
                    run = {
                        "round": r,
                        "database": kind,
                        "path": "bulk" if s.bulk_load else "row by row",
                        "chunks": s.chunks_imported,
                        "seconds": round(time.perf_counter() - started, 2),
                    }
                    result["runs"].append(run)
                    print(run, flush=True)
    result["machine"]["load_avg_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
