"""Peak memory of ``pgrag import FILE`` on a large JSONL file whose documents' rows are scattered.

Writes a JSONL file of about ``--mb`` megabytes (rows of ~600 characters with random unit
384-dimension embeddings, ``--per-doc`` rows per source, shuffled so that no document's rows are
together: the case that needs ordering), then runs ``pgrag import FILE`` in a child process and
reads its peak resident memory (``ru_maxrss`` of ``wait4``):

* ``before``: the code at ``--before`` (a git revision of this repository, extracted with
  ``git archive``; the reader then read the whole file and sorted it in memory), ``--dry-run``
  (reads, maps and checks every row; writes nothing);
* ``after``: this checkout, ``--dry-run``, then a real import into a fresh tenant;
* ``baseline``: this checkout, ``--dry-run`` of a 1 MB file of the same rows (the process with
  its libraries and the model's tokenizer, and next to no rows).

* with ``--larger-mb``: ``before`` and ``after`` ``--dry-run`` again on a larger file.

    python benchmarks/import_memory.py --mb 200 --larger-mb 600 --before e727e46~1
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from pgrag.importer.sources import RUN_BYTES
from pgrag.install.migrator import Migrator
from pgrag.pipeline.embedders import LOCAL_MODEL_NAME
from pgrag.testing import create_database, drop_database, server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "import_memory.json"
WORDS = ["the", "manual", "shows", "how", "each", "part", "is", "set", "up", "and", "kept"]


def write_file(path: Path, megabytes: int, per_doc: int) -> int:
    """A shuffled JSONL file of about ``megabytes``; its number of rows."""
    rng = np.random.default_rng(7)
    sample = [-0.012345678901234567] * 384
    probe = json.dumps({"content": "x" * 600, "embedding": sample, "source_uri": "kb/d.md"})
    count = megabytes * 2**20 // (len(probe) + 40)
    rows = [(i // per_doc, i % per_doc) for i in range(count)]
    order = rng.permutation(count)
    with path.open("w") as handle:
        for i in order:
            doc, part = rows[i]
            vector = rng.standard_normal(384)
            vector /= np.linalg.norm(vector)
            record = {
                "id": f"d{doc}-{part}",
                "content": " ".join(rng.choice(WORDS, 100)) + f" part {part} of {doc}",
                "embedding": [float(x) for x in vector],
                "metadata": {"start_index": part * 1000, "team": "docs"},
                "source_uri": f"kb/doc-{doc:06d}.md",
            }
            handle.write(json.dumps(record) + "\n")
    return count


def run_import(code: Path, dsn: str, path: Path, *args: str) -> dict[str, Any]:
    """``pgrag import`` of ``code``'s package in a child: its peak RSS, seconds, summary."""
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-c",
        "from pgrag.cli import main; main()",
        "--dsn",
        dsn,
        "import",
        str(path),
        "--model",
        LOCAL_MODEL_NAME,
        "--json",
        "--no-progress",
        *args,
    ]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        # run outside this checkout, so that ``code``'s package is the one imported
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.PIPE, cwd=path.parent
        )
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        out.seek(0)
        text = out.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"import failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    summary = json.loads(text)
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "seconds": round(seconds, 1),
        "rows_read": summary["rows_read"],
        "documents": summary["documents_new"],
        "chunks_imported": summary["chunks_imported"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=200, help="size of the JSONL file")
    parser.add_argument("--larger-mb", type=int, default=0, help="and a larger file (dry runs)")
    parser.add_argument("--per-doc", type=int, default=10, help="rows sharing a source")
    parser.add_argument("--before", default=None, help="git revision of the code before")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    result: dict[str, Any] = {
        "command": "python benchmarks/import_memory.py " + " ".join(sys.argv[1:]),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_head": head,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "run_mib": RUN_BYTES // 2**20,
        "runs": {},
    }
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(server(args.admin_dsn, "pgrag-memory-"))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        dsn = create_database(admin)
        stack.callback(drop_database, admin, dsn)  # the server may be the user's
        Migrator(dsn).migrate(384)
        path = Path(tmp) / "rows.jsonl"
        result["rows"] = write_file(path, args.mb, args.per_doc)
        result["file_mb"] = round(path.stat().st_size / 2**20, 1)
        result["per_doc"] = args.per_doc
        print(f"{path}: {result['file_mb']} MB, {result['rows']} rows", flush=True)
        if args.before:
            before = Path(tmp) / "before"
            before.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.before, "pgrag"],
                capture_output=True,
                check=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
            result["before_revision"] = args.before
            result["runs"]["before, --dry-run"] = run_import(before, dsn, path, "--dry-run")
            print("before", result["runs"]["before, --dry-run"], flush=True)
        small = Path(tmp) / "small.jsonl"
        write_file(small, 1, args.per_doc)
        result["runs"]["baseline (1 MB file), --dry-run"] = run_import(
            ROOT, dsn, small, "--dry-run"
        )
        result["runs"]["after, --dry-run"] = run_import(ROOT, dsn, path, "--dry-run")
        print("after", result["runs"]["after, --dry-run"], flush=True)
        result["runs"]["after, import"] = run_import(ROOT, dsn, path)
        print("after import", result["runs"]["after, import"], flush=True)
        if args.larger_mb:  # the same before and after on a larger file: what grows with it
            path.unlink()
            larger = Path(tmp) / "larger.jsonl"
            write_file(larger, args.larger_mb, args.per_doc)
            mb = round(larger.stat().st_size / 2**20)
            if args.before:
                runs = result["runs"]
                runs[f"before, --dry-run, {mb} MB file"] = run_import(
                    before, dsn, larger, "--dry-run"
                )
            result["runs"][f"after, --dry-run, {mb} MB file"] = run_import(
                ROOT, dsn, larger, "--dry-run"
            )
            print("larger", result["runs"], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
