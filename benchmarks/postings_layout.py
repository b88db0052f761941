"""BM25 postings a row each (today's table) or in blocks: what each costs to build and to read.

The question this answers before any migration: how much of a bulk load's postings pass
(``benchmarks/first_load.py``: the largest phase at 100k chunks) a blocked layout would save,
and what reading blocks costs a keyword search. Both layouts are built in one scratch database
from the same text-search vectors (``pgrag.chunk_fts`` over ``first_load.py``'s corpus: SciFact
abstracts and their rotated copies), in one run:

* ``rows``: ``pgrag.bm25_postings``' own definition (``LIKE ... INCLUDING ALL``: one row per chunk
  and word, the primary key covering tf and length), written as a bulk load's pass writes it
  (one insert, word first, bytewise);
* ``rows_index_after``: the same table without its key, written in no order, then keyed (one
  ``ADD PRIMARY KEY``: a sorted build, as a partition of its own loaded before it is indexed
  would be);
* ``blocks``: one row per word and block of up to ``--block`` postings in chunk order (first
  chunk id as the key; arrays of chunk ids, tf and lengths), written by one insert of the same
  postings grouped.

Each is then vacuumed (a search's index-only scans need the visibility map), and its build
time (insert, index, vacuum), WAL and size are reported. Reading: ``--queries`` SciFact
queries scored exhaustively (BM25, k1 1.2, b 0.75; document frequencies from one shared
lexicon) on rows and blocks, interleaved, top 10 compared. pgrag's keyword arm prunes with
term bounds (MaxScore) where this reads every posting of the query's words: the read figures
compare layouts, not pgrag's search speed.

    .venv/bin/python benchmarks/postings_layout.py --size 100000 --queries 300
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import latency
from common import latency_summary

from pgrag.testing import drop_database, fresh_database, server

TENANT = "big"
K1, B = 1.2, 0.75

# Each layout: its table, the statement that creates it, the one insert that writes every
# posting, and (for the index built after the rows) the statement that indexes them.
ROWS_INSERT = (
    "insert into {table} (tenant_id, lexeme, chunk_id, tf, doc_len) "
    "select %(t)s, t.lexeme, s.id, cardinality(t.positions), s.len "
    "from src as s cross join lateral unnest(s.fts) as t {order}"
)
LAYOUTS: dict[str, dict[str, str]] = {
    "rows": {
        "table": "pa",
        "create": "create table pa (like pgrag.bm25_postings including all)",
        "insert": ROWS_INSERT.format(table="pa", order='order by t.lexeme collate "C", s.id'),
    },
    "rows_index_after": {
        "table": "pn",
        "create": "create table pn (like pgrag.bm25_postings including defaults)",
        "insert": ROWS_INSERT.format(table="pn", order=""),
        "index": "alter table pn add primary key (tenant_id, lexeme, chunk_id) "
        "include (tf, doc_len)",
    },
    "blocks": {
        "table": "pb",
        "create": "create table pb (tenant_id text not null, lexeme text not null, first_chunk "
        "bigint not null, chunk_ids bigint[] not null, tfs integer[] not null, doc_lens "
        "integer[] not null, primary key (tenant_id, lexeme, first_chunk))",
        "insert": "insert into pb (tenant_id, lexeme, first_chunk, chunk_ids, tfs, doc_lens) "
        "select %(t)s, p.lexeme, min(p.id), array_agg(p.id order by p.id), "
        "array_agg(p.tf order by p.id), array_agg(p.len order by p.id) "
        'from (select t.lexeme collate "C" as lexeme, s.id, cardinality(t.positions) as tf, '
        '      s.len, (row_number() over (partition by t.lexeme collate "C" order by s.id) - 1)'
        "      / %(block)s as blk "
        "      from src as s cross join lateral unnest(s.fts) as t) as p "
        "group by p.lexeme, p.blk order by p.lexeme, p.blk",
    },
}

# The scoring is written once; only where the postings come from differs.
SCORE = (
    (
        "with q as (select l.lexeme, ln(1 + (%(n)s - l.df + 0.5) / (l.df + 0.5)) as idf "
        "           from lex as l where l.lexeme = any (%(lexemes)s)) "
        "select p.chunk_id, round(sum(q.idf * p.tf * {k1p} / (p.tf + {k1} * (1 - {b} + {b} * "
        "p.doc_len / %(avgdl)s)))::numeric, 6) as score "
        "from q join lateral ({postings}) as p on true "
        "group by p.chunk_id order by score desc, p.chunk_id limit 10"
    )
    .replace("{k1p}", str(K1 + 1))
    .replace("{k1}", str(K1))
    .replace("{b}", str(B))
)
POSTINGS = {
    "rows": "select r.chunk_id, r.tf, r.doc_len from pa as r "
    "where r.tenant_id = %(t)s and r.lexeme = q.lexeme",
    "blocks": "select u.chunk_id, u.tf, u.doc_len from pb as r "
    "cross join lateral unnest(r.chunk_ids, r.tfs, r.doc_lens) as u (chunk_id, tf, doc_len) "
    "where r.tenant_id = %(t)s and r.lexeme = q.lexeme",
}


def wal_lsn(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("select pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def source(conn: psycopg.Connection[Any], texts: list[str]) -> dict[str, Any]:
    """The chunks' text-search vectors and BM25 lengths, parsed once (table ``src``), and the
    lexicon both layouts score with (``lex``)."""
    conn.execute("create unlogged table txt (id bigint, content text)")
    with conn.cursor().copy("copy txt (id, content) from stdin") as copy:
        for i, text in enumerate(texts, 1):
            copy.write_row((i, text))
    t = time.perf_counter()
    conn.execute(
        "create unlogged table src as select x.id, x.fts, (select coalesce(sum(cardinality("
        "u.positions)) filter (where u.weights[1] <> 'A'), 0)::integer from unnest(x.fts) as u)"
        " as len from (select id, pgrag.chunk_fts('english', content) as fts from txt) as x"
    )
    parse_s = time.perf_counter() - t
    conn.execute(
        "create unlogged table lex as select t.lexeme, count(*) as df from src as s "
        "cross join lateral unnest(s.fts) as t group by t.lexeme"
    )
    conn.execute("create index on lex (lexeme)")
    conn.execute("analyze src; analyze lex")
    # What every layout does first: make the postings from the vectors and sort them by word.
    t = time.perf_counter()
    conn.execute(
        "select count(*) from (select t.lexeme, s.id from src as s cross join lateral"
        ' unnest(s.fts) as t order by t.lexeme collate "C", s.id offset 0) as p'
    )
    sorted_s = time.perf_counter() - t
    row = conn.execute(
        "select count(*), avg(len), (select sum(df) from lex), (select count(*) from lex) from src"
    ).fetchone()
    assert row is not None
    return {
        "chunks": row[0],
        "avgdl": float(row[1]),
        "postings": int(row[2]),
        "words": row[3],
        "parse_s_one_core": round(parse_s, 1),
        "seconds_postings_made_and_sorted": round(sorted_s, 1),
    }


def build(conn: psycopg.Connection[Any], layout: str, block: int) -> dict[str, Any]:
    spec = LAYOUTS[layout]
    table = spec["table"]
    conn.execute(spec["create"])
    conn.execute("checkpoint")
    wal, t = wal_lsn(conn), time.perf_counter()
    conn.execute(spec["insert"], {"t": TENANT, "block": block})
    out: dict[str, Any] = {"seconds_insert": round(time.perf_counter() - t, 1)}
    if "index" in spec:
        t = time.perf_counter()
        conn.execute(spec["index"])
        out["seconds_index"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    conn.execute(f"vacuum (analyze) {table}")
    out["seconds_vacuum"] = round(time.perf_counter() - t, 1)
    out["wal_mb"] = round((wal_lsn(conn) - wal) / 2**20)
    size = f"select count(*), pg_total_relation_size('{table}') from {table}"
    row = conn.execute(size).fetchone()
    assert row is not None
    out["rows"], out["size_mb"] = row[0], round(row[1] / 2**20)
    out["seconds_total"] = round(sum(v for k, v in out.items() if k.startswith("seconds_")), 1)
    return out


def read(
    conn: psycopg.Connection[Any], queries: list[str], stats: dict[str, Any]
) -> dict[str, Any]:
    """Every query scored on both layouts, interleaved (untimed once, then timed)."""
    ms: dict[str, list[float]] = {"rows": [], "blocks": []}
    same = 0
    for i, query in enumerate(queries):
        row = conn.execute(
            "select array_agg(distinct t.lexeme) from unnest(to_tsvector('english', %s)) as t",
            (query,),
        ).fetchone()
        lexemes = row[0] if row and row[0] else []
        params = {"t": TENANT, "n": stats["chunks"], "avgdl": stats["avgdl"], "lexemes": lexemes}
        order = ("rows", "blocks") if i % 2 == 0 else ("blocks", "rows")
        tops = {}
        for layout in order:
            sql = SCORE.replace("{postings}", POSTINGS[layout])
            conn.execute(sql, params).fetchall()
            t = time.perf_counter()
            tops[layout] = conn.execute(sql, params).fetchall()
            ms[layout].append((time.perf_counter() - t) * 1000)
        same += tops["rows"] == tops["blocks"]
    out: dict[str, Any] = {layout: latency_summary(v) for layout, v in ms.items()}
    out["queries"] = len(queries)
    out["same_top10"] = same
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000, help="chunks")
    parser.add_argument("--base-docs", type=int, default=1000, help="as first_load.py's")
    parser.add_argument("--block", type=int, default=128, help="postings per block")
    parser.add_argument("--queries", type=int, default=300, help="SciFact queries read")
    parser.add_argument("--admin-dsn", help="a server to use (default: a temporary cluster)")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "postings_layout.json")
    )
    args = parser.parse_args()

    texts, queries = latency.load_scifact()
    base = texts[: args.base_docs]
    corpus = [latency.variant(base[i % len(base)], i // len(base)) for i in range(args.size)]
    result: dict[str, Any] = {
        "command": "python benchmarks/postings_layout.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": 2, "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "size": args.size,
        "block": args.block,
    }
    with server(args.admin_dsn) as admin:
        dsn = fresh_database(admin)
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("set work_mem = '1GB'")
                stats = source(conn, corpus)
                result["source"] = stats
                print("source:", stats, flush=True)
                for layout in LAYOUTS:
                    result[layout] = build(conn, layout, args.block)
                    print(f"{layout}:", result[layout], flush=True)
                conn.execute("drop table pn")  # read as rows: the same table
                result["read"] = read(conn, queries[: args.queries], stats)
                print("read:", result["read"], flush=True)
        finally:
            drop_database(admin, dsn)
    rows, blocks = result["rows"], result["blocks"]
    result["ratios"] = {
        "build_rows_over_blocks": round(rows["seconds_total"] / blocks["seconds_total"], 2),
        "build_rows_over_index_after": round(
            rows["seconds_total"] / result["rows_index_after"]["seconds_total"], 2
        ),
        "wal_rows_over_blocks": round(rows["wal_mb"] / max(blocks["wal_mb"], 1), 1),
        "size_rows_over_blocks": round(rows["size_mb"] / max(blocks["size_mb"], 1), 1),
        "read_p50_blocks_over_rows": round(
            result["read"]["blocks"]["p50_ms"] / result["read"]["rows"]["p50_ms"], 2
        ),
    }
    print("ratios:", result["ratios"])
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
