"""Calibrate build_context's default relevance floor (min_score, a cosine-similarity floor).

Two sets of questions against two corpora, in one run:
  * SciFact test queries (every one has a relevant abstract) against tenant ``beir-scifact``
    (ingested by ``benchmarks/beir.py``): each should still get context;
  * off-topic questions (geography, cooking, sport, ...) with no answer in either corpus, against
    SciFact and against the sample corpus (``samples/``, loaded into tenant ``floor-samples``):
    each should get "no relevant information".

For every question the best cosine similarity of any chunk (what the floor compares) is measured
once with ``vector_search``; a sweep of floors then gives the share of SciFact queries still
answered, the share of SciFact queries whose context still holds a relevant abstract (by
``build_context`` itself at a few floors), and the share of off-topic questions refused.

    PGRAG_HOME=/tmp/pgrag-search-dev .venv/bin/python benchmarks/relevance_floor.py

Writes benchmarks/results/relevance_floor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import SCIFACT, database_url

from pgrag import eval as ev
from pgrag.db import connect
from pgrag.ingest import ingest_documents
from pgrag.pipeline.extract import extract_path
from pgrag.search import ContextOptions, SearchOptions, build_context, query_embedder, search

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = SCIFACT
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "relevance_floor.json"
SAMPLES_TENANT = "floor-samples"

OFF_TOPIC = [
    "what is the capital of France?",
    "how do I bake sourdough bread?",
    "who won the football world cup in 2018?",
    "what is the tallest mountain in Africa?",
    "how many players are on a basketball team?",
    "recommend a good science fiction novel",
    "what time zone is Tokyo in?",
    "how do I change a flat tyre on a bicycle?",
    "who painted the Mona Lisa?",
    "what is the best way to learn the guitar?",
    "how long should I boil an egg?",
    "which planet has the most moons?",
    "what language is spoken in Brazil?",
    "how do I knit a scarf?",
    "who wrote Pride and Prejudice?",
    "what is the exchange rate of the euro to the yen?",
    "when was the Eiffel Tower built?",
    "how do I make a paper airplane?",
    "what are the rules of chess castling?",
    "which team won the 1998 NBA finals?",
    "how far is the Moon from the Earth?",
    "what is a good name for a golden retriever puppy?",
    "where can I buy concert tickets in Berlin?",
    "how do I remove a red wine stain from a carpet?",
    "what is the plot of the movie Inception?",
    "how do you say thank you in Japanese?",
    "what is the population of Canada?",
    "how do I plant tulip bulbs?",
    "who is the lead singer of Coldplay?",
    "what is the speed limit on German motorways?",
    "how do I fold a fitted sheet?",
    "what should I pack for a beach holiday?",
    "what is the longest river in South America?",
    "how do I tie a bow tie?",
    "who invented the telephone?",
    "what are the opening hours of the Louvre?",
    "how many strings does a violin have?",
    "what is the recipe for pancakes?",
    "which country hosts the Tour de France?",
    "how do I train for a marathon?",
]

SAMPLE_QUESTIONS = [
    "how are documents split into chunks?",
    "what happens when an ingest is killed?",
    "how do I install pgrag on Linux?",
    "which extractors read PDF files?",
    "how does hybrid search combine BM25 and vectors?",
    "are unchanged documents embedded again?",
]

FLOORS = [round(x, 2) for x in np.arange(0.0, 0.61, 0.01)]


def best_similarity(conn: Any, tenant: str, text: str, embedding: np.ndarray) -> float:
    hits = search(
        conn, text, SearchOptions(mode="vector", limit=1), tenant=tenant, query_embedding=embedding
    )
    return hits[0].score if hits else -1.0


def context_has_relevant(
    conn: Any,
    dataset: ev.BeirDataset,
    qid: str,
    embedding: np.ndarray,
    tenant: str,
    floor: float | None,
) -> tuple[bool, bool]:
    """(context not empty, context cites a relevant abstract) for one SciFact query."""
    ctx = build_context(
        conn,
        dataset.queries[qid],
        ContextOptions(min_score=-1.0 if floor is None else floor),
        tenant=tenant,
        query_embedding=embedding,
    )
    docs = {dataset.doc_id(s["source_uri"]) for s in ctx.sources}
    relevant = {d for d, grade in dataset.qrels.get(qid, {}).items() if grade > 0}
    return bool(ctx.sources), bool(docs & relevant)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--dsn", default=os.environ.get("PGRAG_DSN"))
    parser.add_argument("--tenant", default="beir-scifact")
    parser.add_argument(
        "--check",
        type=float,
        action="append",
        default=[],
        help="floors to check with build_context (default 0.2 0.25 0.3 0.35)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    dataset = ev.load_beir(args.data)
    dsn = database_url(args.dsn)
    with connect(dsn) as conn:
        embedder = query_embedder(conn)
    samples = [
        extract_path(p)
        for p in sorted((ROOT / "samples").iterdir())
        if p.suffix in (".md", ".html")
    ]
    ingest_documents(dsn, samples, tenant=SAMPLES_TENANT, embedder=embedder)

    sci = ev.embed_queries(embedder, dataset)
    off = dict(zip(OFF_TOPIC, embedder.embed(OFF_TOPIC), strict=True))
    own = dict(zip(SAMPLE_QUESTIONS, embedder.embed(SAMPLE_QUESTIONS), strict=True))
    with connect(dsn) as conn:
        chunks = conn.execute(
            "select count(*) from pgrag.chunks where tenant_id = %s", (args.tenant,)
        ).fetchone()
        if not chunks or not chunks[0]:
            print(f"tenant {args.tenant} is empty: run benchmarks/beir.py first", file=sys.stderr)
            return 1
        sims = {
            "scifact": [
                best_similarity(conn, args.tenant, dataset.queries[q], e) for q, e in sci.items()
            ],
            "off_topic_vs_scifact": [
                best_similarity(conn, args.tenant, t, e) for t, e in off.items()
            ],
            "off_topic_vs_samples": [
                best_similarity(conn, SAMPLES_TENANT, t, e) for t, e in off.items()
            ],
            "samples_questions": [
                best_similarity(conn, SAMPLES_TENANT, t, e) for t, e in own.items()
            ],
        }
        sweep = []
        for floor in FLOORS:
            sweep.append(
                {
                    "floor": floor,
                    "scifact_answered": round(
                        float(np.mean([s >= floor for s in sims["scifact"]])), 4
                    ),
                    "samples_answered": round(
                        float(np.mean([s >= floor for s in sims["samples_questions"]])), 4
                    ),
                    "off_topic_refused_scifact": round(
                        float(np.mean([s < floor for s in sims["off_topic_vs_scifact"]])), 4
                    ),
                    "off_topic_refused_samples": round(
                        float(np.mean([s < floor for s in sims["off_topic_vs_samples"]])), 4
                    ),
                }
            )
        checks = {}
        for floor in [None, *(args.check or [0.2, 0.25, 0.3, 0.35])]:
            rows = [
                context_has_relevant(conn, dataset, q, e, args.tenant, floor)
                for q, e in sci.items()
            ]
            checks["none" if floor is None else str(floor)] = {
                "scifact_with_context": round(float(np.mean([r[0] for r in rows])), 4),
                "scifact_context_cites_relevant": round(float(np.mean([r[1] for r in rows])), 4),
            }
            print(
                f"build_context floor {floor}: {checks['none' if floor is None else str(floor)]}",
                file=sys.stderr,
            )

    def pct(values: list[float]) -> dict[str, float]:
        q = np.percentile(values, [0, 1, 5, 50, 95, 100])
        return {
            k: round(float(v), 4)
            for k, v in zip(("min", "p1", "p5", "p50", "p95", "max"), q, strict=True)
        }

    home = os.environ.get("PGRAG_HOME")
    report = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": (f"PGRAG_HOME={home} " if home and not args.dsn else "")
        + ".venv/bin/python benchmarks/relevance_floor.py"
        + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
        "embedding_model": embedder.model_name,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "queries": {"scifact": len(sci), "off_topic": len(off), "samples": len(own)},
        "best_similarity": {name: pct(values) for name, values in sims.items()},
        "off_topic_best_similarity": dict(
            zip(
                OFF_TOPIC,
                (
                    max(a, b)
                    for a, b in zip(
                        sims["off_topic_vs_scifact"], sims["off_topic_vs_samples"], strict=True
                    )
                ),
                strict=True,
            )
        ),
        "sweep": sweep,
        "build_context_checks": checks,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, row in report["best_similarity"].items():
        print(f"{name:<24} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))
    print(
        f"{'floor':>6}{'SciFact ok':>12}{'samples ok':>12}{'off refused (sci)':>19}"
        f"{'off refused (samples)':>23}"
    )
    for row in sweep:
        if round(row["floor"] * 100) % 5 == 0:
            print(
                f"{row['floor']:>6.2f}{row['scifact_answered']:>12.3f}"
                f"{row['samples_answered']:>12.3f}{row['off_topic_refused_scifact']:>19.3f}"
                f"{row['off_topic_refused_samples']:>23.3f}"
            )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
