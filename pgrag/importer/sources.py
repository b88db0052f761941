"""Sources of rows that already carry embeddings: a table of a known shape, JSONL, Parquet.

Every source yields :class:`SourceRow` values **ordered by document**: the rows of one
document (same ``source``) next to each other, in chunk order. A table is read by one SQL
statement that maps its shape's columns to pgrag's and sorts (a server-side cursor streams
it); a file is read once and sorted the same way with bounded memory: rows are held up to
``RUN_BYTES`` at a time, each such run sorted and, when the file holds more than one,
written to a private temporary folder (``TMPDIR``) and the runs merged as they are read back
(:class:`DocumentOrder`), so a file of any size and any row order imports in the memory of a
few runs' rows.

Shapes of a table, told apart by their columns (docs/ingest.md, "Importing existing
embeddings"), with the rule that groups rows into documents:

* ``documents`` (the Supabase guides' and LangChain's SupabaseVectorStore table: ``content``
  (``body`` in the semantic-search guide), ``embedding``, optional ``metadata``, ``fts``,
  ``id``; also ``source_uri``, ``title``, ``page`` columns if present): the ``source_uri``
  column, else ``metadata.source_uri``, else ``metadata.source``;
* ``langchain`` (``langchain_pg_embedding``: ``document``, ``embedding``, ``cmetadata``,
  ``custom_id``, ``collection_id``; the collection's name from ``langchain_pg_collection``):
  ``cmetadata.source``, else ``custom_id``;
* ``llamaindex`` (PGVectorStore's ``data_<name>``: ``text``, ``metadata_``, ``node_id``,
  ``embedding``): ``metadata_.doc_id``, else ``ref_doc_id``, else ``document_id``;
* ``pgai`` (a pgai vectorizer's ``<name>_store``: ``embedding_uuid``, the source table's key,
  ``chunk_seq``, ``chunk``, ``embedding``): the source row, by the store's unique key, in
  ``chunk_seq`` order; its metadata is that key, its title the source table's ``title``;
* ``pg_vectorize`` (a pg_vectorize job's ``vectorize._embeddings_<job>``: the source table's
  key, ``embeddings``, ``updated_at``; the job's row in ``vectorize.job`` names the source table
  and the columns it embedded): one document per source row, its text those columns joined as
  pg_vectorize joined them, its metadata the key, its title the source table's ``title``.

Rows without any of these are one document each. Within a document rows are ordered by page,
then ``start_index`` / ``start_char_idx`` / ``chunk_index`` of their metadata, then id.

The table is pgrag's own database's, or another database's (``--source-dsn``: the database of
an existing application, which needs neither pgrag nor, for embeddings stored as arrays,
pgvector); it is read in read-only transactions, and a document without a source is named
after the table, prefixed with that other database's server and name (``host[:port]/dbname.``:
two applications' databases of one name, as every Supabase project's ``postgres``, stay apart).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import heapq
import itertools
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import psycopg
from psycopg import sql

from pgrag.db import connect, redact
from pgrag.errors import ConfigError, MissingExtra, NotInstalled
from pgrag.importer.checks import (
    MAX_CHUNK_CHARS,
    MAX_PAGE,
    as_float32,
    content_problem,
    kind_of,
    label_problem,
    metadata_problem,
    page_problem,
    text_problem,
    whole_number,
)
from pgrag.progress import Progress

FILE_COLUMNS = ("id", "content", "embedding", "metadata", "source_uri", "title", "page")
READ_BATCH = 2000
RUN_BYTES = 32 * 2**20  # rows of a file held in memory at a time while it is put in order
MERGE_RUNS = 64  # runs merged at once (open files); more are merged in several passes
UNMAPPED_LISTED = 100  # names of a file's keys pgrag does not map, reported (up to 100 characters)
MAX_LINE_BYTES = 4 * 2**20  # a longer JSONL line is refused unread: a chunk is far smaller
RUNS_PREFIX = "pgrag-import-"  # + "<pid>-": the folder of one import's sorted runs


@dataclass
class SourceRow:
    """One row of a source, mapped to pgrag's names: ``row_id`` its own id ("" if it has
    none), ``position`` where it is (a file's ``line N`` / ``row N``, a table's id);
    ``problem``: why it cannot be read."""

    row_id: str
    content: Any
    embedding: Any
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    title: str | None = None
    page: int | None = None
    start: int | None = None
    problem: str | None = None
    position: str = ""
    packed: str | None = None  # the metadata as JSON text while the row waits to be sorted


@dataclass
class Source:
    """A source opened for reading: what it is, what it maps and what it leaves out."""

    label: str  # e.g. "table public.documents (documents)", "file corpus.jsonl"
    shape: str  # documents, langchain, llamaindex, langchain4j, haystack, pgai, pg_vectorize,
    # jsonl, parquet
    uri_prefix: str  # a document without a source is "<prefix>#<row id>"
    unmapped: list[str]
    ignored: dict[str, str]  # column -> why it is not needed
    rows: Iterable[SourceRow]
    rows_total: int | None = None  # when known before reading (a file: counted as sorted)
    rows_estimated: bool = False  # rows_total is the catalog's estimate (a table)
    model: str | None = None  # the model the source says made its embeddings, when it says

    discard: Callable[[], None] | None = None  # removes what reading left (a file's runs)

    def close(self) -> None:
        """Stop reading: a table's cursor closed, a file's sorted runs removed."""
        close = getattr(self.rows, "close", None)
        if close is not None:
            close()
        if self.discard is not None:
            self.discard()


# -- tables --------------------------------------------------------------------------------------


def _int_text(text: str) -> str:
    """SQL: the text ``text`` as an integer when it is a whole number (``3``, ``3.0``), else
    null: never a cast that fails on a row's value."""
    return f"case when ({text}) ~ '^[0-9]{{1,15}}([.]0*)?$' then ({text})::numeric::bigint end"


def _int_of(expr: str, key: str) -> str:
    """SQL: ``expr->>key`` as an integer when it is one, else null."""
    return _int_text(f"{expr} ->> '{key}'")


@dataclass(frozen=True)
class TableShape:
    """How one shape's columns map to pgrag's (SQL expressions over the table alias ``r``)."""

    name: str
    needs: tuple[str, ...]
    row_id: str
    content: str
    metadata: str
    source: str
    title: str
    page: str
    start: str
    order: str
    used: tuple[str, ...]
    ignored: dict[str, str]
    join: str = ""
    metadata_column: str = "metadata"  # read as JSON: it must be json or jsonb
    embedding_column: str = "embedding"
    model: str | None = None  # the model that made the embeddings, when the source records it


