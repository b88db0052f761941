"""``pgrag ingest``: extract, chunk, embed and load files, folders and URLs."""

from __future__ import annotations

import sys

import click

from pgrag import tracing
from pgrag.cli.common import (
    echo_json,
    json_option,
    parse_json_object,
    pass_state,
    progress_json_option,
    progress_option,
)
from pgrag.cli.state import CliState
from pgrag.db import DEFAULT_TENANT, connect
from pgrag.errors import ConfigError
from pgrag.ingest import IngestOptions, IngestSummary, ingest_paths
from pgrag.pipeline.chunking import INGEST_CHUNKERS
from pgrag.pipeline.embedders import PROVIDERS, get_embedder, read_embedding_config, vector_literal


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
    "(env PGRAG_EMBEDDER). local embeds documents with its int8 copy (about twice as fast; "
    "searches embed queries in fp32); env PGRAG_LOCAL_PRECISION=fp32 for fp32.",
)
@click.option(
    "--model",
    default=None,
    help="Embedding model (env EMBEDDING_MODEL); openai default text-embedding-3-small.",
)
@click.option(
    "--chunker",
    type=click.Choice(INGEST_CHUNKERS),
    default="tokens",
    show_default=True,
    help="tokens: structure-aware, sized in model tokens; words: fixed word windows; "
    "semantic: as tokens, also cutting where the topic changes (embeds every sentence).",
)
@click.option(
    "--breakpoint",
    default=None,
    metavar="pN|DISTANCE",
    help="semantic only: cut at gaps between sentences whose embedding distance is above the "
    "N-th percentile of the document's (pN), or above a cosine distance; default p70.",
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
@click.option(
    "--metadata",
    "metadata_json",
    metavar="JSON",
    help='Metadata for every document of this run, a JSON object (e.g. \'{"team": "ops"}\'), '
    "merged over the extractor's (Markdown front matter); search with --metadata.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also remove the tenant's documents under the given folders whose files no longer "
    "exist (one transaction).",
)
@progress_option
@progress_json_option
@json_option
@pass_state
@tracing.command("pgrag ingest")
def ingest(
    state: CliState,
    sources: tuple[str, ...],
    tenant: str,
    provider: str | None,
    model: str | None,
    chunker: str,
    breakpoint: str | None,
    chunk_size: int | None,
    overlap: int | None,
    force: bool,
    switch_model: bool,
    glob: str | None,
    language: str,
    metadata_json: str | None,
    prune: bool,
    progress: bool | None,
    progress_json: bool,
    as_json: bool,
) -> None:
    """Extract, chunk, embed and load documents: files, folders (recursive) and URLs.

    \b
    Unchanged documents (same content hash) are skipped; changed ones re-embed only the
    chunks whose text changed. Each document is replaced in one transaction. Exit status
    is 1 when any document failed (the others are still loaded), 3 when no file matched,
    130 when interrupted (finished documents are kept; run the command again to finish).
    """
    metadata = parse_json_object(metadata_json) or {}
    if breakpoint is not None and chunker != "semantic":
        raise ConfigError("--breakpoint applies to --chunker semantic only.")
    dsn = state.dsn()
    embedder = None
    if provider or model or switch_model:
        with connect(dsn, autocommit=True) as conn:
            dims, db_model, db_provider = read_embedding_config(conn)
        if provider is None and model is None:
            provider, model = db_provider, db_model
        embedder = get_embedder(provider or db_provider, model, dims, for_documents=True)
    options = IngestOptions(
        chunker=chunker,
        breakpoint=breakpoint,
        chunk_size=chunk_size,
        overlap=overlap,
        force=force or switch_model,
        language=language,
        switch_model=switch_model,
        metadata=metadata,
    )
    summary = ingest_paths(
        dsn,
        list(sources),
        glob=glob,
        tenant=tenant,
        embedder=embedder,
        options=options,
        progress="json" if progress_json else progress if progress is not None else not as_json,
        prune=prune,
    )
    counts = {k: v for k, v in summary.as_dict().items() if isinstance(v, int | float)}
    tracing.annotate({f"pgrag.ingest.{k}": v for k, v in counts.items()})  # on the root span
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
        + (f", {s.documents_removed} removed" if s.documents_removed else "")
    )
    # written = embedded + reused + repeated: each chunk written is exactly one of them
    repeated = (
        f", {s.chunks_repeated} repeated (the same text as another chunk, embedded once)"
        if s.chunks_repeated
        else ""
    )
    click.echo(
        f"chunks:    {s.chunks_written} written, {s.chunks_embedded} embedded, "
        f"{s.chunks_reused} reused{repeated}"
    )
    if s.tenant_isolated:
        click.echo(
            "tenant:    now has its own vector index (pgrag.isolate_tenant), so other "
            "tenants' data cannot slow or skew its searches"
        )
    click.echo(f"time:      {s.seconds:.1f} s")


