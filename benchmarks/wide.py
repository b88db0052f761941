"""Recall of the half-precision HNSW graph a wide database (more than 2,000 dimensions) walks.

Above 2,000 dimensions pgvector's HNSW indexes only halfvec: pgrag's graphs index
``embedding::halfvec(N)`` and the walks order by that expression, while the distances they
return are those of the full-precision column. This measures what the half precision and the
graph cost in recall@10 against exact search (numpy, float32, cosine), on vectors of
``--dims`` dimensions (default 3,072, OpenAI's text-embedding-3-large):

* ``clustered``: points around ``--clusters`` random centres (a corpus of a few topics), the
  queries drawn the same way;
* ``latent``: points of a ``--latent``-dimension Gaussian mapped into the ``--dims`` space, plus
  noise (text embeddings have a far lower intrinsic dimension than their size);
* ``isotropic``: independent Gaussian vectors (no structure: the hardest case for any graph,
  at full precision too).

``halfvec_exact`` is the recall of an exact search over the half-precision copies: what the
precision alone costs, the graph aside.

For each set: the index walk alone (``order by embedding::halfvec(N) <=> q::halfvec(N)``, the
statement the walks run) at several ``hnsw.ef_search``, then ``public.vector_search`` (the walk
of the shared graph, its rows ordered by their exact distance) and the exact scan's latency.
Kept small (the machine is shared): a few thousand rows per set.

    .venv/bin/python benchmarks/wide.py            # --rows 3000 --queries 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import insert_ready_document, latency_summary, short_revision  # noqa: E402

from pgrag.db import connect  # noqa: E402
from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "wide.json"
K = 10
EF_SEARCH = (40, 100, 200)
PER_DOCUMENT = 100


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def vector_sets(
    rows: int, queries: int, dims: int, clusters: int, latent: int, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (corpus, queries)}, unit vectors."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dims))

    def clustered(n: int) -> np.ndarray:
        # Noise of the centres' own scale: neighbours share a topic but are not duplicates.
        return unit(centres[rng.integers(0, clusters, n)] + 0.8 * rng.standard_normal((n, dims)))

    mapping = rng.standard_normal((latent, dims))

    def low_rank(n: int) -> np.ndarray:
        return unit(
            rng.standard_normal((n, latent)) @ mapping + 2.0 * rng.standard_normal((n, dims))
        )

    return {
        "clustered": (clustered(rows), clustered(queries)),
        "latent": (low_rank(rows), low_rank(queries)),
        "isotropic": (
            unit(rng.standard_normal((rows, dims))),
            unit(rng.standard_normal((queries, dims))),
        ),
    }


def load(dsn: str, corpus: np.ndarray) -> tuple[list[int], float]:
    """Insert corpus as ready chunks of tenant t0 (in the shared graph); chunk ids in corpus
    order and the seconds it took (each row enters the HNSW graph as it is inserted)."""
    started = time.perf_counter()
    with connect(dsn) as conn:
        for first in range(0, len(corpus), PER_DOCUMENT):
            part = corpus[first : first + PER_DOCUMENT]
            insert_ready_document(
                conn, "t0", f"bench/{first}", ((f"row {first + i}", v) for i, v in enumerate(part))
            )
        conn.commit()
        conn.execute("analyze pgrag.chunks")
        conn.commit()
        ids = [r[0] for r in conn.execute("select id from pgrag.chunks order by id").fetchall()]
    return ids, time.perf_counter() - started


def recall(found: list[list[int]], truth: list[list[int]]) -> float:
    return round(
        float(np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth, strict=True)])), 4
    )


def measure(dsn: str, dims: int, corpus: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    ids, load_s = load(dsn, corpus)
    truth = [[ids[i] for i in np.argsort(-(corpus @ q), kind="stable")[:K]] for q in queries]
    half = f"public.halfvec({dims})"
    walk = (
        f"select id from pgrag.chunks where embedding is not null and in_shared_graph"
        f" order by embedding::{half} <=> %s::{half} limit {K}"
    )
    # Exact search over the half-precision copies (as the graph compares them).
    half_corpus = corpus.astype(np.float16).astype(np.float32)
    half_found = [
        [ids[i] for i in np.argsort(-(half_corpus @ q.astype(np.float16).astype(np.float32)))[:K]]
        for q in queries
    ]
    out: dict[str, Any] = {
        "rows": len(ids),
        "load_seconds": round(load_s, 1),
        "halfvec_exact": {"recall_at_10": recall(half_found, truth)},
    }
    with connect(dsn, autocommit=True) as conn:
        size = conn.execute("select pg_relation_size('pgrag.chunks_embedding_hnsw')").fetchone()
        out["index_mb"] = round(int(size[0]) / 2**20, 1)
        # The index walk itself (on a few rows the planner would rather sort them all).
        conn.execute("set enable_seqscan = off")
        plan = conn.execute("explain (format json) " + walk, (queries[0],)).fetchone()[0]
        assert "chunks_embedding_hnsw" in json.dumps(plan), "the walk does not use the index"
        out["index_walk"] = {}
        for ef in EF_SEARCH:
            conn.execute(f"set hnsw.ef_search = {ef}")
            found = [[r[0] for r in conn.execute(walk, (q,)).fetchall()] for q in queries]
            out["index_walk"][f"ef_search_{ef}"] = {"recall_at_10": recall(found, truth)}
        conn.execute("reset hnsw.ef_search")
        conn.execute("reset enable_seqscan")
        for name, statement in {
            "vector_search": f"select chunk_id, similarity from public.vector_search(%s, {K})",
            "exact_scan": f"select chunk_id, 1 - distance from pgrag.vector_exact(%s, {K},"
            " null, false, null, null, null, null, null)",
        }.items():
            found, ms, error = [], [], 0.0
            for q in queries:
                started = time.perf_counter()
                rows = conn.execute(statement, (q,)).fetchall()
                ms.append((time.perf_counter() - started) * 1000)
                found.append([r[0] for r in rows])
                exact = {ids[i]: float(corpus[i] @ q) for i in range(len(ids))}
                error = max(error, max(abs(r[1] - exact[r[0]]) for r in rows))
            out[name] = {
                "recall_at_10": recall(found, truth),
                "max_similarity_error": float(f"{error:.2g}"),
                **latency_summary(ms),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=3000, help="rows per set (default 3000)")
    parser.add_argument("--queries", type=int, default=100, help="queries per set (default 100)")
    parser.add_argument("--dims", type=int, default=3072, help="dimension (2001-4000)")
    parser.add_argument("--clusters", type=int, default=30, help="centres of the clustered set")
    parser.add_argument(
        "--latent", type=int, default=48, help="dimension of the latent set's source"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not 2000 < args.dims <= 4000:
        parser.error("--dims must be 2001 to 4000 (the halfvec graphs)")
    result: dict[str, Any] = {
        "command": "python benchmarks/wide.py " + " ".join(sys.argv[1:]),
        "git_head": short_revision("HEAD"),
        "measured_at": datetime.now(UTC).isoformat(timespec="minutes"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "dims": args.dims,
        "k": K,
        "sets": {},
    }
    sets = vector_sets(args.rows, args.queries, args.dims, args.clusters, args.latent, args.seed)
    with server(args.admin_dsn, "pgrag-wide-") as admin:
        for name, (corpus, queries) in sets.items():
            dsn = fresh_database(admin, dims=args.dims)
            try:
                result["sets"][name] = entry = measure(dsn, args.dims, corpus, queries)
            finally:
                drop_database(admin, dsn)
            walks = ", ".join(
                f"ef {k.rsplit('_', 1)[1]} {v['recall_at_10']:.3f}"
                for k, v in entry["index_walk"].items()
            )
            print(
                f"{name:10s} recall@10 halfvec exact {entry['halfvec_exact']['recall_at_10']:.3f};"
                f" index walk: {walks}; vector_search"
                f" {entry['vector_search']['recall_at_10']:.3f}"
                f" (p50 {entry['vector_search']['p50_ms']} ms, exact scan"
                f" {entry['exact_scan']['p50_ms']} ms)",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