# The metadata keys that name a row's document and page, in order, when the row has no column
# of its own for them (a table in the documents shape, a file): Spring AI's PDF readers name
# the file (file_name) and the page (page_number).
SOURCE_KEYS = ("source_uri", "source", "file_name")
PAGE_KEYS = ("page", "page_number")


def _documents_shape(columns: set[str]) -> TableShape:
    meta = "coalesce(r.metadata::jsonb, '{}'::jsonb)" if "metadata" in columns else "'{}'::jsonb"
    has = columns.__contains__
    return TableShape(
        name="documents",
        needs=("content", "embedding"),
        row_id="r.id::text" if has("id") else "null::text",
        # the semantic-search guide's table names it body (with a title column)
        content="r.content" if has("content") else "r.body",
        metadata=meta,
        source=f"coalesce({'r.source_uri::text, ' if has('source_uri') else ''}"
        + ", ".join(f"{meta} ->> '{key}'" for key in SOURCE_KEYS)
        + ")",
        title=f"coalesce({'r.title::text, ' if has('title') else ''}{meta} ->> 'title')",
        page=f"coalesce({_int_text('r.page::text') + ', ' if has('page') else ''}"
        + ", ".join(_int_of(meta, key) for key in PAGE_KEYS)
        + ")",
        start=f"coalesce({_int_of(meta, 'start_index')}, {_int_of(meta, 'chunk_index')})",
        order="r.id" if has("id") else "r.ctid",
        used=(
            *("id", "content" if has("content") else "body", "embedding", "metadata"),
            *("source_uri", "title", "page"),
        ),
        ignored={"fts": "pgrag keeps its own BM25 index of the content"},
    )


def _langchain_shape(columns: set[str], collection_table: str | None) -> TableShape:
    meta = "coalesce(r.cmetadata::jsonb, '{}'::jsonb)"
    id_column = "id" if "id" in columns else "uuid"
    custom = "r.custom_id::text" if "custom_id" in columns else "null::text"
    join = ""
    metadata = meta
    if collection_table is not None:
        join = f"left join {collection_table} as lc on lc.uuid = r.collection_id"
        metadata = f"{meta} || jsonb_strip_nulls(jsonb_build_object('collection', lc.name))"
    return TableShape(
        name="langchain",
        needs=("document", "embedding"),
        row_id=f"r.{id_column}::text",
        content="r.document",
        metadata=metadata,
        source=f"coalesce({meta} ->> 'source', {custom})",
        title=f"{meta} ->> 'title'",
        page=_int_of(meta, "page"),
        start=f"coalesce({_int_of(meta, 'start_index')}, {_int_of(meta, 'chunk_index')})",
        order=f"r.{id_column}::text",
        used=("id", "uuid", "document", "embedding", "cmetadata", "custom_id", "collection_id"),
        ignored={},
        join=join,
        metadata_column="cmetadata",
    )


def _llamaindex_shape() -> TableShape:
    raw = "coalesce(r.metadata_::jsonb, '{}'::jsonb)"
    # the node's start_char_idx, found in its JSON text (never parsed: a row's text that is
    # not JSON must not stop the statement)
    start_char = _int_text(
        f"substring({raw} ->> '_node_content' from '\"start_char_idx\": *([0-9]{{1,15}})')"
    )
    return TableShape(
        name="llamaindex",
        needs=("text", "embedding", "metadata_"),
        row_id="r.node_id::text",
        # _node_content repeats the text (and _node_type its class): not kept.
        content="r.text",
        metadata=f"{raw} - '_node_content' - '_node_type'",
        source=f"coalesce({raw} ->> 'doc_id', {raw} ->> 'ref_doc_id', {raw} ->> 'document_id')",
        title=f"coalesce({raw} ->> 'title', {raw} ->> 'file_name')",
        page=f"coalesce({_int_of(raw, 'page')}, {_int_of(raw, 'page_label')})",
        start=f"coalesce({start_char}, {_int_of(raw, 'chunk_index')})",
        order="r.id",
        used=("id", "text", "embedding", "metadata_", "node_id"),
        ignored={"text_search_tsv": "pgrag keeps its own BM25 index of the content"},
        metadata_column="metadata_",
    )


HAYSTACK_COLUMNS = ("content", "embedding", "meta", "blob_data")


def _haystack_shape() -> TableShape:
    """Haystack's PgvectorDocumentStore table (``haystack_documents``): ``id``, ``content``,
    ``embedding``, ``meta`` and the ByteStream columns; its converters name the file
    (``file_path``), its DocumentSplitter the parent document (``source_id``), the page
    (``page_number``) and where a split starts (``split_idx_start``, ``split_id``)."""
    meta = "coalesce(r.meta::jsonb, '{}'::jsonb)"
    blob = "the bytes Haystack kept beside a row's text (a ByteStream): pgrag imports the text"
    return TableShape(
        name="haystack",
        needs=HAYSTACK_COLUMNS,
        row_id="r.id::text",
        content="r.content",
        # the parent's id kept as parent_id: a chunk's source_id is the row's own id
        metadata=f"({meta} - 'source_id') "
        f"|| jsonb_strip_nulls(jsonb_build_object('parent_id', {meta} -> 'source_id'))",
        source=f"coalesce({meta} ->> 'file_path', {meta} ->> 'source_id')",
        title=f"{meta} ->> 'title'",
        page=f"coalesce({_int_of(meta, 'page_number')}, {_int_of(meta, 'page')})",
        start=f"coalesce({_int_of(meta, 'split_idx_start')}, {_int_of(meta, 'split_id')})",
        order="r.id::text",
        used=("id", "content", "embedding", "meta"),
        ignored={
            "blob_data": blob,
            "blob_meta": blob,
            "blob_mime_type": blob,
            "dataframe": "older Haystack's table column, not text: pgrag imports the text",
        },
        metadata_column="meta",
    )


LANGCHAIN4J_COLUMNS = ("embedding_id", "text", "embedding")


