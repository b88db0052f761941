"""``pgrag import`` from each source shape: chunks per second, in one run on one database.

The same rows (``--size`` chunks of 60 random words, ``--per-doc`` rows per source, random
unit 384-dimension vectors: the import never embeds, so real embeddings would change nothing)
are written into the Supabase guide's ``documents`` table (and a copy of it in another
database, an application's, read with ``--source-dsn``), LangChain's
``langchain_pg_embedding`` (+ ``langchain_pg_collection``), a LlamaIndex ``data_kb`` table,
LangChain4j's ``embeddings``, Haystack's ``haystack_documents``, a
pgai vectorizer's store ``kb_contents_store`` (+ its source table ``kb``), a pg_vectorize job's
``vectorize._embeddings_kb_search`` (+ its ``vectorize.job`` row and source table ``kb_rows``:
one embedding a source row, so one document a chunk) and one appending them to its source
``kb_appended``, a JSONL and a Parquet file; each is then
imported with :func:`pgrag.importer.import_source` into its own tenant: a tenant's first
import, which takes the bulk path (``pgrag.bulk_load_applies``; ``pgrag.finish_bulk_load`` at
the end), and with ``--row-by-row`` the same source again into
another tenant through the ordinary path (``pgrag.replace_document_chunks`` per batch, the BM25
triggers), for comparison. The rate counts the whole import: reading, mapping, token counts,
COPY, swaps and the end of the load (BM25 postings, the tenant's graph). The shapes run in the
order given, so the first one also loads the tokenizer.

    python benchmarks/import_shapes.py [--size 2000] [--per-doc 10] [--row-by-row]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from pgrag.importer import ImportOptions, ImportSummary
from pgrag.importer.run import Importer
from pgrag.importer.sources import Source, open_file, open_table
from pgrag.install.migrator import Migrator
from pgrag.pipeline.embedders import LOCAL_MODEL_NAME, vector_literal
from pgrag.testing import create_database, drop_database, server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "import_shapes.json"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "pi",
    "rho",
]
COLLECTION = "00000000-0000-0000-0000-000000000001"


DOCUMENTS_TABLE = (
    "create table documents (id bigint primary key generated always as identity, "
    "content text, metadata jsonb, fts tsvector generated always as "
    "(to_tsvector('english', content)) stored, embedding vector(384))"
)


def copy_documents_table(dsn: str, app: str) -> None:
    """The ``documents`` table of ``dsn``, rows and all, into database ``app`` (an application's
    own database: pgvector, no pgrag)."""
    with psycopg.connect(dsn) as src, psycopg.connect(app) as dst:
        dst.execute("create extension vector")
        dst.execute(DOCUMENTS_TABLE)
        with (
            src.cursor().copy("copy documents (content, metadata, embedding) to stdout") as out,
            dst.cursor().copy("copy documents (content, metadata, embedding) from stdin") as into,
        ):
            for data in out:
                into.write(data)


def make_pg_vectorize_job(cur: psycopg.Cursor[Any]) -> None:
    """What a pg_vectorize job (``table_method`` join) over ``kb_rows(id, body)`` makes: its
    ``vectorize.job`` row and its embeddings table; and a job that appends its embeddings to
    its source table ``kb_appended``."""
    cur.execute("create table kb_rows (id int primary key, body text)")
    cur.execute("create schema vectorize")
    cur.execute(
        "create table vectorize.job (job_id bigserial, name text not null unique, "
        "index_dist_type text not null default 'pgv_hsnw_cosine', transformer text not null, "
        "params jsonb not null)"
    )
    params = {"schema": "public", "relation": "kb_rows", "columns": ["body"], "primary_key": "id"}
    cur.execute(
        "insert into vectorize.job (name, transformer, params) values ('kb_search', "
        "'sentence-transformers/all-MiniLM-L6-v2', %s)",
        (json.dumps(params),),
    )
    cur.execute(
        "create table vectorize._embeddings_kb_search (id int unique not null references "
        "kb_rows (id), embeddings vector(384) not null, "
        "updated_at timestamptz default now() not null)"
    )
    appended = {**params, "relation": "kb_appended", "table_method": "append"}
    cur.execute(
        "insert into vectorize.job (name, transformer, params) values ('kb_append', "
        "'sentence-transformers/all-MiniLM-L6-v2', %s)",
        (json.dumps(appended),),
    )
    cur.execute(
        "create table kb_appended (id int primary key, body text, "
        "kb_append_embeddings vector(384), kb_append_updated_at timestamptz)"
    )


def make_sources(dsn: str, folder: Path, size: int, per_doc: int) -> None:
    rng = np.random.default_rng(42)
    vecs = rng.standard_normal((size, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts = [" ".join(rng.choice(WORDS, 60)) + f" row{i}" for i in range(size)]
    with psycopg.connect(dsn) as c, c.cursor() as cur:
        cur.execute(DOCUMENTS_TABLE)
        cur.execute(
            "create table langchain_pg_collection (uuid uuid primary key, name varchar, "
            "cmetadata json)"
        )
        cur.execute("insert into langchain_pg_collection values (%s, 'bench', null)", (COLLECTION,))
        cur.execute(
            "create table langchain_pg_embedding (id varchar primary key, collection_id uuid, "
            "embedding vector, document varchar, cmetadata jsonb, custom_id varchar)"
        )
        cur.execute(
            "create table data_kb (id bigserial primary key, text varchar, metadata_ json, "
            "node_id varchar, embedding vector(384))"
        )
        cur.execute(
            "create table embeddings (embedding_id uuid primary key, embedding vector(384), "
            "text text null, metadata json null)"
        )
        cur.execute(
            "create table haystack_documents (id varchar(128) primary key, "
            "embedding vector(384), content text, blob_data bytea, blob_meta json, "
            "blob_mime_type varchar(255), meta json)"
        )
        cur.execute("create table kb (id int primary key, title text)")
        cur.execute(
            "create table kb_contents_store (embedding_uuid uuid not null primary key "
            "default gen_random_uuid(), id int not null references kb (id), chunk_seq int "
            "not null, chunk text not null, embedding vector(384) not null, "
            "unique (id, chunk_seq))"
        )
        cur.execute(
            "insert into kb select d, 'document ' || d from generate_series(0, %s) as d",
            ((size - 1) // per_doc,),
        )
        make_pg_vectorize_job(cur)
        for i in range(size):
            v, src = vector_literal(vecs[i]), f"doc{i // per_doc}"
            meta = json.dumps({"source": src, "start_index": i})
            cur.execute(
                "insert into documents (content, metadata, embedding) values (%s, %s, %s)",
                (texts[i], meta, v),
            )
            cur.execute(
                "insert into langchain_pg_embedding values (%s, %s, %s, %s, %s, null)",
                (f"id{i}", COLLECTION, v, texts[i], meta),
            )
            cur.execute(
                "insert into data_kb (text, metadata_, node_id, embedding) values (%s, %s, %s, %s)",
                (texts[i], json.dumps({"doc_id": src}), f"n{i}", v),
            )
            cur.execute(
                "insert into embeddings values (gen_random_uuid(), %s, %s, %s)",
                (v, texts[i], json.dumps({"file_name": src, "index": str(i % per_doc)})),
            )
            cur.execute(
                "insert into haystack_documents (id, embedding, content, meta) "
                "values (%s, %s, %s, %s)",
                (f"h{i}", v, texts[i], json.dumps({"file_path": src, "split_id": i % per_doc})),
            )
            cur.execute(
                "insert into kb_contents_store (id, chunk_seq, chunk, embedding) "
                "values (%s, %s, %s, %s)",
                (i // per_doc, i % per_doc, texts[i], v),
            )
            cur.execute("insert into kb_rows values (%s, %s)", (i, texts[i]))
            cur.execute(
                "insert into vectorize._embeddings_kb_search (id, embeddings) values (%s, %s)",
                (i, v),
            )
            cur.execute("insert into kb_appended values (%s, %s, %s, now())", (i, texts[i], v))
    records = [
        {"content": texts[i], "embedding": vecs[i].tolist(), "source_uri": f"doc{i // per_doc}"}
        for i in range(size)
    ]
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    pq.write_table(pa.Table.from_pylist(records), folder / "rows.parquet")


def run_import(dsn: str, source: Source, tenant: str, bulk: bool) -> ImportSummary:
    """``pgrag import`` of ``source`` into ``tenant``; ``bulk`` False: the ordinary path."""
    importer = Importer(dsn, source, ImportOptions(tenant=tenant, model=LOCAL_MODEL_NAME))
    if not bulk:
        importer.bulk = False
    try:
        return importer.run()
    finally:
        importer.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=2000, help="rows of each source")
    parser.add_argument("--per-doc", type=int, default=10, help="rows sharing a source")
    parser.add_argument(
        "--row-by-row", action="store_true", help="also import each source by the ordinary path"
    )
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "command": "python benchmarks/import_shapes.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "size": args.size,
        "per_doc": args.per_doc,
        "shapes": {},
    }
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(server(args.admin_dsn, "pgrag-import-"))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        dsn = create_database(admin)
        stack.callback(drop_database, admin, dsn)  # the server may be the user's
        Migrator(dsn).migrate(384)
        folder = Path(tmp)
        make_sources(dsn, folder, args.size, args.per_doc)
        app = create_database(admin)
        stack.callback(drop_database, admin, app)
        copy_documents_table(dsn, app)
        shapes: dict[str, Callable[[], Source]] = {
            "documents": lambda: open_table(dsn, "documents"),
            "documents-other-database": lambda: open_table(app, "documents", own_database=False),
            "langchain": lambda: open_table(dsn, "langchain_pg_embedding"),
            "llamaindex": lambda: open_table(dsn, "data_kb"),
            "langchain4j": lambda: open_table(dsn, "embeddings"),
            "haystack": lambda: open_table(dsn, "haystack_documents"),
            "pgai": lambda: open_table(dsn, "kb_contents_store"),
            "pg_vectorize": lambda: open_table(dsn, "vectorize._embeddings_kb_search"),
            "pg_vectorize-append": lambda: open_table(dsn, "kb_appended"),
            "jsonl": lambda: open_file(folder / "rows.jsonl"),
        }
        if (folder / "rows.parquet").exists():
            shapes["parquet"] = lambda: open_file(folder / "rows.parquet")
        for name, source in shapes.items():
            for bulk in (True, False) if args.row_by_row else (True,):
                started = time.perf_counter()
                s = run_import(dsn, source(), name if bulk else f"{name}-rows", bulk)
                seconds = time.perf_counter() - started
                key = "shapes" if bulk else "row_by_row"
                result.setdefault(key, {})[name] = {
                    "chunks": s.chunks_imported,
                    "documents": s.documents_new,
                    "bulk_load": s.bulk_load,
                    "seconds": round(seconds, 2),
                    "chunks_per_s": round(s.chunks_imported / seconds),
                }
                print(f"{name:10s} {key:10s} {result[key][name]}", flush=True)
    result["machine"]["load_avg_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
