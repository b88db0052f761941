"""What a search box's features cost: pages, quoted phrases and highlights, on SciFact.

Loads the 5,183 SciFact abstracts (one chunk each, real MiniLM vectors cached by
``benchmarks/latency.py``) as tenant ``sf`` into the database ``--dsn`` (pgrag installed; the
rows are loaded once and kept), then times, as that tenant, each query of the first
``--queries`` test claims through: keyword_search and hybrid_search, page 1 and page 2
(``match_offset => 10``), the same with the claim's first two words quoted, and
``highlight`` of the 10 rows hybrid_search returned. One untimed round, then one timed round.

    .venv/bin/python benchmarks/search_box.py --dsn postgresql://... --queries 60

Writes benchmarks/results/search_box.json (``--out``), rendered into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from latency import embed_cached, load_scifact

from pgrag.db import connect


def phrase(query: str) -> str:
    words = query.split()
    return f'"{words[0]} {words[1]}" ' + " ".join(words[2:]) if len(words) > 2 else query


CASES: dict[str, str] = {
    "keyword_search page 1": "select * from keyword_search(%(q)s, 10)",
    "keyword_search page 2": "select * from keyword_search(%(q)s, 10, match_offset => 10)",
    "keyword_search quoted phrase": "select * from keyword_search(%(p)s, 10)",
    "hybrid_search page 1": "select * from hybrid_search(%(q)s, %(e)s::vector, 10)",
    "hybrid_search page 2": "select * from hybrid_search(%(q)s, %(e)s::vector, 10,"
    " match_offset => 10)",
    "hybrid_search quoted phrase": "select * from hybrid_search(%(p)s, %(e)s::vector, 10)",
    "highlight of 10 rows": "select * from highlight(%(ids)s, %(q)s)",
}


def load(dsn: str, texts: list[str], vectors: Any) -> None:
    with connect(dsn) as conn:
        if conn.execute("select count(*) from pgrag.chunks where tenant_id = 'sf'").fetchone()[0]:
            return
        (doc,) = conn.execute(
            "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status,"
            " chunk_count) values ('sf', 'scifact', 'text', 'scifact', 'ready', %s) returning id",
            (len(texts),),
        ).fetchone()
        copy = (
            "copy pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding,"
            " content_sha256) from stdin"
        )
        with conn.cursor().copy(copy) as cp:
            for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
                embedding = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
                sha = hashlib.sha256(text.encode()).hexdigest()
                cp.write_row(("sf", doc, i, text, embedding, sha))
        conn.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "results" / "search_box.json")
    )
    args = parser.parse_args()
    began = datetime.now(UTC)
    texts, queries = load_scifact()
    load(args.dsn, texts, embed_cached("scifact-corpus", texts))
    queries = queries[: args.queries]
    embeddings = embed_cached("scifact-queries", queries)
    out: dict[str, dict[str, float]] = {}
    with connect(args.dsn) as conn:
        conn.execute("select pgrag.set_request_tenant('sf')")
        calls = []
        for query, vector in zip(queries, embeddings, strict=True):
            e = "[" + ",".join(map(str, vector.tolist())) + "]"
            ids = [
                r[0]
                for r in conn.execute(
                    "select chunk_id from hybrid_search(%s, %s::vector, 10)", (query, e)
                ).fetchall()
            ]
            calls.append({"q": query, "p": phrase(query), "e": e, "ids": ids})
        for name, statement in CASES.items():
            times = []
            for timed in (False, True):
                for call in calls:
                    started = time.perf_counter()
                    conn.execute(statement, call).fetchall()
                    if timed:
                        times.append((time.perf_counter() - started) * 1000)
            times.sort()
            out[name] = {
                "p50_ms": round(statistics.median(times), 2),
                "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 2),
            }
            print(
                f"{name:32s} p50 {out[name]['p50_ms']:7.2f} ms  p95 {out[name]['p95_ms']:7.2f} ms"
            )
    with connect(args.dsn) as conn:
        version = conn.execute("show server_version").fetchone()
    result = {
        "benchmark": "search_box",
        "command": "benchmarks/search_box.py --dsn DSN "
        + " ".join(a for a in sys.argv[1:] if not a.startswith("postgres") and a != "--dsn"),
        "started": began.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": os.getloadavg(),
            "python": platform.python_version(),
        },
        "server_version": version[0] if version else None,
        "documents": len(texts),
        "queries": len(queries),
        "calls": out,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