def _langchain4j_shape(columns: set[str]) -> TableShape:
    """LangChain4j's PgVectorEmbeddingStore table: ``embedding_id``, ``embedding``, ``text``
    and, stored as one JSON value (its default), ``metadata``; its document loaders name the
    file (``absolute_directory_path`` and ``file_name``) or ``url``, its splitters number the
    segments of a document (``index``)."""
    meta = "coalesce(r.metadata::jsonb, '{}'::jsonb)" if "metadata" in columns else "'{}'::jsonb"
    path = f"({meta} ->> 'absolute_directory_path') || '/' || ({meta} ->> 'file_name')"
    return TableShape(
        name="langchain4j",
        needs=LANGCHAIN4J_COLUMNS,
        row_id="r.embedding_id::text",
        content="r.text",
        metadata=meta,
        source=f"coalesce({path}, {meta} ->> 'url', {meta} ->> 'source', {meta} ->> 'file_name')",
        title=f"coalesce({meta} ->> 'title', {meta} ->> 'file_name')",
        page=_int_of(meta, "page"),
        start=_int_of(meta, "index"),
        order="r.embedding_id::text",
        used=("embedding_id", "text", "embedding", "metadata"),
        ignored={},
    )


PGAI_COLUMNS = ("embedding_uuid", "chunk_seq", "chunk", "embedding")


@dataclass(frozen=True)
class PgaiStore:
    """What the catalog says of a pgai vectorizer's store table: the source row's key columns
    (its unique key but ``chunk_seq``) and, when a foreign key names the source table and that
    table has a ``title`` column, the join that reads it."""

    keys: tuple[str, ...]
    title_join: str | None = None


def _pgai_store(conn: psycopg.Connection[Any], schema: str, name: str) -> PgaiStore:
    """The key of a pgai store table (``unique (<source key>, chunk_seq)``, as pgai makes it),
    and the join to its source table's title; ConfigError for a relation without that key
    (pgai's view, which joins the store with the whole source row)."""
    table = sql.Identifier(schema, name).as_string(conn)
    row = conn.execute(
        "select (select pg_catalog.array_agg(a.attname::text order by k.n) "
        "        from pg_catalog.unnest(i.indkey) with ordinality as k(attnum, n) "
        "        join pg_catalog.pg_attribute as a on a.attrelid = i.indrelid "
        "         and a.attnum = k.attnum where a.attname <> 'chunk_seq') "
        "from pg_catalog.pg_index as i join pg_catalog.pg_attribute as s "
        "  on s.attrelid = i.indrelid and s.attname = 'chunk_seq' "
        "where i.indrelid = %s::regclass and i.indisunique and s.attnum = any (i.indkey) "
        "  and pg_catalog.cardinality(i.indkey::int2[]) > 1 "
        "order by i.indexrelid limit 1",
        (table,),
    ).fetchone()
    if row is None or not row[0]:
        raise ConfigError(
            f"{schema}.{name} has pgai's columns ({', '.join(PGAI_COLUMNS)}) but not the unique "
            "key (<source key>, chunk_seq) of pgai's store table: import the store table itself "
            "(<name>_store, which pgai's view joins with the source rows)."
        )
    keys = tuple(str(k) for k in row[0])
    found = conn.execute(
        "select pg_catalog.format('left join %%I.%%I as src on %%s', "
        "  (select n.nspname from pg_catalog.pg_class as c join pg_catalog.pg_namespace as n "
        "   on n.oid = c.relnamespace where c.oid = f.confrelid), "
        "  (select c.relname from pg_catalog.pg_class as c where c.oid = f.confrelid), "
        "  (select pg_catalog.string_agg(pg_catalog.format('src.%%I = r.%%I', pa.attname, "
        "   ca.attname), ' and ') "
        "   from rows from (pg_catalog.unnest(f.conkey), pg_catalog.unnest(f.confkey)) as k(c, p) "
        "   join pg_catalog.pg_attribute as ca on ca.attrelid = f.conrelid and ca.attnum = k.c "
        "   join pg_catalog.pg_attribute as pa on pa.attrelid = f.confrelid and pa.attnum = k.p)) "
        "from pg_catalog.pg_constraint as f "
        "where f.conrelid = %s::regclass and f.contype = 'f' and exists ("
        "  select 1 from pg_catalog.pg_attribute as t where t.attrelid = f.confrelid "
        "  and t.attname = 'title' and not t.attisdropped) "
        "order by f.oid limit 1",
        (table,),
    ).fetchone()
    return PgaiStore(keys, str(found[0]) if found and found[0] else None)


def _pgai_shape(store: PgaiStore, label: str) -> TableShape:
    """pgai's vectorizer store (``embedding_uuid``, the source row's key, ``chunk_seq``,
    ``chunk``, ``embedding``): one document per source row, named ``<label>#<key>=<value>``."""
    keys = [sql.Identifier(k).as_string(None) for k in store.keys]
    named = " || '&' || ".join(
        f"{sql.Literal(k + '=').as_string(None)} || r.{q}::text"
        for k, q in zip(store.keys, keys, strict=True)
    )
    pairs = ", ".join(
        f"{sql.Literal(k).as_string(None)}, r.{q}" for k, q in zip(store.keys, keys, strict=True)
    )
    return TableShape(
        name="pgai",
        needs=PGAI_COLUMNS,
        row_id="r.embedding_uuid::text",
        content="r.chunk",
        # the source row's key, to find it again
        metadata=f"jsonb_build_object({pairs})",
        source=f"{sql.Literal(label + '#').as_string(None)} || {named}",
        title="src.title" if store.title_join else "null::text",
        page="null::bigint",
        start="r.chunk_seq",
        order="r.embedding_uuid::text",
        used=(*PGAI_COLUMNS, *store.keys),
        ignored={},
        join=store.title_join or "",
    )


PG_VECTORIZE_COLUMNS = ("embeddings", "updated_at")
PG_VECTORIZE_PREFIX = "_embeddings_"  # + the job's name
PG_VECTORIZE_SCHEMA = "vectorize"  # where pg_vectorize keeps its jobs (vectorize.job)
# a job of table_method append keeps its embeddings in its source table: <job> + these columns
APPENDED_COLUMNS = ("_embeddings", "_updated_at")


@dataclass(frozen=True)
class PgVectorizeJob:
    """A pg_vectorize job as its ``vectorize.job`` row names it (``params``: ``schema``,
    ``relation`` (``table`` before 0.22), ``columns``, ``primary_key``, ``table_method``;
    ``transformer``). ``appended``: its embeddings are columns of the source table itself."""

    name: str
    source: str  # the source table, quoted: "schema"."relation"
    columns: tuple[str, ...]
    key: str
    transformer: str
    has_title: bool
    appended: bool = False


