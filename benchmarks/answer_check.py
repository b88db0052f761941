"""Calibrate the offline answer check (``pgrag ask --check local``) on SciFact.

Each SciFact test claim is checked as a one-sentence answer citing ``[Source 1]``, with three
contexts: its judged abstract (the claim is on the source's subject: it should pass), the most
similar abstract that is *not* judged relevant (a plausible wrong citation: it should fail) and
a random abstract (an unrelated citation: it should fail). SciFact's claims are supported *or
contradicted* by their abstract, so "pass" here means "on the subject of its source", which is
what the embedding similarity measures. No database is needed: the check reads the context
block only.

    .venv/bin/python benchmarks/answer_check.py [--data DIR] [--limit N]   # about 5 minutes

Writes benchmarks/results/answer_check.json (rendered into docs/benchmarks.md by report.py):
per threshold, the share of claims passing with each context, the median scores and the
check's time per answer with the model loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import SCIFACT

from pgrag.check import CheckOptions, check_answer
from pgrag.pipeline.embedders import LocalEmbedder

THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "answer_check.json"


def read_jsonl(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return {row["_id"]: row for row in map(json.loads, f)}


def context(doc: dict[str, str]) -> str:
    return f"[Source 1] {doc['title']} (scifact)\n{doc['title']}. {doc['text']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--limit", type=int, default=100, help="claims checked (default 100)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results file")
    args = parser.parse_args()
    began = datetime.now(UTC)
    if not (args.data / "corpus.jsonl").exists():
        print(f"no SciFact data in {args.data}", file=sys.stderr)
        return 1
    corpus = read_jsonl(args.data / "corpus.jsonl")
    queries = read_jsonl(args.data / "queries.jsonl")
    qrels: dict[str, set[str]] = {}
    with (args.data / "qrels" / "test.tsv").open() as f:
        next(f)
        for line in f:
            qid, did, _ = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, set()).add(did)
    embedder = LocalEmbedder()
    ids = list(corpus)
    # The nearest other abstract is found by title (embedding every abstract takes minutes).
    doc_vectors = embedder.embed([corpus[d]["title"] for d in ids])
    rng = random.Random(31)
    scores: dict[str, list[float]] = {"judged": [], "nearest other": [], "random": []}
    seconds: list[float] = []
    options = CheckOptions("local", min_confidence=0)
    for qid in list(qrels)[: args.limit]:
        claim = queries[qid]["text"].rstrip(".")
        answer = f"{claim} [Source 1]."
        relevant = qrels[qid]
        similarity = doc_vectors @ embedder.embed([claim])[0]
        nearest = next(ids[i] for i in similarity.argsort()[::-1] if ids[i] not in relevant)
        unrelated = rng.choice([d for d in ids if d not in relevant])
        for name, doc in (
            ("judged", min(relevant)),
            ("nearest other", nearest),
            ("random", unrelated),
        ):
            started = time.perf_counter()
            result = check_answer(
                queries[qid]["text"], answer, context(corpus[doc]), options, embedder=embedder
            )
            seconds.append(time.perf_counter() - started)
            # A claim cut into several sentences passes when every one of them does.
            scores[name].append(min(v.score or 0.0 for v in result.verdicts if not v.exempt))
    n = len(scores["judged"])
    result = {
        "benchmark": "answer_check",
        "command": "benchmarks/answer_check.py " + " ".join(sys.argv[1:]),
        "started": began.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": os.getloadavg(),
            "python": platform.python_version(),
        },
        "claims": n,
        "checker": "local (all-MiniLM-L6-v2 cosine similarity)",
        "passing": {
            f"{t:.2f}": {name: round(sum(s >= t for s in v) / n, 4) for name, v in scores.items()}
            for t in THRESHOLDS
        },
        "median_score": {name: round(statistics.median(v), 4) for name, v in scores.items()},
        "check_ms_p50": round(statistics.median(seconds) * 1000, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["passing"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
