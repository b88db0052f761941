"""Structural (``tokens``) against semantic chunking: nDCG@10 per search mode, out of fold.

Two corpora, each ingested once per chunking into a tenant of its own in a throwaway database:

* SciFact (BEIR; ``PGRAG_SHARED_DIR``/data/scifact, skipped with the reason when absent), at
  ``--scifact-chunk-size`` tokens (default 128: most abstracts are 150-350 tokens, so at the
  default 250 most would be one chunk whatever the chunker); documents ranked at their best chunk.
* The repository's own docs (``docs/*.md`` but the generated benchmarks.md) at the default chunk
  size, with the judged questions of ``benchmarks/data/docs_queries.jsonl`` (written before any
  chunker ran on them). Judging is at document + section level: a hit counts for the section it
  belongs to (its file and heading path); the ranking is the distinct sections in order of their
  best chunk, and a section is relevant when it is the judged one or lies under it. Both
  chunkers keep every chunk inside one section, so the ranking does not depend on how many chunks
  a section was cut into.

The semantic chunker's breakpoint rule is chosen by cross-validation among ``--breakpoints``:
the queries are dealt into 5 folds as ``pgrag eval --folds`` does, each fold scores the rule best
on the other four, and the figure is the mean over the held-out queries (never picked on the
test). Ingest time: each chunking of the docs corpus and of ``--time-docs`` SciFact abstracts is
ingested once more with the plain embedder (no cache) and timed; the quality runs use an
embedding cache (by text, under ``$PGRAG_HOME/chunking-cache``) so that a sentence or chunk
embedded for one configuration is not embedded again for the next.

    PGRAG_HOME=/tmp/pgrag-bench python benchmarks/chunking.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import ROOT, SCIFACT

from pgrag import eval as ev
from pgrag.db import connect
from pgrag.home import pgrag_home
from pgrag.ingest import IngestOptions, ingest_documents, ingest_paths
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import ExtractedDocument
from pgrag.search import SearchOptions, search
from pgrag.testing import drop_database, fresh_database, server

OUT = ROOT / "benchmarks" / "results" / "chunking.json"
QUERIES = ROOT / "benchmarks" / "data" / "docs_queries.jsonl"
MODES = ("keyword", "vector", "hybrid")
FOLDS = 5


class CachedEmbedder:
    """The local model with a cache of embeddings by text (the benchmark's only shortcut: an
    embedding depends on its text alone, so the figures are those of an uncached run)."""

    provider = "local"

    def __init__(self, path: Path) -> None:
        self.inner = LocalEmbedder()
        self.model_name = self.inner.model_name
        self.tokens_used = 0
        self.path = path
        self.cache: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path) as data:
                self.cache = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    @property
    def dims(self) -> int:
        return self.inner.dims

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens_many(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in self.cache})
        if missing:
            by_key = {k: t for k, t in zip(keys, texts, strict=True)}
            vectors = self.inner.embed([by_key[k] for k in missing])
            self.cache.update(zip(missing, vectors, strict=True))
        return np.stack([self.cache[k] for k in keys]) if keys else np.zeros((0, self.dims))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self.cache))
        np.savez(self.path, keys=keys, vectors=np.stack(list(self.cache.values())))


def configs(breakpoints: Sequence[str]) -> list[tuple[str, str, str | None]]:
    """(name, chunker, breakpoint) of every configuration: structural first."""
    return [("structural", "tokens", None)] + [
        (f"semantic {b}", "semantic", b) for b in breakpoints
    ]


def options(chunker: str, breakpoint: str | None, size: int | None) -> IngestOptions:
    return IngestOptions(chunker=chunker, breakpoint=breakpoint, chunk_size=size)


def chunk_count(dsn: str, tenant: str) -> int:
    with connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pgrag.chunks where tenant_id = %s", (tenant,)
        ).fetchone()
    return int(row[0]) if row else 0


def cross_validated(per_query: dict[str, dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Structural's mean and the semantic rule chosen on 4 folds, scored on the fifth."""
    semantic = {k: v for k, v in per_query.items() if k != "structural"}
    cv = ev.cross_validate(semantic, FOLDS)
    structural = ev.mean_metrics(per_query["structural"])
    return {
        "structural": round(structural["ndcg@10"], 4),
        "semantic_out_of_fold": round(cv.out_of_fold["ndcg@10"], 4),
        "chosen_per_fold": cv.chosen,
        "semantic_full_test": {
            k: round(ev.mean_metrics(v)["ndcg@10"], 4) for k, v in semantic.items()
        },
    }