PG_VECTORIZE_WAY_IN = (
    "import a view that names its columns as the documents shape does "
    "(select r.<key> as id, <text> as content, r.embeddings as embedding ...)."
)


def _pg_vectorize_params(
    conn: psycopg.Connection[Any], schema: str, table: str, job: str
) -> tuple[Any, ...]:
    """The job's row of ``<schema>.job``: source schema, relation, columns, primary key,
    transformer and table method; ConfigError naming ``table`` when that row is missing."""
    found = conn.execute(
        "select pg_catalog.to_regclass(%s) is not null",
        (sql.Identifier(schema, "job").as_string(conn),),
    ).fetchone()
    row = None
    if found and found[0]:
        row = conn.execute(
            sql.SQL(
                "select j.params ->> 'schema', coalesce(j.params ->> 'relation', "
                "j.params ->> 'table'), j.params -> 'columns', j.params ->> 'primary_key', "
                "j.transformer::text, coalesce(j.params ->> 'table_method', 'join') "
                "from {} as j where j.name = %s"
            ).format(sql.Identifier(schema, "job")),
            (job,),
        ).fetchone()
    if row is None:
        raise ConfigError(
            f"{table} looks like pg_vectorize's embeddings of job {job!r}, but "
            f"{schema}.job records no such job (it names the source table and its columns): "
            + PG_VECTORIZE_WAY_IN
        )
    return tuple(row)


def _pg_vectorize_job(
    conn: psycopg.Connection[Any], schema: str, name: str, columns_of: set[str], job: str
) -> PgVectorizeJob:
    """The job whose embeddings the table ``schema.name`` (of columns ``columns_of``) holds:
    the job's own table (``vectorize._embeddings_<job>``) or, for a job that appends them to
    its source table, that table itself; ConfigError when its params are not pg_vectorize's or
    name columns its tables lack."""
    table = f"{schema}.{name}"
    appended = not name.startswith(PG_VECTORIZE_PREFIX)
    job_schema = PG_VECTORIZE_SCHEMA if appended else schema
    src_schema, relation, columns, key, transformer, method = _pg_vectorize_params(
        conn, job_schema, table, job
    )
    if not (
        isinstance(src_schema, str)
        and isinstance(relation, str)
        and isinstance(key, str)
        and isinstance(columns, list)
        and columns
        and all(isinstance(c, str) for c in columns)
        and key in columns_of
        and (method == "append") == appended
        and (not appended or (src_schema, relation) == (schema, name))
    ):
        raise ConfigError(
            f"pg_vectorize job {job!r} in {job_schema}.job has no source table, key and "
            f"columns pgrag can read for {table} (params schema, relation, primary_key, "
            f"columns, table_method {'append' if appended else 'join'}; the key a column of "
            f"{table}{', the source ' + table if appended else ''}): " + PG_VECTORIZE_WAY_IN
        )
    source = sql.Identifier(src_schema, relation).as_string(conn)
    where = f"this database (pg_vectorize job {job!r} names it as its source in {job_schema}.job)"
    _, _, source_types = _table_columns(conn, source, where)
    missing = [c for c in (key, *columns) if c not in source_types]
    if missing:
        raise ConfigError(
            f"pg_vectorize job {job!r} in {job_schema}.job names columns its source table "
            f"{source} does not have ({', '.join(missing)}): " + PG_VECTORIZE_WAY_IN
        )
    return PgVectorizeJob(
        job,
        source,
        tuple(columns),
        key,
        str(transformer or ""),
        "title" in source_types,
        appended,
    )


def _appended_jobs(columns: set[str]) -> list[str]:
    """The pg_vectorize jobs (``table_method`` append) whose embeddings a table of these
    columns holds: ``<job>_embeddings`` beside ``<job>_updated_at``."""
    embeddings, updated = APPENDED_COLUMNS
    jobs = (c.removesuffix(embeddings) for c in columns if c.endswith(embeddings))
    return sorted(j for j in jobs if j and j + updated in columns)


def pg_vectorize_model(transformer: str) -> str | None:
    """pgrag's name of the model a pg_vectorize ``transformer`` names, when pgrag embeds
    queries with it: ``sentence-transformers/all-MiniLM-L6-v2`` is the bundled model,
    ``openai/<model>`` OpenAI's; any other is named by ``--model``."""
    provider, _, model = transformer.partition("/")
    if provider == "openai" and model:
        return model
    if provider == "sentence-transformers" and model.lower() == "all-minilm-l6-v2":
        return model
    return None


def _pg_vectorize_shape(job: PgVectorizeJob, label: str) -> TableShape:
    """A pg_vectorize job's embeddings: one row, one document, named ``<label>#<key>=<value>``,
    its text the job's columns as pg_vectorize joined them, read from the source table (joined
    as ``src``) or, for a job that appends its embeddings to it, from the row itself."""
    key = sql.Identifier(job.key).as_string(None)
    text_of = "r" if job.appended else "src"
    text = ", ".join(f"{text_of}.{sql.Identifier(c).as_string(None)}::text" for c in job.columns)
    embeddings, updated = (
        (job.name + APPENDED_COLUMNS[0], job.name + APPENDED_COLUMNS[1])
        if job.appended
        else PG_VECTORIZE_COLUMNS
    )
    return TableShape(
        name="pg_vectorize",
        needs=(job.key, embeddings, updated),
        row_id=f"r.{key}::text",
        # pg_vectorize embeds the columns joined with ', ' (concat_ws: a null column is skipped)
        content=f"concat_ws(', ', {text})",
        metadata=f"jsonb_build_object({sql.Literal(job.key).as_string(None)}, r.{key})",
        source=f"{sql.Literal(label + '#' + job.key + '=').as_string(None)} || r.{key}::text",
        title=f"{text_of}.title::text" if job.has_title else "null::text",
        page="null::bigint",
        start="null::bigint",
        order=f"r.{key}",
        used=(
            (job.key, embeddings, *job.columns, *(("title",) if job.has_title else ()))
            if job.appended
            else (job.key, embeddings)
        ),
        ignored={updated: "when pg_vectorize embedded the row"},
        # a row whose source row is gone has no text: refused as such
        join="" if job.appended else f"left join {job.source} as src on src.{key} = r.{key}",
        embedding_column=embeddings,
        model=pg_vectorize_model(job.transformer),
    )


