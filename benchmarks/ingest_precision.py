"""``pgrag ingest`` end to end, documents embedded in fp32 and in int8 (the default), in one run.

The same folder (the first ``--docs`` SciFact abstracts, one Markdown file each) is ingested by
the CLI into a fresh tenant per run, ``PGRAG_LOCAL_PRECISION=fp32`` and the default alternating,
``--rounds`` times, after both model copies are made and loaded once (the int8 copy is made once
per ``PGRAG_HOME``). Each run's chunks embedded per second of the whole command (extract, chunk,
embed, write) are reported; the ratio of the medians is the default's speed-up on this machine.

    PGRAG_HOME=/tmp/pgrag-precision .venv/bin/python benchmarks/ingest_precision.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import SCIFACT

ROOT = Path(__file__).resolve().parent.parent
PGRAG = str(Path(sys.executable).with_name("pgrag"))


def write_corpus(folder: Path, data: Path, docs: int) -> None:
    with (data / "corpus.jsonl").open() as lines:
        for _, line in zip(range(docs), lines, strict=False):
            d = json.loads(line)
            (folder / f"{d['_id']}.md").write_text(f"# {d['title']}\n\n{d['text']}\n")


def ingest(folder: Path, tenant: str, precision: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PGRAG_LOCAL_PRECISION"}
    if precision:
        env["PGRAG_LOCAL_PRECISION"] = precision
    done = subprocess.run(
        [PGRAG, "ingest", str(folder), "--tenant", tenant, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    summary = json.loads(done.stdout)
    return {
        "tenant": tenant,
        "chunks_embedded": summary["chunks_embedded"],
        "seconds": round(summary["seconds"], 2),
        "chunks_per_s": round(summary["chunks_embedded"] / summary["seconds"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--docs", type=int, default=400, help="SciFact abstracts, one file each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "ingest_precision.json"
    )
    args = parser.parse_args()

    subprocess.run([PGRAG, "db", "start"], check=True, capture_output=True)
    subprocess.run([PGRAG, "migrate"], check=True, capture_output=True)
    warm = "from pgrag.pipeline.embedders import LocalEmbedder as L\n" + "".join(
        f"L(precision='{p}').embed(['x'])\n" for p in ("int8", "fp32")
    )
    subprocess.run([sys.executable, "-c", warm], check=True)
    runs: dict[str, list[dict[str, Any]]] = {"fp32": [], "default": []}
    stamp = time.strftime("%H%M%S")
    with tempfile.TemporaryDirectory(prefix="pgrag-precision-") as tmp:
        folder = Path(tmp)
        write_corpus(folder, args.data, args.docs)
        for r in range(args.rounds):
            for name in ("fp32", "default") if r % 2 == 0 else ("default", "fp32"):
                run = ingest(folder, f"{name}-{stamp}-{r}", "fp32" if name == "fp32" else None)
                runs[name].append(run)
                print(name, run, flush=True)
    median = {k: statistics.median(r["chunks_per_s"] for r in v) for k, v in runs.items()}
    result = {
        "command": "python benchmarks/ingest_precision.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "documents": args.docs,
        "runs": runs,
        "median_chunks_per_s": median,
        "speedup_default_over_fp32": round(median["default"] / median["fp32"], 2),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("speed-up:", result["speedup_default_over_fp32"], "wrote", args.out)


if __name__ == "__main__":
    main()
