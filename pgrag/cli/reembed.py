"""``pgrag reembed``: switch the embedding model without downtime."""

from __future__ import annotations

import click

from pgrag.cli.common import echo_json, json_option, pass_state, progress_option
from pgrag.cli.state import CliState
from pgrag.db import connect
from pgrag.errors import ConfigError, NothingToDo
from pgrag.install.migrator import MAX_DIMS
from pgrag.pipeline.embedders import PROVIDERS, get_embedder, provider_for_model
from pgrag.progress import progress_mode
from pgrag.reembed import (
    DEFAULT_BATCH,
    ReembedStatus,
    ReembedSummary,
    cancel_reembed,
    reembed,
    reembed_status,
)


def _describe(status: ReembedStatus) -> str:
    target = f"{status.provider}:{status.model} ({status.dims} dimensions)"
    source = f"{status.from_provider}:{status.from_model} ({status.from_dims})"
    if status.status == "running":
        return (
            f"re-embed {status.reembed_id} to {target}, from {source}: running since "
            f"{status.started_at:%Y-%m-%d %H:%M:%S}; {status.embedded} of {status.chunk_count} "
            f"chunks embedded, {status.waiting} queued"
        )
    return (
        f"re-embed {status.reembed_id} to {target}, from {source}: {status.status} "
        f"{status.finished_at:%Y-%m-%d %H:%M:%S}"
        + (f" ({status.chunk_count} chunks)" if status.status == "switched" else "")
    )


def _print_summary(s: ReembedSummary) -> None:
    target = f"{s.provider}:{s.model} ({s.dims} dimensions)"
    click.echo(
        f"re-embed {s.reembed_id}{' (joined)' if s.joined else ''}: {s.chunks_embedded} chunks "
        f"embedded by this run ({s.tokens} tokens) in {s.seconds:.1f} s"
    )
    if s.switched:
        who = "" if s.switched_here else " (by another process)"
        click.echo(
            f"switched{who}: the database holds {target} for {s.chunk_count} chunks; "
            f"{s.from_provider}:{s.from_model} ({s.from_dims}) was dropped"
        )
    elif s.cancelled:
        click.echo("cancelled (by another process): the database keeps its model")
    else:
        click.echo(f"every chunk has its {target} embedding; not switched yet (--no-switch)")


@click.command()
@click.option(
    "--model",
    help="The new embedding model (e.g. text-embedding-3-small, or all-MiniLM-L6-v2 for the "
    "bundled local model).",
)
@click.option(
    "--embedder",
    "provider",
    type=click.Choice(PROVIDERS),
    default=None,
    help="Backend of the new model; default: local for the bundled model, else openai "
    "(OPENAI_API_KEY, OPENAI_BASE_URL for a compatible server).",
)
@click.option(
    "--dims",
    type=click.IntRange(1, MAX_DIMS),
    default=None,
    help="Dimension of the new embeddings (default: the model's own; text-embedding-3-* can "
    "make shorter ones).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10000),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Chunks claimed, embedded and stored per transaction.",
)
@click.option(
    "--no-switch",
    is_flag=True,
    help="Compute the new embeddings but do not switch; run again without it to switch.",
)
@click.option("--status", "show_status", is_flag=True, help="Show the latest re-embed and exit.")
@click.option(
    "--cancel", is_flag=True, help="Cancel the running re-embed (its new embeddings are dropped)."
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation (--cancel).")
@progress_option
@json_option
@pass_state
def reembed_command(
    state: CliState,
    model: str | None,
    provider: str | None,
    dims: int | None,
    batch_size: int,
    no_switch: bool,
    show_status: bool,
    cancel: bool,
    yes: bool,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Switch every tenant's embeddings to another model without downtime.

    \b
    New embeddings are computed beside the stored ones while every search keeps answering
    with the current model; then one transaction switches: the model and dimension are
    recorded in pgrag.embedding_config, the HNSW indexes rebuilt, the old embeddings dropped.
    Writes to pgrag.chunks wait during the switch; searches wait only for its last step (a
    rename). Several processes may run the same command to share the work; a run that is
    killed is resumed by running the command again. Ingests may go on meanwhile: what they
    write is embedded again before the switch.

    \b
      pgrag reembed --model text-embedding-3-small --dims 512
      pgrag reembed --status
      pgrag reembed --cancel
    """
    dsn = state.dsn()
    if show_status or cancel:
        if model or provider or dims:
            raise ConfigError("--status and --cancel take no --model, --embedder or --dims.")
        with connect(dsn, autocommit=True) as conn:
            status = reembed_status(conn)
            if cancel:
                if status is None or status.status != "running":
                    raise NothingToDo("no re-embed is running: nothing to cancel.")
                if not yes:
                    try:
                        click.confirm(
                            f"Cancel re-embed {status.reembed_id} to {status.provider}:"
                            f"{status.model} and drop its {status.embedded} new embeddings?",
                            abort=True,
                            err=True,
                        )
                    except click.Abort:
                        raise ConfigError(
                            "nothing cancelled: not confirmed (pass --yes to cancel without "
                            "asking)."
                        ) from None
                cancelled = cancel_reembed(conn)
                status = reembed_status(conn)
        if status is None:
            if as_json:
                echo_json(None)
            raise NothingToDo("no re-embed has run in this database.")
        if as_json:
            echo_json(status.as_dict())
            return
        if cancel and not cancelled:
            click.echo("the re-embed ended meanwhile: nothing to cancel")
        click.echo(_describe(status))
        return
    if not model:
        raise ConfigError("name the new model: pgrag reembed --model MODEL (see --help).")
    if provider is None:
        provider = provider_for_model(model)
    embedder = get_embedder(provider, model, dims, for_documents=True)
    summary = reembed(
        dsn,
        embedder,
        batch_size=batch_size,
        switch=not no_switch,
        progress=progress_mode(progress if progress is not None else not as_json),
    )
    if as_json:
        echo_json(summary.as_dict())
    else:
        _print_summary(summary)
    if summary.cancelled:
        raise NothingToDo("the re-embed was cancelled by another process.")