SOURCE_DSN_SOURCES = "--source-dsn / PGRAG_IMPORT_SOURCE_DSN"
SOURCE_DSN_HINT = "Check --source-dsn / PGRAG_IMPORT_SOURCE_DSN: the database holding the table."


@dataclass(frozen=True)
class TableDatabase:
    """Where a table is read: pgrag's own database, or another one (``--source-dsn``)."""

    dsn: str
    own: bool = True

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection[Any]:
        """A read-only connection (every transaction it begins is READ ONLY); an error names
        the option the other database came from."""
        named = {} if self.own else {"sources": SOURCE_DSN_SOURCES, "hint": SOURCE_DSN_HINT}
        conn = connect(self.dsn, autocommit=autocommit, **named)
        conn.read_only = True
        return conn

    def described(self, conn: psycopg.Connection[Any]) -> str:
        """\"this database\", or the other database's name and redacted URL."""
        if self.own:
            return "this database"
        return f"the source database {conn.info.dbname} ({redact(self.dsn)})"


def database_name(conn: psycopg.Connection[Any]) -> str:
    """Where ``conn`` is connected, as ``host[:port]/dbname`` (the port when not 5432)."""
    port = "" if conn.info.port == 5432 else f":{conn.info.port}"
    return f"{conn.info.host}{port}/{conn.info.dbname}"


def _table_columns(
    conn: psycopg.Connection[Any], table: str, where: str
) -> tuple[str, str, dict[str, str]]:
    """The table's schema, name and columns with their types (``format_type``)."""
    try:
        row = conn.execute(
            "select n.nspname::text, c.relname::text, "
            "(select pg_catalog.jsonb_object_agg(a.attname, "
            "pg_catalog.format_type(a.atttypid, null)) from pg_catalog.pg_attribute as a "
            "where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped) "
            "from pg_catalog.pg_class as c join pg_catalog.pg_namespace as n "
            "on n.oid = c.relnamespace where c.oid = pg_catalog.to_regclass(%s)",
            (table,),
        ).fetchone()
    except psycopg.Error as exc:  # a malformed name
        raise ConfigError(
            f"--table {table!r} is not a table name: {exc.diag.message_primary}"
        ) from exc
    if row is None:
        raise ConfigError(f"no table {table!r} in {where}: name an existing table.")
    return str(row[0]), str(row[1]), {str(k): str(v) for k, v in (row[2] or {}).items()}


def _shape_of(
    conn: psycopg.Connection[Any], schema: str, name: str, columns: set[str], label: str
) -> TableShape:
    if set(PGAI_COLUMNS) <= columns:
        return _pgai_shape(_pgai_store(conn, schema, name), label)
    if set(PG_VECTORIZE_COLUMNS) <= columns and name.startswith(PG_VECTORIZE_PREFIX):
        own = name.removeprefix(PG_VECTORIZE_PREFIX)
        return _pg_vectorize_shape(_pg_vectorize_job(conn, schema, name, columns, own), label)
    if {"document", "cmetadata", "embedding"} <= columns:
        found = conn.execute(
            "select pg_catalog.to_regclass(%s) is not null",
            (sql.Identifier(schema, "langchain_pg_collection").as_string(conn),),
        ).fetchone()
        collection = (
            sql.Identifier(schema, "langchain_pg_collection").as_string(conn)
            if found and found[0] and "collection_id" in columns
            else None
        )
        return _langchain_shape(columns, collection)
    if {"text", "metadata_", "node_id", "embedding"} <= columns:
        return _llamaindex_shape()
    if set(LANGCHAIN4J_COLUMNS) <= columns:
        return _langchain4j_shape(columns)
    if set(HAYSTACK_COLUMNS) <= columns:
        return _haystack_shape()
    if "embedding" in columns and ("content" in columns or "body" in columns):
        return _documents_shape(columns)
    appended = _appended_jobs(columns)  # any table: only the job's columns tell it apart
    if len(appended) > 1:
        raise ConfigError(
            f"{schema}.{name} holds the embeddings of several pg_vectorize jobs "
            f"({', '.join(appended)}): import a view of one job's "
            "(select <key> as id, <text> as content, <job>_embeddings as embedding ...)."
        )
    if appended:
        return _pg_vectorize_shape(
            _pg_vectorize_job(conn, schema, name, columns, appended[0]), label
        )
    raise ConfigError(
        f"table {schema}.{name} has none of the known shapes (its columns: "
        f"{', '.join(sorted(columns))}): it needs content (or body) and embedding (the Supabase "
        "guides' documents), document/cmetadata/embedding (LangChain), text/metadata_/node_id/"
        "embedding (LlamaIndex), embedding_id/text/embedding (LangChain4j), "
        "content/embedding/meta/blob_data (Haystack), "
        "embedding_uuid/chunk_seq/chunk/embedding (pgai) or "
        "<key>/embeddings/updated_at named _embeddings_<job> or <job>_embeddings/"
        "<job>_updated_at (pg_vectorize); import a "
        "view that gives its columns those names "
        "(create view ... as select text_column as content, vector_column as embedding ...), "
        "or export it to JSONL."
    )


def _check_metadata_type(schema: str, name: str, column: str, types: dict[str, str]) -> None:
    """A metadata column must be JSON: text of other rows could not be told apart from it."""
    kind = types.get(column)
    if kind is not None and kind not in ("json", "jsonb"):
        raise ConfigError(
            f"{schema}.{name}.{column} is {kind}, not json or jsonb: import a view that casts "
            f"it ({column}::jsonb as {column}, once every row holds a JSON object), or one "
            f"without it."
        )


def _embedding_sql(column: str, kind: str | None) -> str:
    """SQL reading the embedding column as numbers: 8-byte floats as they are (a value beyond
    4-byte floats is then one row's refusal, not the statement's error), else as ``real[]``."""
    wide = kind in ("double precision[]", "numeric[]")
    return f"r.{sql.Identifier(column).as_string(None)}::{'float8' if wide else 'real'}[]"


