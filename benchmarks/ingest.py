"""Ingest throughput on BEIR SciFact (5,183 abstracts), every figure from ONE run.

Figures:
  * embedder alone: ``LocalEmbedder.embed`` (model.encode) on the pipeline's own chunks, in the
    pipeline's batch size and on a worker thread as in the pipeline, measured before and after
    the pipeline (the machine is shared; the mean is used); then once more with the other local
    backend (``onnx``, the default, vs ``sentence-transformers``) and the smallest cosine
    between the two backends' embeddings;
  * whole pipeline: ``ingest_documents`` (chunk + embed + binary COPY + per-document swap) into
    a fresh migrated database; overhead = embedder-alone rate / pipeline rate - 1;
  * database load: the same rows (with their embeddings) loaded with binary COPY vs
    ``executemany`` INSERTs, into a session staging table (no indexes: the wire and parse cost)
    and into ``pgrag.chunks`` of fresh migrated databases (HNSW + GIN + generated tsvector);
  * streaming: peak Python heap (tracemalloc) and RSS while extracting and chunking a
    generated Markdown file of ``--big-mb`` MB.

    PGRAG_HOME=/tmp/pgrag-ingest-dev .venv/bin/python benchmarks/ingest.py

Writes benchmarks/results/ingest.json. Goals (../shared/GUIDE.md): overhead <= 10 %,
COPY >= 20k chunks/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import threading
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from common import SCIFACT, admin_url
from psycopg import sql
from psycopg.types.json import Jsonb

import pgrag.ingest.run as ingest_mod
from pgrag.db import connect
from pgrag.ingest import ingest_documents
from pgrag.pipeline.chunking import default_sizes, make_chunker, token_counter
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import ExtractedDocument, extract_path
from pgrag.testing import drop_database, fresh_database

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = SCIFACT / "corpus.jsonl"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "ingest.json"
GOALS = {"overhead_pct_max": 10.0, "copy_chunks_per_s_min": 20_000}


def load_corpus(path: Path, limit: int | None) -> list[ExtractedDocument]:
    docs = []
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            docs.append(
                ExtractedDocument.from_text(
                    uri=f"scifact:{row['_id']}",
                    title=row["title"],
                    text=row["title"] + "\n\n" + row["text"],
                    metadata={"beir_id": row["_id"]},
                )
            )
            if limit and len(docs) >= limit:
                break
    return docs


def embed_alone(embedder: LocalEmbedder, texts: list[str]) -> tuple[float, np.ndarray]:
    """model.encode alone, in the pipeline's batches and, like the pipeline, on a worker
    thread (torch measured ~10 % faster off the main thread here: same footing for both)."""
    batch = ingest_mod.BATCH_CHUNKS
    out: list[np.ndarray] = []
    timing: list[float] = []

    def work() -> None:
        started = time.perf_counter()
        for i in range(0, len(texts), batch):
            out.append(embedder.embed(texts[i : i + batch]))
        timing.append(time.perf_counter() - started)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return timing[0], np.vstack(out)


# -- database load: COPY vs executemany ----------------------------------------------------------

COLUMNS = [
    "tenant_id",
    "document_id",
    "chunk_index",
    "content",
    "embedding",
    "page",
    "heading_path",
    "token_count",
    "content_sha256",
    "overlap_chars",
    "metadata",
]
# language is left to its default ('english'): psycopg has no binary dumper for regconfig (the
# pipeline stages it as text and casts in its INSERT ... SELECT).
TYPES = [
    "text",
    "int8",
    "int4",
    "text",
    "vector",
    "int4",
    "text[]",
    "int4",
    "text",
    "int4",
    "jsonb",
]


def load_rows(
    dsn: str, chunks: list[tuple[int, int, str, str, int]], vectors: np.ndarray, target: str
) -> list[tuple[Any, ...]]:
    """Rows for ``target`` (documents are created first, outside the timing)."""
    n_docs = max(c[0] for c in chunks) + 1
    with connect(dsn) as conn:
        if target == "pgrag.chunks":
            ids = conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri) "
                "select 'bench', 'd' || g, 'text', 'bench:' || g from generate_series(0, %s) g "
                "returning id",
                (n_docs - 1,),
            ).fetchall()
            conn.commit()
            doc_ids = [i for (i,) in ids]
        else:
            doc_ids = list(range(n_docs))
    return [
        ("bench", doc_ids[d], idx, text, vectors[k], None, [], tokens, sha, 0, Jsonb({}))
        for k, (d, idx, text, sha, tokens) in enumerate(chunks)
    ]


def time_load(dsn: str, rows: list[tuple[Any, ...]], method: str, target: str) -> float:
    """Seconds to load ``rows`` into ``target`` with ``method`` (COPY binary or executemany)."""
    with connect(dsn) as conn:
        if target == "stage":
            conn.execute(
                "create temp table stage (tenant_id text, document_id int8, chunk_index int4, "
                "content text, embedding vector(384), page int4, heading_path text[], "
                "token_count int4, content_sha256 text, overlap_chars int4, "
                "metadata jsonb)"
            )
            conn.commit()
        table = sql.Identifier("stage") if target == "stage" else sql.Identifier("pgrag", "chunks")
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS)
        started = time.perf_counter()
        with conn.cursor() as cur:
            if method == "copy":
                stmt = sql.SQL("copy {} ({}) from stdin (format binary)").format(table, cols)
                with cur.copy(stmt) as copy:
                    copy.set_types(TYPES)
                    for row in rows:
                        copy.write_row(row)
            else:
                stmt = sql.SQL("insert into {} ({}) values ({})").format(
                    table, cols, sql.SQL(", ").join(sql.Placeholder() * len(COLUMNS))
                )
                cur.executemany(stmt, rows)
        conn.commit()
        return time.perf_counter() - started


# -- streaming a big file ---------------------------------------------------------------------


def big_file(mb: int, folder: Path) -> dict[str, Any]:
    path = folder / f"big-{mb}mb.md"
    para = (
        "Postgres stores the chunks and their embeddings next to the documents. Hybrid search "
        "fuses a BM25 ranking and a vector ranking into one list. "
    ) * 3
    with path.open("w") as f:
        i = 0
        while f.tell() < mb * 1024 * 1024:
            if i % 40 == 0:
                f.write(f"\n## Section {i // 40}\n\n")
            f.write(f"{para}Paragraph {i}.\n\n")
            i += 1
    embedder = LocalEmbedder()
    size, overlap = default_sizes("tokens", embedder.max_tokens)
    chunker = make_chunker("tokens", token_counter(embedder), size, overlap)
    embedder.count_tokens("warm up")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    started = time.perf_counter()
    n = sum(1 for _ in chunker.chunks(extract_path(path).blocks))
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    path.unlink()
    return {
        "file_mb": mb,
        "chunks": n,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(n / seconds),
        "peak_python_heap_mb": round(peak / 2**20, 1),
        "max_rss_growth_mb": round(rss_after - rss_before, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--dsn", default=os.environ.get("PGRAG_DSN"), help="admin DSN; default: embedded"
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--limit", type=int, default=None, help="first N documents only")
    p.add_argument("--big-mb", type=int, default=50, help="streaming check size (0: skip)")
    p.add_argument("--load-rows", type=int, default=20_000, help="rows per load timing")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)

    admin = admin_url(args.dsn)

    docs = load_corpus(args.data, args.limit)
    embedder = LocalEmbedder()
    embedder.embed(["warm up the model"])  # model load is excluded from every figure

    # Chunks exactly as the pipeline makes them (same chunker, same defaults).
    size, overlap = default_sizes("tokens", embedder.max_tokens)
    chunker = make_chunker("tokens", token_counter(embedder), size, overlap)
    started = time.perf_counter()
    chunks: list[tuple[int, int, str, str, int]] = []
    for d, doc in enumerate(docs):
        for c in chunker.chunks(doc.blocks):
            chunks.append((d, c.index, c.content, c.sha256, c.token_count))
    chunk_s = time.perf_counter() - started
    texts = [c[2] for c in chunks]
    n = len(texts)
    print(f"{len(docs)} documents -> {n} chunks (chunking alone {n / chunk_s:,.0f} chunks/s)")

    embed_1, vectors = embed_alone(embedder, texts)
    print(f"embedder alone (1st):   {n / embed_1:8.1f} chunks/s")

    db = "pgrag_bench_ingest"
    dsn = fresh_database(admin, db)
    summary = ingest_documents(dsn, docs, tenant="bench", embedder=embedder)
    assert summary.chunks_written == n and summary.documents_failed == 0, summary
    pipe_s = summary.seconds
    print(f"whole pipeline:         {n / pipe_s:8.1f} chunks/s ({pipe_s:.1f} s)")

    embed_2, _ = embed_alone(embedder, texts)
    print(f"embedder alone (2nd):   {n / embed_2:8.1f} chunks/s")
    embed_rate = n / ((embed_1 + embed_2) / 2)
    pipe_rate = n / pipe_s
    overhead = (embed_rate / pipe_rate - 1) * 100
    print(f"pipeline overhead:      {overhead:+.1f} % (goal <= {GOALS['overhead_pct_max']:.0f} %)")

    # The same chunks through the other local backend (the old path), in the same run.
    other = LocalEmbedder(backend="sentence-transformers" if embedder.backend == "onnx" else "onnx")
    other.embed(["warm up the model"])
    embed_other, other_vectors = embed_alone(other, texts)
    by_backend = {embedder.backend: round(embed_rate, 1), other.backend: round(n / embed_other, 1)}
    min_cosine = float((vectors * other_vectors).sum(axis=1).min())
    print(
        f"embedder alone ({other.backend}): {n / embed_other:8.1f} chunks/s; "
        f"min cosine to {embedder.backend}: {min_cosine:.6f}"
    )

    rerun = ingest_documents(dsn, docs, tenant="bench", embedder=embedder)
    print(f"unchanged re-run:       {rerun.seconds:.2f} s, {rerun.chunks_embedded} embedded")
    drop_database(admin, dsn)

    # The same rows for every method: the pipeline's chunks and embeddings, repeated (under new
    # document ids) up to --load-rows so that one timing is long enough to mean something.
    n_docs = len(docs)
    load_chunks = [
        (d + (k // n) * n_docs, idx, text, sha, tokens)
        for k in range(max(args.load_rows, n))
        for d, idx, text, sha, tokens in [chunks[k % n]]
    ]
    load_vectors = vectors[[k % n for k in range(len(load_chunks))]]
    m = len(load_chunks)
    loads: dict[str, dict[str, float]] = {}
    for target in ("stage", "pgrag.chunks"):
        for method in ("copy", "executemany"):
            name = f"pgrag_bench_load_{method}"
            best = float("inf")
            # Staging loads are cheap: best of 3. Loads into pgrag.chunks: one, fresh database.
            for _ in range(3 if target == "stage" else 1):
                ldsn = fresh_database(admin, name)
                rows = load_rows(ldsn, load_chunks, load_vectors, target)
                best = min(best, time_load(ldsn, rows, method, target))
                drop_database(admin, ldsn)
            loads.setdefault(target, {})[method] = round(m / best)
            print(f"load {target:<13} {method:<12} {m / best:10,.0f} chunks/s ({m} rows)")
    for figures in loads.values():
        figures["copy_vs_executemany"] = round(figures["copy"] / figures["executemany"], 2)

    streaming = big_file(args.big_mb, args.out.parent) if args.big_mb else None
    if streaming:
        print(
            f"streaming {args.big_mb} MB Markdown: {streaming['chunks']} chunks, peak heap "
            f"{streaming['peak_python_heap_mb']} MB, RSS growth {streaming['max_rss_growth_mb']} MB"
        )

    result = {
        "benchmark": "ingest",
        "command": "PGRAG_HOME=/tmp/pgrag-ingest-dev .venv/bin/python benchmarks/ingest.py"
        + (f" --limit {args.limit}" if args.limit else ""),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "corpus": {"documents": len(docs), "chunks": n, "chunk_size": size, "overlap": overlap},
        "embedder": embedder.model_name,
        "embedder_backend": embedder.backend,
        "embedder_alone_chunks_per_s_by_backend": by_backend,
        "min_cosine_between_backends": round(min_cosine, 7),
        "batch_chunks": ingest_mod.BATCH_CHUNKS,
        "chunking_alone_chunks_per_s": round(n / chunk_s),
        "embedder_alone_chunks_per_s": {
            "before": round(n / embed_1, 1),
            "after": round(n / embed_2, 1),
            "mean": round(embed_rate, 1),
        },
        "pipeline_chunks_per_s": round(pipe_rate, 1),
        "pipeline_seconds": round(pipe_s, 1),
        "pipeline_overhead_pct": round(overhead, 1),
        "unchanged_rerun_seconds": round(rerun.seconds, 2),
        "load_rows": m,
        "load_chunks_per_s": loads,
        "streaming": streaming,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "goals": GOALS,
        "goals_met": {
            "overhead": overhead <= GOALS["overhead_pct_max"],
            "copy_stage": loads["stage"]["copy"] >= GOALS["copy_chunks_per_s_min"],
            "copy_chunks_table": loads["pgrag.chunks"]["copy"] >= GOALS["copy_chunks_per_s_min"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
