"""The golden-set retrieval report on the sample documents (``pgrag eval --golden``).

Loads ``samples/`` (with the generated sample PDF) into a tenant of its own with ``pgrag ingest``
and runs ``pgrag eval --golden samples/golden.jsonl`` in every eval mode, at k=1 and k=10, as
the commands a user types (in process). Retrieval only: answer metrics need a chat endpoint.

    PGRAG_HOME=/tmp/pgrag-golden .venv/bin/python benchmarks/golden.py   # about a minute

Writes benchmarks/results/golden.json (rendered into docs/benchmarks.md by report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from click.testing import CliRunner
from common import ROOT, database_url

from pgrag.cli import main as pgrag
from pgrag.eval import EVAL_MODES

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "golden.json"
GOLDEN = "samples/golden.jsonl"
TENANT = "golden-samples"


def run(dsn: str, *args: str) -> str:
    """``pgrag --dsn DSN ARGS`` in process; its stdout (a failure stops the benchmark)."""
    result = CliRunner().invoke(pgrag, ["--dsn", dsn, *args])
    if result.exit_code != 0:
        raise SystemExit(f"pgrag {' '.join(args)}: exit {result.exit_code}: {result.output}")
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGRAG_DSN"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    began = datetime.now(UTC)
    os.chdir(ROOT)  # the golden file names its sources relative to the clone
    dsn = database_url(args.dsn)
    pdf = ROOT / "samples" / "pgrag-overview.pdf"
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_sample_pdf.py"), str(pdf)],
                   check=True, capture_output=True)  # fmt: skip
    run(dsn, "migrate")
    run(dsn, "ingest", "samples/", "--tenant", TENANT, "--no-progress")
    modes = [arg for name in EVAL_MODES for arg in ("--mode", name)]
    reports: dict[str, Any] = {}
    for k in (1, 10):
        out = run(dsn, "eval", "--golden", GOLDEN, "--tenant", TENANT, "-k", str(k),
                  "--no-answers", "--json", *modes)  # fmt: skip
        reports[str(k)] = json.loads(out)["summary"]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    result = {
        "benchmark": "golden",
        "command": "benchmarks/golden.py " + " ".join(sys.argv[1:]),
        "started": began.isoformat(timespec="seconds"),
        "git_head": head.stdout.strip() or None,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": os.getloadavg(),
            "python": platform.python_version(),
        },
        "golden": GOLDEN,
        "corpus": "samples/ (4 Markdown and HTML files and the generated PDF)",
        "questions": reports["10"]["questions"],
        "commands": [
            "pgrag ingest samples/",
            f"pgrag eval --golden {GOLDEN} -k K --no-answers --json --mode MODE ...",
        ],
        "by_k": {k: r["retrieval"] for k, r in reports.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["by_k"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