def open_table(
    dsn: str, table: str, collection: str | None = None, *, own_database: bool = True
) -> Source:
    """The rows of ``table`` (``[schema.]name`` in the database at ``dsn``: pgrag's own, or
    with ``own_database`` false another one, named by ``--source-dsn``), in document order."""
    database = TableDatabase(dsn, own_database)
    with database.connect(autocommit=True) as conn:
        where = database.described(conn)
        prefix = "" if database.own else f"{database_name(conn)}."
        schema, name, types = _table_columns(conn, table, where)
        columns = set(types)
        shape = _shape_of(conn, schema, name, columns, f"{prefix}{schema}.{name}")
        _check_metadata_type(schema, name, shape.metadata_column, types)
        if collection is not None and shape.name != "langchain":
            raise ConfigError("--collection applies to LangChain's langchain_pg_embedding only.")
        estimate = None
        if collection is None:  # the catalog's row count: the progress's total, estimated
            row = conn.execute(
                "select reltuples::bigint from pg_catalog.pg_class where oid = %s::regclass",
                (sql.Identifier(schema, name).as_string(conn),),
            ).fetchone()
            estimate = int(row[0]) if row and row[0] is not None and row[0] > 0 else None
    ident = sql.Identifier(schema, name)
    statement = sql.SQL(
        "/* pgrag:import */ select {row_id}, left({content}::text, {longest}), "
        "{embedding}, "
        "({metadata})::text, nullif(pg_catalog.btrim({source}::text), ''), "
        "{title}::text, {page}, {start} "
        "from {table} as r {join} {where} "
        "order by 5 nulls last, 7 nulls first, 8 nulls first, {order}"
    ).format(
        row_id=sql.SQL(shape.row_id),
        content=sql.SQL(shape.content),
        # one character more than a chunk may hold: refused as too long, never read whole
        longest=sql.Literal(MAX_CHUNK_CHARS + 1),
        embedding=sql.SQL(
            _embedding_sql(shape.embedding_column, types.get(shape.embedding_column))
        ),
        metadata=sql.SQL(shape.metadata),
        source=sql.SQL(shape.source),
        title=sql.SQL(shape.title),
        page=sql.SQL(shape.page),
        start=sql.SQL(shape.start),
        table=ident,
        join=sql.SQL(shape.join),
        where=sql.SQL("where lc.name = %s" if collection is not None else ""),
        order=sql.SQL(shape.order),
    )
    unmapped = sorted(columns - set(shape.used) - set(shape.ignored))
    ignored = {c: why for c, why in shape.ignored.items() if c in columns}
    params = (collection,) if collection is not None else ()

    def rows() -> Iterator[SourceRow]:
        with database.connect() as conn, conn.cursor(name="pgrag_import") as cur:
            cur.itersize = READ_BATCH
            try:
                cur.execute(statement, params)
                for number, (rid, content, emb, meta, src, title, page, start) in enumerate(
                    cur, start=1
                ):
                    # metadata read as text: any depth of JSON is a row's problem, not the run's
                    metadata, problem = _metadata_of(meta)
                    yield SourceRow(
                        str(rid) if rid is not None else "",
                        content,
                        None if problem else as_float32(emb),
                        metadata,
                        src,
                        title,
                        int(page) if page is not None and 0 <= page <= MAX_PAGE else None,
                        int(start) if start is not None else None,
                        problem,
                        str(rid) if rid is not None else f"row {number}",
                    )
            except psycopg.errors.UndefinedObject as exc:  # no pgvector type: not embeddings
                raise NotInstalled(
                    f"{schema}.{name}.{shape.embedding_column} is not a vector: {exc}"
                ) from exc
            except (psycopg.DataError, psycopg.errors.CannotCoerce) as exc:
                # e.g. embeddings kept as text: the table's own values cannot be read as numbers
                reason = " ".join((exc.diag.message_primary or str(exc)).split())
                raise ConfigError(
                    f"{schema}.{name} cannot be read as pgrag reads it ({reason}): the embedding "
                    "must be a vector, halfvec or an array of numbers; "
                    "import a view that casts the columns "
                    "(e.g. select embedding::vector as embedding ...)."
                ) from exc

    return Source(
        # the source's name (metadata.import.from, what --prune compares): a collection's own
        label=f"table {prefix}{schema}.{name} ({shape.name})"
        + (f" collection {collection}" if collection is not None else ""),
        shape=shape.name,
        uri_prefix=f"{prefix}{schema}.{name}",
        unmapped=unmapped,
        ignored=ignored,
        rows=rows(),
        rows_total=estimate,
        rows_estimated=True,
        model=shape.model,
    )


# -- files ---------------------------------------------------------------------------------------


def _metadata_of(value: Any) -> tuple[dict[str, Any], str | None]:
    """A row's ``metadata`` as an object, or why it is not one (a table's is JSON text)."""
    if value is None:
        return {}, None
    if isinstance(value, str):  # as Parquet exports often hold it too
        try:
            value = json.loads(value)
        except RecursionError:
            return {}, "metadata is nested too deeply"
        except ValueError:
            return {}, "metadata is text that is not JSON"
    if not isinstance(value, dict):
        return {}, f"metadata is {kind_of(value)}, not an object"
    return value, metadata_problem(value)


def _given(record: dict[str, Any], key: str) -> Any:
    """A record's own value of ``key``, None when absent, null or blank text."""
    value = record.get(key)
    return None if isinstance(value, str) and not value.strip() else value


def _file_source(record: dict[str, Any], metadata: dict[str, Any]) -> tuple[str | None, str | None]:
    """The row's source (its document), and why the record's own ``source_uri`` is refused."""
    given = _given(record, "source_uri")
    if given is not None:
        problem = label_problem("source_uri", given)
        return (None, problem) if problem else (str(given), None)
    for key in SOURCE_KEYS:  # metadata, already checked as text
        value = _given(metadata, key)
        if value is not None and label_problem(key, value) is None:
            return str(value), None
    return None, None


def _file_title(record: dict[str, Any], metadata: dict[str, Any]) -> tuple[str | None, str | None]:
    """The row's title (its own, else its metadata's), and why its own is refused."""
    given = _given(record, "title")
    if given is not None:
        problem = text_problem("title", given) if isinstance(given, str) else "title is not text"
        return (None, problem) if problem else (given, None)
    title = _given(metadata, "title")
    return (title if isinstance(title, str) else None), None