# -- SciFact ---------------------------------------------------------------------------------------


def scifact_documents(dataset: ev.BeirDataset, ids: Sequence[str]) -> list[ExtractedDocument]:
    return [
        ExtractedDocument.from_text(
            uri=dataset.uri(i),
            title=dataset.corpus[i][0],
            text=f"{dataset.corpus[i][0]}\n\n{dataset.corpus[i][1]}",
            metadata={"beir_id": i},
        )
        for i in ids
    ]


def run_scifact(dsn: str, args: argparse.Namespace, cached: CachedEmbedder) -> dict[str, Any]:
    if not (args.scifact / "corpus.jsonl").exists():
        return {"skipped": f"no SciFact data at {args.scifact} (set PGRAG_SHARED_DIR)"}
    dataset = ev.load_beir(args.scifact)
    ids = list(dataset.corpus)
    embeddings = ev.embed_queries(cached, dataset)
    rows: dict[str, Any] = {}
    per_query: dict[str, dict[str, dict[str, dict[str, float]]]] = {m: {} for m in MODES}
    for name, chunker, bp in configs(args.breakpoints):
        tenant = f"scifact-{name.replace(' ', '-')}"
        started = time.perf_counter()
        ingest_documents(
            dsn,
            scifact_documents(dataset, ids),
            tenant=tenant,
            embedder=cached,
            options=options(chunker, bp, args.scifact_chunk_size),
        )
        cached.save()
        row: dict[str, Any] = {
            "chunks": chunk_count(dsn, tenant),
            "cached_ingest_s": round(time.perf_counter() - started, 1),
        }
        with connect(dsn) as conn:
            for mode in MODES:
                result = ev.run_mode(
                    conn,
                    dataset,
                    mode,
                    ev.EVAL_MODES[mode],
                    tenant=tenant,
                    embeddings=embeddings,
                    latency_k=None,
                )
                per_query[mode][name] = result.per_query
                row[f"{mode}_ndcg@10"] = round(result.metrics["ndcg@10"], 4)
        rows[name] = row
        print(f"scifact {name}: {row}", file=sys.stderr)
    timing = time_ingest(
        dsn,
        args,
        lambda tenant, opts: ingest_documents(
            dsn,
            scifact_documents(dataset, ids[: args.time_docs]),
            tenant=tenant,
            embedder=LocalEmbedder(),
            options=opts,
        ),
        "scifact",
        args.scifact_chunk_size,
    )
    return {
        "documents": len(ids),
        "queries": len(dataset.queries),
        "chunk_size": args.scifact_chunk_size,
        "configurations": rows,
        "ndcg@10": {m: cross_validated(per_query[m]) for m in MODES},
        "ingest_time": {"documents": min(args.time_docs, len(ids)), **timing},
    }


# -- the docs corpus -------------------------------------------------------------------------------


def _plain(heading: str) -> str:
    return heading.replace("`", "").strip().lower()


