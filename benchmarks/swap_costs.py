"""What each part of a bulk load's swap costs: the same load with one more part taken away.

A bulk load's swaps (``pgrag.bulk_replace_document_chunks``) cost about three times their text
parsing at 100k chunks (``benchmarks/first_load.py``). This loads the same chunks
(``first_load.py``'s corpus, loader and batches, one connection) into a fresh database per step,
each step with one more part of ``pgrag.chunks`` removed than the step before: the per-row
triggers one by one, the foreign key, the GIN index on ``fts``, the other secondary indexes,
the statement-level triggers. What a step saves is what that part costs; what is left at the end
is the row itself (heap, TOAST, primary key and unique key) with its parse. The parse alone is
measured on the same texts (``pgrag.chunk_fts`` on one core). Steps run ``--rounds`` times in
alternating order (first to last, then last to first); the medians are reported.

    .venv/bin/python benchmarks/swap_costs.py --size 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import first_load
import latency

from pgrag.testing import drop_database, fresh_database, server

# Each step: what it removes (cumulatively), as statements on a fresh installation. Without
# chunks_in_shared_graph a bulk load's rows would enter the shared graph: the column's default
# then keeps them out, as the trigger did.
STEPS: list[tuple[str, list[str]]] = [
    ("as installed", []),
    (
        "trigger chunks_guard_published",
        ["alter table pgrag.chunks disable trigger chunks_guard_published"],
    ),
    ("trigger chunks_is_public", ["alter table pgrag.chunks disable trigger chunks_is_public"]),
    (
        "trigger chunks_in_shared_graph",
        [
            "alter table pgrag.chunks disable trigger chunks_in_shared_graph",
            "alter table pgrag.chunks alter column in_shared_graph set default false",
        ],
    ),
    (
        "foreign key to documents",
        ["alter table pgrag.chunks drop constraint chunks_tenant_id_document_id_fkey"],
    ),
    ("GIN index on fts", ["drop index pgrag.chunks_fts_gin"]),
    (
        "secondary btree indexes",
        ["drop index pgrag.chunks_document", "drop index pgrag.chunks_outside_shared_graph"],
    ),
    (
        "statement triggers (BM25 backlog, language check)",
        [
            "alter table pgrag.chunks disable trigger chunks_bm25_insert",
            "alter table pgrag.chunks disable trigger chunks_language_insert",
        ],
    ),
]


def swap_seconds(
    admin: str, removed: list[str], texts: list[str], vectors: np.ndarray, batch_docs: int
) -> float:
    """Seconds in swaps of one load into a fresh database with ``removed`` applied."""
    dsn = fresh_database(admin)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in removed:
                conn.execute(statement)
        ndocs = (len(texts) + latency.CHUNKS_PER_DOC - 1) // latency.CHUNKS_PER_DOC
        starts = list(range(0, ndocs, batch_docs))
        _, swaps = first_load.load_batches(dsn, texts, vectors, starts, batch_docs, bulk=True)
        return swaps
    finally:
        drop_database(admin, dsn)


def parse_seconds(admin: str, texts: list[str]) -> float:
    """Seconds ``pgrag.chunk_fts`` takes over ``texts`` on one core."""
    dsn = fresh_database(admin)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create temp table t (content text)")
            with conn.cursor().copy("copy t (content) from stdin") as copy:
                for text in texts:
                    copy.write_row((text,))
            t = time.perf_counter()
            conn.execute("select sum(length(pgrag.chunk_fts('english', content))) from t")
            return time.perf_counter() - t
    finally:
        drop_database(admin, dsn)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=20_000, help="chunks loaded per step")
    parser.add_argument("--batch-docs", type=int, default=500, help="documents per swap")
    parser.add_argument("--base-docs", type=int, default=1000, help="as first_load.py's")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "swap_costs.json"))
    args = parser.parse_args()

    texts, _ = latency.load_scifact()
    texts = texts[: args.base_docs]
    vectors = latency.embed_cached("scifact-corpus", [t[: latency.EMBED_CHARS] for t in texts])
    s_texts, s_vecs = latency.synthetic(args.size, texts, vectors, np.random.default_rng(42))
    seconds: dict[str, list[float]] = {name: [] for name, _ in STEPS}
    parse: list[float] = []
    with server(args.admin_dsn, "pgrag-swap-costs-") as admin:
        for r in range(args.rounds):
            order = list(range(len(STEPS)))
            if r % 2:
                order.reverse()
            for i in order:
                removed = [s for _, statements in STEPS[: i + 1] for s in statements]
                name = STEPS[i][0]
                seconds[name].append(swap_seconds(admin, removed, s_texts, s_vecs, args.batch_docs))
                print(f"round {r + 1}: {name}: {seconds[name][-1]:.1f} s", flush=True)
            parse.append(parse_seconds(admin, s_texts))
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    names = [name for name, _ in STEPS]
    steps = [
        {
            "removed": name,
            "seconds_swaps": round(medians[name], 2),
            "seconds_saved": None if i == 0 else round(medians[names[i - 1]] - medians[name], 2),
            "rounds": [round(v, 2) for v in seconds[name]],
        }
        for i, name in enumerate(names)
    ]
    result: dict[str, Any] = {
        "command": "python benchmarks/swap_costs.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": 2, "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "size": args.size,
        "batch_docs": args.batch_docs,
        "steps": steps,
        "seconds_parse_one_core": round(statistics.median(parse), 2),
    }
    print(json.dumps(result["steps"], indent=1))
    print("parse:", result["seconds_parse_one_core"])
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