def _file_page(record: dict[str, Any], metadata: dict[str, Any]) -> tuple[int | None, str | None]:
    """The row's page (its own, else its metadata's when a page number), and why its own is
    refused."""
    if record.get("page") is not None:
        problem = page_problem(record["page"])
        return (None, problem) if problem else (whole_number(record["page"]), None)
    for key in PAGE_KEYS:
        page = whole_number(metadata.get(key))
        if page is not None and 0 <= page <= MAX_PAGE:
            return page, None
    return None, None


def _file_row(record: Any, position: str, unmapped: set[str]) -> SourceRow:
    """One record of a file as a row. A value that cannot be stored gives the row its
    ``problem`` (and drops its embedding and metadata, and its text if that is the problem) but
    keeps its source, so that its document is refused with it."""
    if not isinstance(record, dict):
        return SourceRow("", None, None, position=position, problem="not a JSON object")
    if len(unmapped) < UNMAPPED_LISTED:  # a file's every line may bring new keys
        extra = (str(k)[:100] for k in record if k not in FILE_COLUMNS)
        unmapped.update(itertools.islice(extra, UNMAPPED_LISTED - len(unmapped)))
    metadata, metadata_refused = _metadata_of(record.get("metadata"))
    source, source_refused = _file_source(record, metadata)
    title, title_refused = _file_title(record, metadata)
    page, page_refused = _file_page(record, metadata)
    row_id = record.get("id")
    id_refused = label_problem("id", row_id) if row_id is not None else None
    content = record.get("content")
    content_refused = content_problem(content)
    problem = (
        content_refused
        or metadata_refused
        or source_refused
        or id_refused
        or title_refused
        or page_refused
    )
    row = SourceRow(
        str(row_id) if row_id is not None and id_refused is None else "",
        # kept unless refused, or unless the row's document is unknown (its source or id is
        # refused): the text names a lone row's document, an unknown one is named by its place
        None if content_refused or source_refused or id_refused else content,
        None if problem else as_float32(record.get("embedding")),
        {} if problem else metadata,
        source,
        title,
        page,
        whole_number(metadata.get("start_index", metadata.get("chunk_index"))),
        problem,
        position,
    )
    return row


def _order_key(r: SourceRow) -> tuple[bool, str, bool, int, bool, int]:
    """Documents together (by source; rows without one last), then chunk order."""
    return (
        r.source is None,
        r.source or "",
        r.page is not None,
        r.page or 0,
        r.start is not None,
        r.start or 0,
    )


def document_order(rows: list[SourceRow]) -> list[SourceRow]:
    """``rows`` sorted as a table's statement sorts them (documents together, chunk order)."""
    return sorted(rows, key=_order_key)


def _packed(row: SourceRow) -> SourceRow:
    """``row`` with its metadata as JSON text: what it holds in memory is then its size (a
    metadata object of many small values takes some 20 times its JSON's size)."""
    if row.metadata:
        row.packed, row.metadata = json.dumps(row.metadata), {}
    return row


def _unpacked(rows: Iterable[SourceRow]) -> Iterator[SourceRow]:
    for row in rows:
        if row.packed is not None:
            row.metadata, row.packed = json.loads(row.packed), None
        yield row


def _row_bytes(row: SourceRow) -> int:
    """About what ``row`` holds in memory (its text, embedding and metadata as JSON text)."""
    size = 300 + (len(row.packed) if row.packed is not None else 0)
    if isinstance(row.content, str):
        size += len(row.content)
    if isinstance(row.embedding, np.ndarray):
        size += row.embedding.nbytes
    elif isinstance(row.embedding, list):
        size += 32 * len(row.embedding)
    return size


class DocumentOrder:
    """Rows put in document order (:func:`document_order`) with bounded memory.

    :meth:`add` keeps rows until they hold about ``run_bytes``; then they are sorted and written
    as one run to a private temporary folder. :meth:`rows` yields them all in order: the only
    run from memory, else every run merged (``heapq.merge``, stable like ``sorted``: rows of
    equal keys keep the file's order), ``MERGE_RUNS`` files at a time. Pickle is only ever read
    back from the files this object wrote, in a folder only this user can read.
    """

    def __init__(self, run_bytes: int | None = None) -> None:
        self.run_bytes = RUN_BYTES if run_bytes is None else run_bytes
        self.buffer: list[SourceRow] = []
        self.held = 0
        self.count = 0
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self.runs: list[Path] = []
        self.spilled = 0  # runs written, merged ones included

    def add(self, row: SourceRow) -> None:
        self.buffer.append(_packed(row))
        self.count += 1
        self.held += _row_bytes(row)
        if self.held >= self.run_bytes:
            self._spill(document_order(self.buffer))

    def discard(self) -> None:
        """Remove the runs written (the import stopped before reading them back)."""
        if self.folder is not None:
            self.folder.cleanup()

    def _spill(self, rows: Iterable[SourceRow]) -> None:
        if self.folder is None:
            remove_stale_runs()
            self.folder = tempfile.TemporaryDirectory(prefix=f"{RUNS_PREFIX}{os.getpid()}-")
        self.spilled += 1
        path = Path(self.folder.name) / f"run-{self.spilled}"
        with path.open("wb") as handle:
            for row in rows:
                pickle.dump(row, handle, protocol=pickle.HIGHEST_PROTOCOL)
        self.runs.append(path)
        self.buffer, self.held = [], 0

    @staticmethod
    def _read(path: Path) -> Iterator[SourceRow]:
        with path.open("rb") as handle:
            while True:
                try:
                    row: SourceRow = pickle.load(handle)
                except EOFError:
                    break
                yield row
        path.unlink()

    def rows(self) -> Iterator[SourceRow]:
        """Every row added, in document order (the temporary files removed as they end)."""
        try:
            if not self.runs:
                rows, self.buffer = document_order(self.buffer), []
                yield from _unpacked(rows)
                return
            if self.buffer:
                self._spill(document_order(self.buffer))
            while len(self.runs) > MERGE_RUNS:  # consecutive runs: the merge stays stable
                group, self.runs = self.runs[:MERGE_RUNS], self.runs[MERGE_RUNS:]
                merged = heapq.merge(*(self._read(p) for p in group), key=_order_key)
                self._spill(merged)
                self.runs = [self.runs[-1], *self.runs[:-1]]
            yield from _unpacked(heapq.merge(*(self._read(p) for p in self.runs), key=_order_key))
        finally:
            self.discard()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_runs() -> list[Path]:
    """Remove the run folders of this user's imports that were killed (``kill -9``) before
    removing their own (named ``pgrag-import-<pid>-...`` in ``TMPDIR``); the folders removed."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{RUNS_PREFIX}*-*"):
        pid = path.name.removeprefix(RUNS_PREFIX).split("-", 1)[0]
        try:
            owned = path.is_dir() and path.stat().st_uid == os.getuid()
        except OSError:
            continue
        if owned and pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


UTF8_BOM = b"\xef\xbb\xbf"  # as Windows tools write UTF-8: skipped
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _lines(handle: IO[bytes]) -> Iterator[tuple[int, int, bytes | None]]:
    """The lines of a file as (number, bytes read, the line); a line longer than
    ``MAX_LINE_BYTES`` is skipped to its end unread (None), so no line costs more memory."""
    number = 0
    while line := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield number, len(line), line
            continue
        size = len(line)
        while line and not line.endswith(b"\n"):
            line = handle.readline(MAX_LINE_BYTES)
            size += len(line)
        yield number, size, None


def _jsonl_record(line: bytes) -> tuple[Any, str | None]:
    """One line as a JSON value, or why it is not one."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (
            f"not UTF-8 text (byte 0x{line[exc.start]:02x} at column {exc.start + 1}): "
            "export the file as UTF-8"
        )
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "not JSON that can be read: nested too deeply"
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg}"
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        return None, f"not JSON that can be read: {exc}"