def docs_files() -> list[str]:
    return sorted(str(p) for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks.md")


def docs_rankings(
    conn: Any, tenant: str, queries: list[dict[str, Any]], mode: str, vectors: np.ndarray
) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    """Each query's ranking of distinct sections, and its one relevant section."""
    rankings: dict[str, list[str]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q, vector in zip(queries, vectors, strict=True):
        relevant = f"{q['file']}#{_plain(q['section'])}"
        qrels[q["id"]] = {relevant: 1}
        hits = search(
            conn,
            q["query"],
            SearchOptions(mode=mode, limit=100),
            tenant=tenant,
            query_embedding=vector,
        )
        ranking: list[str] = []
        for hit in sorted(hits, key=lambda h: h.rank):
            file = "docs/" + Path(hit.source_uri).name
            path = [_plain(h) for h in hit.heading_path]
            if file == q["file"] and _plain(q["section"]) in path:
                key = relevant  # the judged section or one under it
            else:
                key = f"{file}#{' > '.join(path)}"
            if key not in ranking:
                ranking.append(key)
        rankings[q["id"]] = ranking
    return rankings, qrels


def run_docs(dsn: str, args: argparse.Namespace, cached: CachedEmbedder) -> dict[str, Any]:
    queries = [json.loads(line) for line in QUERIES.read_text().splitlines() if line.strip()]
    files = docs_files()
    vectors = cached.embed([q["query"] for q in queries])
    rows: dict[str, Any] = {}
    per_query: dict[str, dict[str, dict[str, dict[str, float]]]] = {m: {} for m in MODES}
    for name, chunker, bp in configs(args.breakpoints):
        tenant = f"docs-{name.replace(' ', '-')}"
        ingest_paths(dsn, files, tenant=tenant, embedder=cached, options=options(chunker, bp, None))
        cached.save()
        row: dict[str, Any] = {"chunks": chunk_count(dsn, tenant)}
        with connect(dsn) as conn:
            for mode in MODES:
                rankings, qrels = docs_rankings(conn, tenant, queries, mode, vectors)
                per_query[mode][name] = ev.per_query_metrics(qrels, rankings)
                row[f"{mode}_ndcg@10"] = round(ev.mean_metrics(per_query[mode][name])["ndcg@10"], 4)
        rows[name] = row
        print(f"docs {name}: {row}", file=sys.stderr)
    timing = time_ingest(
        dsn,
        args,
        lambda tenant, opts: ingest_paths(
            dsn, files, tenant=tenant, embedder=LocalEmbedder(), options=opts
        ),
        "docs",
        None,
    )
    return {
        "files": [str(Path(f).relative_to(ROOT)) for f in files],
        "queries": len(queries),
        "judging": "document + section: a hit counts for its file and heading path; ranking "
        "= distinct sections by best chunk; relevant = the judged section or one under it",
        "configurations": rows,
        "ndcg@10": {m: cross_validated(per_query[m]) for m in MODES},
        "ingest_time": timing,
    }


def time_ingest(
    dsn: str, args: argparse.Namespace, ingest: Any, corpus: str, size: int | None
) -> dict[str, Any]:
    """Seconds of an uncached ingest with each chunker (the first semantic rule), and the ratio."""
    times: dict[str, float] = {}
    for name, chunker, bp in configs(args.breakpoints[:1]):
        tenant = f"time-{corpus}-{chunker}"
        started = time.perf_counter()
        ingest(tenant, options(chunker, bp, size))
        times[name] = round(time.perf_counter() - started, 1)
    values = list(times.values())
    return {"seconds": times, "semantic_over_structural": round(values[1] / values[0], 2)}


def git_head() -> str | None:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return done.stdout.strip() or None


def retime(args: argparse.Namespace) -> int:
    """The ingest times of ``args.out`` measured again (the quality figures are kept)."""
    result = json.loads(args.out.read_text())
    dataset = ev.load_beir(args.scifact) if "skipped" not in result["scifact"] else None
    files = docs_files()
    with server(args.admin_dsn) as admin:
        dsn = fresh_database(admin, "pgrag_chunking")
        try:
            result["docs"]["ingest_time"] = time_ingest(
                dsn,
                args,
                lambda tenant, opts: ingest_paths(
                    dsn, files, tenant=tenant, embedder=LocalEmbedder(), options=opts
                ),
                "docs",
                None,
            )
            if dataset is not None:
                ids = list(dataset.corpus)[: args.time_docs]
                timing = time_ingest(
                    dsn,
                    args,
                    lambda tenant, opts: ingest_documents(
                        dsn,
                        scifact_documents(dataset, ids),
                        tenant=tenant,
                        embedder=LocalEmbedder(),
                        options=opts,
                    ),
                    "scifact",
                    args.scifact_chunk_size,
                )
                result["scifact"]["ingest_time"] = {"documents": len(ids), **timing}
        finally:
            drop_database(admin, dsn)
    result["timed_at"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    result["git_head"] = git_head()
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k]["ingest_time"] for k in ("docs", "scifact")}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-dsn", help="a server to create the database on (default: temp)")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    parser.add_argument("--scifact-chunk-size", type=int, default=128)
    parser.add_argument("--breakpoints", nargs="+", default=["p70", "p85", "p95"])
    parser.add_argument("--time-docs", type=int, default=500)
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--time-only",
        action="store_true",
        help="only re-measure the uncached ingest times, into the existing --out file",
    )
    args = parser.parse_args(argv)
    if args.time_only:
        return retime(args)
    cached = CachedEmbedder(pgrag_home() / "chunking-cache" / "embeddings.npz")
    with server(args.admin_dsn) as admin:
        dsn = fresh_database(admin, "pgrag_chunking")
        try:
            docs = run_docs(dsn, args, cached)
            scifact = (
                {"skipped": "--skip-scifact"}
                if args.skip_scifact
                else run_scifact(dsn, args, cached)
            )
        finally:
            drop_database(admin, dsn)
    result = {
        "benchmark": "chunking",
        "command": "benchmarks/chunking.py " + " ".join(argv or sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
        "model": cached.model_name,
        "folds": FOLDS,
        "breakpoints": args.breakpoints,
        "docs": docs,
        "scifact": scifact,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
