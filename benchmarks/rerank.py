"""Added latency per query of each re-rank backend on SciFact: top-50 hybrid candidates -> top-10.

A throwaway database on the embedded server (or ``--dsn``) gets ``--docs`` SciFact abstracts
(those judged for the first ``--queries`` test queries first, then others) through pgrag's
ingester. For each query, in one process and over one connection: ``hybrid_search`` returns 50
candidates (the embedding computed beforehand: the search alone is timed), then each backend
re-ranks the 50 texts and keeps 10 (:func:`pgrag.search.rerank_hits`, what ``pgrag search
--rerank`` runs), timed per query:

  * ``local``: a tiny cross-encoder (2 layers, hidden size 32, seeded random weights: the test
    suite's, built here) through sentence-transformers on the CPU, with 1 torch thread (as
    inside PostgreSQL, ``PGRAG_RERANK_THREADS=1``) and with one per core (torch's default); a
    real MiniLM-L-6 cross-encoder computes far more per pair (6 layers of width 384);
  * ``http``: a local HTTP server speaking the common re-rank protocol with a trivial scoring
    (query words found): what the protocol itself costs (JSON, loopback HTTP, one connection
    per call);
  * ``http+local``: the same server scoring with the tiny cross-encoder (1 thread): an API in
    front of a model, as Hugging Face TEI serves one.

The tiny model's scores are random, so no quality figure is reported: measure quality with a
real cross-encoder and ``pgrag eval --rerank`` (docs/cli.md, "Re-ranking").

    PGRAG_HOME=/tmp/pgrag-bench .venv/bin/python benchmarks/rerank.py

Writes benchmarks/results/rerank.json. The machine is shared: compare backends within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import SCIFACT, admin_url, latency_summary

from pgrag.db import connect
from pgrag.eval.dataset import BeirDataset, load_beir
from pgrag.eval.run import ingest_dataset
from pgrag.install.migrator import Migrator
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.rerank import Reranker, RerankSettings
from pgrag.rerank.http import HttpReranker
from pgrag.rerank.local import CrossEncoderReranker
from pgrag.search import SearchOptions, rerank_hits, search
from pgrag.testing import create_database, drop_database

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "rerank.json"
TENANT = "scifact"


def serve(scoring: Any) -> tuple[ThreadingHTTPServer, str]:
    """A local re-rank API on a free port answering with ``scoring(query, documents)``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            scores = scoring(body["query"], body["documents"])
            order = sorted(range(len(scores)), key=lambda i: -scores[i])[: body["top_n"]]
            payload = {"results": [{"index": i, "relevance_score": scores[i]} for i in order]}
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1/rerank"


class WithThreads:
    """``reranker`` run with ``threads`` torch threads (torch's setting is per process)."""

    def __init__(self, reranker: CrossEncoderReranker, threads: int) -> None:
        self.reranker, self.threads, self.name = reranker, threads, reranker.name

    def score(self, query: str, documents: Any) -> list[float]:
        import torch

        torch.set_num_threads(self.threads)
        return self.reranker.score(query, documents)


def word_overlap(query: str, documents: list[str]) -> list[float]:
    words = query.lower().split()
    return [float(sum(w in d.lower() for w in words)) for d in documents]


def subset(dataset: BeirDataset, docs: int, queries: int) -> BeirDataset:
    kept = dict(list(dataset.queries.items())[:queries])
    judged = [d for q in kept for d in dataset.qrels.get(q, {}) if d in dataset.corpus]
    order = list(dict.fromkeys([*judged, *dataset.corpus]))[: max(docs, len(judged))]
    corpus = {d: dataset.corpus[d] for d in order}
    return BeirDataset(dataset.name, dataset.path, corpus, kept, dataset.qrels)