def open_jsonl(path: Path, progress: Progress | None = None) -> Source:
    """The rows of a JSONL file (UTF-8, with or without a byte-order mark; one JSON object a
    line; blank lines skipped); ``progress`` advances by the bytes read."""
    unmapped: set[str] = set()
    rows = DocumentOrder()
    try:
        with path.open("rb") as handle:
            head = handle.read(3)
            if head[:2] in UTF16_BOMS:
                raise ConfigError(
                    f"{path}: UTF-16 text; import reads UTF-8 JSONL: convert it first "
                    f"(iconv -f UTF-16 -t UTF-8 {path} > {path.stem}.utf8{path.suffix})."
                )
            handle.seek(3 if head == UTF8_BOM else 0)
            for number, size, line in _lines(handle):
                if progress is not None:
                    progress.advance(size)
                position = f"line {number}"
                if line is None:
                    too_long = f"line longer than {MAX_LINE_BYTES // 2**20} MiB: a chunk is smaller"
                    rows.add(SourceRow("", None, None, position=position, problem=too_long))
                    continue
                if not line.strip():
                    continue
                record, problem = _jsonl_record(line)
                if problem is not None:
                    rows.add(SourceRow("", None, None, position=position, problem=problem))
                    continue
                rows.add(_file_row(record, position, unmapped))
    except BaseException:
        rows.discard()
        raise
    return Source(
        label=f"file {path}",
        shape="jsonl",
        uri_prefix=str(path),
        unmapped=sorted(unmapped),
        ignored={},
        rows=rows.rows(),
        rows_total=rows.count,
        discard=rows.discard,
    )


def _json_value(value: Any) -> Any:
    """A Parquet value JSON has no type for, as text: dates and times in ISO 8601, decimals
    as written (anything else stays unstorable: ``TypeError``)."""
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"a {type(value).__name__} value")


def _parquet_records(batch: Any) -> Iterator[tuple[Any, str | None]]:
    """A batch's rows as records (metadata made JSON-ready by :func:`_json_value`), or why a row
    cannot be read (e.g. a timestamp beyond Python's dates): then row by row."""
    try:
        records = batch.to_pylist()
    except (OverflowError, ValueError):
        records = None
    for i in range(batch.num_rows):
        try:
            record = records[i] if records is not None else batch.slice(i, 1).to_pylist()[0]
        except (OverflowError, ValueError) as exc:
            yield None, f"a value cannot be read ({str(exc)[:100]})"
            continue
        if isinstance(record, dict) and isinstance(record.get("metadata"), dict):
            # left as it is when it cannot be: then refused by the metadata's check
            with contextlib.suppress(TypeError, ValueError, RecursionError):
                record["metadata"] = json.loads(json.dumps(record["metadata"], default=_json_value))
        yield record, None


def open_parquet(path: Path, progress: Progress | None = None) -> Source:
    """The rows of a Parquet file with the JSONL columns (pyarrow: the ``parquet`` extra);
    ``progress`` advances by its share of the file's bytes per row."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingExtra(
            "reading Parquet needs pyarrow: pip install 'pgrag-sql[parquet]'"
        ) from exc
    import pyarrow as pa

    unmapped: set[str] = set()
    rows = DocumentOrder()
    number = 0
    try:
        parquet = pq.ParquetFile(path)
        per_row = path.stat().st_size / max(parquet.metadata.num_rows, 1)
        for batch in parquet.iter_batches(batch_size=READ_BATCH):
            for record, problem in _parquet_records(batch):
                number += 1
                if problem is not None:
                    rows.add(SourceRow("", None, None, position=f"row {number}", problem=problem))
                    continue
                rows.add(_file_row(record, f"row {number}", unmapped))
            if progress is not None:
                progress.advance(per_row * batch.num_rows)
    except (pa.ArrowException, OSError) as exc:
        rows.discard()
        raise ConfigError(
            f"{path}: not a readable Parquet file after {number} rows ({str(exc)[:200]}): "
            "check that the export finished, or export JSONL instead."
        ) from exc
    except BaseException:
        rows.discard()
        raise
    return Source(
        label=f"file {path}",
        shape="parquet",
        uri_prefix=str(path),
        unmapped=sorted(unmapped),
        ignored={},
        rows=rows.rows(),
        rows_total=rows.count,
        discard=rows.discard,
    )


def open_file(path: Path, progress: Progress | None = None) -> Source:
    """A JSONL (``.jsonl``, ``.ndjson``, ``.json``) or Parquet (``.parquet``) file, read and
    put in document order now (``progress``: of the file's bytes); named by its absolute path,
    symbolic links resolved."""
    if path.is_dir():
        raise ConfigError(f"{path}: a folder; import reads one .jsonl or .parquet file.")
    if not path.is_file():
        raise ConfigError(f"{path}: no such file.")
    path = path.resolve()  # the source's name, however the path was written (docs, --prune)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return open_jsonl(path, progress)
    if suffix in (".parquet", ".pq"):
        return open_parquet(path, progress)
    raise ConfigError(f"{path}: import reads .jsonl or .parquet files, not {suffix or 'this'}.")
