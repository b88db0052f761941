"""The order a bulk load's BM25 pass writes its postings in: the word compared as text, or one
integer per posting (the word's rank and the chunk's id), in one run.

``pgrag.bm25_write_sql`` sorts the postings it inserts word by word, each word's chunks in id
order, so that consecutive inserts land on the same leaf pages of the postings' primary key. It
sorts by the word itself (bytewise), then the tenant and the chunk: with hundreds of postings
per word, most comparisons of that sort fall through to the tenant and the chunk, read from
each sorted tuple. The alternative measured here sorts by one integer per posting, the word's
rank among the statement's words (a second pass over the words, ranked) shifted left by 32
bits, or'ed with the low 32 bits of the chunk's id. Both write the same rows in the same
sequence; this measures what each costs as a whole statement.

One scratch database gets ``first_load.py``'s corpus (SciFact abstracts and their rotated
copies, with real MiniLM embeddings) by the bulk path, swaps only: the chunks wait in
``pgrag.bm25_backlog``. Then the pass's statement (``pgrag.index_bulk_load_lexemes`` over every
word, as ``pgrag.finish_bulk_load`` runs it on one connection) runs in each order, each time in
a transaction rolled back after a checkpoint, the orders alternating ``--rounds`` times. The
ranked order is pgrag's statement with its ORDER BY replaced. Results:
``benchmarks/results/postings_order.json``, quoted in docs/benchmarks.md.

    .venv/bin/python benchmarks/postings_order.py [--size 100000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import first_load  # noqa: E402
import latency  # noqa: E402

from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "postings_order.json"
TENANT = first_load.TENANT
# pgrag's order, and the ranked one put in its place.
WORD_ORDER = 'order by p.lexeme collate pg_catalog."C", p.tenant_id, p.chunk_id\n'
RANKED_ORDER = """join (select w.lexeme,
                     row_number() over (order by w.lexeme collate pg_catalog."C") as rank
              from (select distinct t.lexeme
                    from chunk as c cross join lateral unnest(c.fts) as t) as w) as r
          on r.lexeme = p.lexeme
        order by (r.rank << 32) | (p.chunk_id & 4294967295), p.tenant_id, p.chunk_id
"""


def statements(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The pass's statement over every word of the backlog, in each order."""
    row = conn.execute(
        "select pg_catalog.format(pgrag.bm25_write_sql(true, false, false), "
        "pgrag.bulk_load_backlog_sql(%s), 'true')",
        (TENANT,),
    ).fetchone()
    assert row is not None
    word: str = row[0]
    assert word.count(WORD_ORDER) == 1, "pgrag's ORDER BY of the postings was not found"
    return {"word_as_text": word, "rank_and_chunk": word.replace(WORD_ORDER, RANKED_ORDER)}


def timed(conn: psycopg.Connection[Any], sql: str) -> tuple[float, int]:
    """Seconds of one run of ``sql`` (rolled back), and the postings it wrote."""
    conn.execute("checkpoint")
    with conn.transaction(force_rollback=True):
        conn.execute("set local work_mem = '1GB'")  # as pgrag.index_bulk_load_lexemes sets it
        t = time.perf_counter()
        conn.execute(sql.replace("$1", "0"))
        seconds = time.perf_counter() - t
        row = conn.execute(
            "select count(*) from pgrag.bm25_postings where tenant_id = %s", (TENANT,)
        ).fetchone()
    return seconds, int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000, help="chunks loaded")
    parser.add_argument("--rounds", type=int, default=4, help="runs of each order")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    texts, _ = latency.load_scifact()
    texts = texts[:1000]
    vectors = latency.embed_cached("scifact-corpus", [t[: latency.EMBED_CHARS] for t in texts])
    s_texts, s_vecs = latency.synthetic(args.size, texts, vectors, np.random.default_rng(42))
    per = latency.CHUNKS_PER_DOC
    starts = list(range(0, (args.size + per - 1) // per, 500))
    result: dict[str, Any] = {
        "command": "python benchmarks/postings_order.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "size": args.size,
    }
    with server(args.admin_dsn, "pgrag-postings-order-") as admin:
        dsn = fresh_database(admin, "postings_order")
        print(f"== loading {args.size} chunks (bulk path, swaps only)", flush=True)
        with ThreadPoolExecutor(2) as pool:  # two loaders, as first_load.py's bulk path
            list(
                pool.map(
                    lambda j: first_load.load_batches(
                        dsn, s_texts, s_vecs, starts[j::2], 500, True
                    ),
                    range(2),
                )
            )
        seconds: dict[str, list[float]] = {}
        with psycopg.connect(dsn, autocommit=True) as conn:
            sqls = statements(conn)
            for i in range(args.rounds):
                order = list(sqls) if i % 2 == 0 else list(reversed(sqls))
                for name in order:
                    s, postings = timed(conn, sqls[name])
                    seconds.setdefault(name, []).append(round(s, 1))
                    result["postings"] = postings
                    print(f"   {name}: {s:.1f} s ({postings} postings)", flush=True)
        drop_database(admin, dsn)
    result["seconds"] = seconds
    result["median_s"] = {k: round(statistics.median(v), 1) for k, v in seconds.items()}
    result["word_as_text_over_rank_and_chunk"] = round(
        result["median_s"]["word_as_text"] / result["median_s"]["rank_and_chunk"], 2
    )
    result["machine"]["load_avg_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_s", "word_as_text_over_rank_and_chunk")}))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
