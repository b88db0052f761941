"""``pgrag import``: load chunks that already have embeddings (a table, JSONL, Parquet)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pgrag.cli.common import (
    echo_json,
    json_option,
    pass_state,
    progress_json_option,
    progress_option,
)
from pgrag.cli.state import CliState
from pgrag.db import DEFAULT_TENANT
from pgrag.pipeline.embedders import PROVIDERS
from pgrag.progress import Progress, ProgressMode, progress_mode


@click.command("import")
@click.argument("file", required=False, type=click.Path(path_type=Path), metavar="[FILE]")
@click.option(
    "--table",
    metavar="[SCHEMA.]NAME",
    help="Read this table of the same database instead of a file: the Supabase guide's "
    "documents, LangChain's langchain_pg_embedding, a LlamaIndex data_<name> table, a "
    "LangChain4j or Spring AI PgVector table, Haystack's haystack_documents, a pgai "
    "vectorizer's <name>_store table or a pg_vectorize job's vectorize._embeddings_<job> (or "
    "the source table of a job that appends them).",
)
@click.option(
    "--collection",
    metavar="NAME",
    help="With LangChain's table: only this collection (langchain_pg_collection.name).",
)
@click.option(
    "--source-dsn",
    envvar="PGRAG_IMPORT_SOURCE_DSN",
    metavar="DSN",
    help="With --table: read the table from this database (e.g. an existing application's, "
    "which needs no pgrag) instead of pgrag's; read only (env PGRAG_IMPORT_SOURCE_DSN).",
)
@click.option(
    "--tenant",
    envvar="PGRAG_TENANT",
    default=DEFAULT_TENANT,
    show_default=True,
    help="Tenant owning the documents (env PGRAG_TENANT).",
)
@click.option(
    "--model",
    default=None,
    help="The model that made the embeddings; required when the installation has none "
    "recorded yet, else it must be the recorded one. Default: the model a pg_vectorize job "
    "names, else the recorded model.",
)
@click.option(
    "--embedder",
    "provider",
    type=click.Choice(PROVIDERS),
    default=None,
    help="Provider recorded with --model (queries are embedded by it); default: local for "
    "the bundled model, else openai.",
)
@click.option(
    "--language",
    default="english",
    show_default=True,
    help="Text-search configuration of the chunks (english, simple, german, ...).",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also remove the tenant's documents imported from this source that it no longer "
    "has (one transaction; with --dry-run, only count them).",
)
@click.option("--dry-run", is_flag=True, help="Read, map and check only; write nothing.")
@progress_option
@progress_json_option
@json_option
@pass_state
def import_command(
    state: CliState,
    file: Path | None,
    table: str | None,
    collection: str | None,
    source_dsn: str | None,
    tenant: str,
    model: str | None,
    provider: str | None,
    language: str,
    prune: bool,
    dry_run: bool,
    progress: bool | None,
    progress_json: bool,
    as_json: bool,
) -> None:
    """Import chunks that already have embeddings, without re-embedding: from FILE (.jsonl or
    .parquet with content, embedding and optional metadata, source_uri, title, page) or from
    --table (of this database, or of another with --source-dsn).

    \b
    Rows sharing a source (source_uri, metadata.source, LangChain's custom_id, LlamaIndex's
    doc_id, a file's name, Haystack's file_path, the source row of a pgai store or a
    pg_vectorize job) become one document with
    ordered chunks; others one document each. Unchanged documents are skipped on re-import,
    changed ones replaced in one transaction each.
    A source of more than 100,000 rows (or 256 MB of chunks) is refused: a document is
    loaded whole. Exit status 1 when a row was refused (the other documents are imported;
    the first 100 refusals are listed, the others counted), 3 when the source has no rows.
    """
    from pgrag.importer import ImportOptions, import_source
    from pgrag.importer.sources import open_file, open_table

    if (file is None) == (table is None):
        raise click.UsageError("name one source: a FILE (.jsonl or .parquet) or --table NAME.")
    if collection is not None and table is None:
        raise click.UsageError("--collection goes with --table (LangChain's table).")
    if source_dsn is not None and table is None:
        # PGRAG_IMPORT_SOURCE_DSN set for table imports does not stand in a file's way.
        given = click.get_current_context().get_parameter_source("source_dsn")
        if given is not click.core.ParameterSource.ENVIRONMENT:
            raise click.UsageError("--source-dsn goes with --table (the table to read there).")
    dsn = state.dsn()
    shown = progress if progress is not None else not as_json
    mode: ProgressMode = "json" if progress_json else progress_mode(shown)
    if table is not None:
        if source_dsn is None:
            source = open_table(dsn, table, collection)
        else:
            source = open_table(source_dsn, table, collection, own_database=False)
    else:
        assert file is not None  # one of the two, checked above
        size = file.stat().st_size if file.is_file() else None
        # the file is read and put in document order before the import's own progress
        with Progress("reading", size, mode, unit="bytes") as reading:
            source = open_file(file, reading)
    options = ImportOptions(
        tenant=tenant,
        model=model,
        provider=provider,
        language=language,
        dry_run=dry_run,
        progress=mode,
        prune=prune,
    )
    summary = import_source(dsn, source, options)
    if as_json:
        echo_json(summary.as_dict())
    else:
        for r in summary.refused:
            row = f" ({r['row']})" if r["row"] else ""
            click.echo(f"refused: {r['document']}{row}: {r['reason']}", err=True)
        if summary.refusals_not_listed:
            click.echo(
                f"refused: {summary.refusals_not_listed:,} more, not listed (the first "
                f"{len(summary.refused)} refusals are)",
                err=True,
            )
        verb = "would import" if dry_run else "imported"
        click.echo(
            f"documents: {summary.documents_new} new, {summary.documents_changed} changed, "
            f"{summary.documents_unchanged} unchanged, {summary.documents_relabelled} "
            f"relabelled, {summary.documents_refused} refused"
            + (
                f", {summary.documents_removed} {'would be ' if dry_run else ''}removed"
                if prune
                else ""
            )
        )
        click.echo(
            f"chunks:    {summary.chunks_imported} {verb} of {summary.rows_read} rows read "
            f"({summary.source}); token counts: {summary.token_counts}"
        )
        if summary.prune_skipped:
            click.echo(f"prune:     skipped: {summary.prune_skipped}", err=True)
        if summary.unmapped_columns:
            click.echo(f"unmapped:  {', '.join(summary.unmapped_columns)} (not imported)")
        for column, why in summary.ignored_columns.items():
            click.echo(f"ignored:   {column} ({why})")
        click.echo(
            f"time:      {summary.seconds:.1f} s"
            + (" (dry run: nothing written)" if dry_run else "")
        )
    if summary.refused:
        sys.exit(1)