@click.command()
@click.argument("sources", nargs=-1, metavar="[PATH_OR_URL]...")
@click.option(
    "--id",
    "document_ids",
    type=int,
    multiple=True,
    help="A document id (repeatable; as printed by search --json).",
)
@click.option(
    "--glob",
    "globs",
    multiple=True,
    help="Source URIs matching this pattern (* matches across /; relative patterns are "
    "taken from the current folder), e.g. '*.pdf'. Repeatable.",
)
@click.option(
    "--tenant",
    envvar="PGRAG_TENANT",
    default=DEFAULT_TENANT,
    show_default=True,
    help="Tenant owning the documents (env PGRAG_TENANT).",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@json_option
@pass_state
def delete(
    state: CliState,
    sources: tuple[str, ...],
    document_ids: tuple[int, ...],
    globs: tuple[str, ...],
    tenant: str,
    yes: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Remove documents and their chunks from search: by path or URL (a folder: everything
    under it), --id or --glob.

    \b
    Removal is one transaction and keeps the BM25 statistics exact. Asks for confirmation
    unless --yes. Exit status 3 when nothing matches.
    """
    from pgrag.documents import delete_documents, glob_to_like, path_criteria, tenant_is_empty
    from pgrag.errors import ConfigError, NothingToDo

    if not (sources or document_ids or globs):
        raise ConfigError("name what to delete: a path or URL, --id ID or --glob PATTERN.")
    uris, patterns = path_criteria(sources)
    patterns += [glob_to_like(g) for g in globs]
    with connect(state.dsn(), autocommit=True) as conn:
        found = delete_documents(
            conn,
            tenant,
            document_ids=document_ids,
            source_uris=uris,
            patterns=patterns,
            dry_run=True,
        )
        if not found:
            why = tenant_is_empty(conn, tenant)
            raise NothingToDo(why or f"no document of tenant {tenant!r} matches: nothing deleted.")
        chunks = sum(d.chunk_count for d in found)
        if not as_json:
            for d in found[:20]:
                click.echo(f"  {d.document_id:>6}  {d.source_uri}  ({d.chunk_count} chunks)")
            if len(found) > 20:
                click.echo(f"  … and {len(found) - 20} more")
        if dry_run:
            if as_json:
                echo_json({"deleted": [], "would_delete": [d.__dict__ for d in found]})
            else:
                click.echo(f"would delete {len(found)} document(s), {chunks} chunks (dry run).")
            return
        if not yes:
            try:
                click.confirm(
                    f"Delete {len(found)} document(s) and {chunks} chunks of tenant {tenant!r}?",
                    abort=True,
                    err=True,
                )
            except click.Abort:
                raise ConfigError(
                    "nothing deleted: not confirmed (pass --yes to delete without asking)."
                ) from None
        removed = delete_documents(conn, tenant, document_ids=[d.document_id for d in found])
    if as_json:
        echo_json({"deleted": [d.__dict__ for d in removed]})
        return
    click.echo(f"deleted {len(removed)} document(s), {sum(d.chunk_count for d in removed)} chunks.")


@click.command()
@click.argument("text")
@json_option
@pass_state
def embed(state: CliState, text: str, as_json: bool) -> None:
    """Print the embedding of TEXT (with the database's model) as a pgvector literal.

    \b
    For psql (which interpolates :'emb' in scripts and on stdin, not in -c):
      echo "select title from hybrid_search('reset my password', :'emb', 5)" |
        psql -v emb="$(pgrag embed 'reset my password')"
    or inside psql: \\set emb `pgrag embed 'reset my password'`
    --json prints {"model", "provider", "dims", "embedding"}.
    """
    from pgrag.search import embed_query, query_embedder

    with connect(state.dsn()) as conn:
        embedder = query_embedder(conn)
    vector = embed_query(embedder, text)
    if as_json:
        echo_json(
            {
                "model": embedder.model_name,
                "provider": embedder.provider,
                "dims": len(vector),
                "embedding": [float(x) for x in vector],
            }
        )
        return
    click.echo(vector_literal(vector))
