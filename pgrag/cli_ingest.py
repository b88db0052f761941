"""``pgrag ingest``: extract, chunk, embed and load files, folders and URLs."""

from __future__ import annotations

import sys

import click

from pgrag.chunking import CHUNKERS
from pgrag.cli_common import echo_json, json_option, pass_app
from pgrag.context import AppContext
from pgrag.db import DEFAULT_TENANT, connect
from pgrag.embedders import PROVIDERS, get_embedder, read_embedding_config
from pgrag.ingest import IngestOptions, IngestSummary, ingest_paths


@click.command()
@click.argument("sources", nargs=-1, required=True, metavar="PATH_OR_URL...")
@click.option(
    "--tenant",
    envvar="PGRAG_TENANT",
    default=DEFAULT_TENANT,
    show_default=True,
    help="Tenant owning the documents (env PGRAG_TENANT).",
)
@click.option(
    "--embedder",
    "provider",
    type=click.Choice(PROVIDERS),
    default=None,
    help="Embedding backend; default: the one recorded in the database, else local "
    "(env PGRAG_EMBEDDER).",
)
@click.option(
    "--model",
    default=None,
    help="Embedding model (env EMBEDDING_MODEL); openai default text-embedding-3-small.",
)
@click.option(
    "--chunker",
    type=click.Choice(CHUNKERS),
    default="tokens",
    show_default=True,
    help="tokens: structure-aware, sized in model tokens; words: fixed word windows.",
)
@click.option(
    "--chunk-size",
    type=click.IntRange(min=2),
    default=None,
    help="Max tokens per chunk incl. overlap (tokens; default 250 local, 512 openai) or "
    "words per window (words; default 500 when the model reads that many).",
)
@click.option(
    "--overlap",
    type=click.IntRange(min=0),
    default=None,
    help="Overlap in tokens (whole sentences) or words; default 1/8 (tokens) or 1/10 (words).",
)
@click.option("--force", is_flag=True, help="Re-chunk and re-embed even unchanged documents.")
@click.option(
    "--switch-model",
    is_flag=True,
    help="Adopt --embedder/--model as the database's model: clears every stored embedding "
    "(all tenants) and marks every document pending; re-ingest all sources afterwards.",
)
@click.option("--glob", default=None, help="Only files matching this pattern (e.g. '*.md').")
@click.option(
    "--language",
    default="english",
    show_default=True,
    help="Text-search configuration of the chunks (english, simple, german, ...).",
)
@json_option
@pass_app
def ingest(
    app: AppContext,
    sources: tuple[str, ...],
    tenant: str,
    provider: str | None,
    model: str | None,
    chunker: str,
    chunk_size: int | None,
    overlap: int | None,
    force: bool,
    switch_model: bool,
    glob: str | None,
    language: str,
    as_json: bool,
) -> None:
    """Extract, chunk, embed and load documents: files, folders (recursive) and URLs.

    \b
    Unchanged documents (same content hash) are skipped; changed ones re-embed only the
    chunks whose text changed. Each document is replaced in one transaction. Exit status
    is 1 when any document failed; the others are still loaded.
    """
    dsn = app.dsn()
    embedder = None
    if provider or model or switch_model:
        with connect(dsn, autocommit=True) as conn:
            dims, db_model, db_provider = read_embedding_config(conn)
        if provider is None and model is None:
            provider, model = db_provider, db_model
        embedder = get_embedder(provider or db_provider, model, dims)
    options = IngestOptions(
        chunker=chunker,
        chunk_size=chunk_size,
        overlap=overlap,
        force=force or switch_model,
        language=language,
        switch_model=switch_model,
    )
    summary = ingest_paths(
        dsn,
        list(sources),
        glob=glob,
        tenant=tenant,
        embedder=embedder,
        options=options,
        progress=not as_json,
    )
    if as_json:
        echo_json(summary.as_dict())
    else:
        print_summary(summary)
    if summary.documents_failed:
        sys.exit(1)


def print_summary(s: IngestSummary) -> None:
    for uri, reason in s.failures:
        click.echo(f"failed: {uri}: {reason}", err=True)
    click.echo(
        f"documents: {s.documents_new} new, {s.documents_changed} changed, "
        f"{s.documents_unchanged} unchanged, {s.documents_failed} failed"
    )
    click.echo(
        f"chunks:    {s.chunks_written} written, {s.chunks_embedded} embedded, "
        f"{s.chunks_reused} reused"
    )
    click.echo(f"time:      {s.seconds:.1f} s")