def run(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    admin = admin_url(args.dsn)
    db = create_database(admin)
    servers: list[ThreadingHTTPServer] = []
    try:
        Migrator(db).migrate(384)
        dataset = subset(load_beir(args.data), args.docs, args.queries)
        embedder = LocalEmbedder()
        started = time.perf_counter()
        ingest_dataset(db, dataset, tenant=TENANT, embedder=embedder, progress=False)
        print(f"ingest: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        local = CrossEncoderReranker(str(model_dir))
        http_server, http_url = serve(word_overlap)
        cores = os.cpu_count() or 1
        model_server, model_url = serve(WithThreads(local, 1).score)
        servers += [http_server, model_server]
        backends: dict[str, Reranker] = {
            "local, 1 thread": WithThreads(local, 1),
            f"local, {cores} threads": WithThreads(local, cores),
            "http": HttpReranker(http_url),
            "http+local": HttpReranker(model_url),
        }
        queries = list(dataset.queries.items())
        vectors = embedder.embed([text for _, text in queries])
        options = SearchOptions(mode="hybrid", limit=args.top)
        search_ms: list[float] = []
        added: dict[str, list[float]] = {name: [] for name in backends}
        candidates = []
        with connect(db) as conn:
            with conn.cursor() as cur:
                version = cur.execute("select current_setting('server_version')").fetchone()
            first_text, first_vector = queries[0][1], vectors[0]
            search(conn, first_text, options, tenant=TENANT, query_embedding=first_vector)
            for reranker in backends.values():  # load the model, open the servers
                reranker.score(first_text, ["warm-up"])
            for (_, text), vector in zip(queries, vectors, strict=True):
                t0 = time.perf_counter()
                hits = search(conn, text, options, tenant=TENANT, query_embedding=vector)
                search_ms.append((time.perf_counter() - t0) * 1000.0)
                candidates.append(len(hits))
                for name, reranker in backends.items():
                    settings = RerankSettings(reranker, args.top)
                    t0 = time.perf_counter()
                    kept, _ = rerank_hits(text, hits, settings, args.keep)
                    added[name].append((time.perf_counter() - t0) * 1000.0)
                    assert len(kept) == min(args.keep, len(hits))
            chunks = conn.execute("select count(*) from pgrag.chunks").fetchone()
        search_summary = latency_summary(search_ms)
        results = {}
        for name, ms in added.items():
            summary = latency_summary(ms)
            summary["over_search_p50"] = round(summary["p50_ms"] / search_summary["p50_ms"], 1)
            results[name] = summary
        return {
            "server_version": version[0] if version else None,
            "documents": len(dataset.corpus),
            "chunks": chunks[0] if chunks else None,
            "queries": len(queries),
            "top": args.top,
            "keep": args.keep,
            "candidates_p50": sorted(candidates)[len(candidates) // 2],
            "model": "tiny BERT cross-encoder: 2 layers, hidden 32, 2 heads, random weights",
            "search": search_summary,
            "rerank": results,
        }
    finally:
        for server in servers:
            server.shutdown()
        drop_database(admin, db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="a server with pgvector (default: the embedded one)")
    parser.add_argument("--data", type=Path, default=SCIFACT, help="BEIR SciFact folder")
    parser.add_argument("--docs", type=int, default=500, help="abstracts to ingest")
    parser.add_argument("--queries", type=int, default=50, help="test queries to run")
    parser.add_argument("--top", type=int, default=50, help="candidates re-ranked per query")
    parser.add_argument("--keep", type=int, default=10, help="hits kept per query")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    sys.path.insert(0, str(ROOT / "tests"))
    from plugins.rerank import build_cross_encoder  # the test suite's tiny cross-encoder

    with tempfile.TemporaryDirectory(prefix="pgrag-rerank-model-") as folder:
        figures = run(args, build_cross_encoder(Path(folder)))
    result = {
        "benchmark": "rerank",
        "command": "benchmarks/rerank.py " + " ".join(argv or sys.argv[1:]),
        "started": started.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": os.getloadavg(),
            "python": platform.python_version(),
        },
        **figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"search": figures["search"], "rerank": figures["rerank"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
