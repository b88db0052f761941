"""The rows one swap reads for a tenant new to the statistics, beside tenants they list in full.

``--tenants`` tenants of ``--documents`` documents of ten chunks are written and analyzed (fewer
tenants than the statistics keep most common values: they list every one); a new tenant then
loads batches of ``--batch`` documents of ten chunks through ``pgrag.replace_document_chunks``,
and its third batch is swapped in a new session with auto_explain counting, for each statement,
the rows its scans of ``pgrag.documents`` and ``pgrag.chunks`` read (returned or discarded by a
filter). A count, not a time: the same on a busy machine. Writes
``benchmarks/results/swap_reads.json``.

    python benchmarks/swap_reads.py [--tenants 20] [--documents 300] [--batch 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from plugins.plans import ANALYZED, run_with_plans  # the plan tests' auto_explain reader
from test_load_plans import MODEL, SWAP, load, stage_documents  # their loader of batches

from pgrag.db import connect
from pgrag.install.migrator import Migrator
from pgrag.testing import create_database, drop_database, server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "swap_reads.json"


def statement_kind(query: str) -> str:
    """The statement a plan is of, by what the swap runs."""
    if "FOR KEY SHARE" in query:
        return "foreign key check (per chunk)"
    if "new.is_public" in query:
        return "publishing trigger (per chunk)"
    return " ".join(query.split())[:60]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--documents", type=int, default=300, help="documents of each tenant")
    parser.add_argument("--batch", type=int, default=200, help="documents of a batch")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(server(args.admin_dsn, "pgrag-swap-reads-"))
        dsn = create_database(admin)
        stack.callback(drop_database, admin, dsn)
        Migrator(dsn).migrate(384)
        with connect(dsn) as conn:
            conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
                " select 't' || t, 'T', 'text', 'u' || g, 'ready'"
                " from generate_series(1, %s) as t, generate_series(1, %s) as g",
                (args.tenants, args.documents),
            )
            conn.execute(
                "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
                " content_sha256) select d.tenant_id, d.id, i, 'inverter cooling',"
                " md5(d.id || '/' || i) from pgrag.documents as d, generate_series(0, 9) as i"
            )
            conn.execute("analyze pgrag.documents, pgrag.chunks")
            conn.commit()
            load(conn, "newco", args.batch, 10, "newco-first")
            load(conn, "newco", args.batch, 10, "newco-second")
        with connect(dsn) as conn:  # a session whose plans are made now
            _, swap = stage_documents(conn, "newco", args.batch, 10, "newco-third")
            _, plans = run_with_plans(
                conn, SWAP, (*swap, MODEL), settings={**ANALYZED, "enable_seqscan": "on"}
            )
    reads: dict[str, dict[str, int]] = {}
    for p in plans:
        kind = reads.setdefault(statement_kind(p.query), {"documents": 0, "chunks": 0})
        for table in kind:
            kind[table] += p.rows_read(table)
    result = {
        "command": "python benchmarks/swap_reads.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "git_head": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
        # sql/ differing from git_head's (a run on earlier SQL, checked out for it)
        "sql_changed_from_head": subprocess.run(
            ["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "sql"], check=False
        ).returncode
        != 0,
        "tenants": args.tenants,
        "documents": args.documents,
        "batch_documents": args.batch,
        "batch_chunks": args.batch * 10,
        "new_tenant_documents": 3 * args.batch,
        "rows_read": {k: v for k, v in reads.items() if v["documents"] or v["chunks"]},
    }
    result["documents_read"] = sum(v["documents"] for v in reads.values())
    result["chunks_read"] = sum(v["chunks"] for v in reads.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["rows_read"], indent=1))
    print(f"documents read {result['documents_read']:,}, chunks read {result['chunks_read']:,}")


if __name__ == "__main__":
    main()
