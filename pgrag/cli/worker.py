"""``pgrag worker``: process the document queue (documents submitted through SQL or RPC)."""

from __future__ import annotations

import os
import sys

import click

from pgrag.cli.common import echo_json, json_option, pass_state, progress_option
from pgrag.cli.state import CliState
from pgrag.ingest import IngestOptions
from pgrag.pipeline.chunking import CHUNKERS
from pgrag.progress import Progress, progress_mode
from pgrag.worker import FetchLimits, QueueWorker, WorkerOptions, WorkerSummary
from pgrag.worker.fetch import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT
from pgrag.worker.sandbox import (
    DEFAULT_DOCUMENT_MEMORY_MB,
    DEFAULT_DOCUMENT_TIMEOUT,
    DocumentLimits,
)


@click.command()
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Batches processed at once by this process (each claims its own).",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 1000),
    default=64,
    show_default=True,
    help="Documents claimed at a time (one lease, embedded and committed together).",
)
@click.option(
    "--once",
    is_flag=True,
    help="Process what is due, then exit (documents waiting for a later retry stay queued).",
)
@click.option(
    "--lease",
    type=click.FloatRange(1, 86400),
    default=60.0,
    show_default=True,
    help="Seconds a claim holds its documents; renewed while working. A killed worker's "
    "documents return to the queue when it ends.",
)
@click.option(
    "--poll",
    type=click.FloatRange(0.1, 3600),
    default=5.0,
    show_default=True,
    help="Seconds between looks at the queue when no notification (LISTEN pgrag_queue) came.",
)
@click.option(
    "--stop-timeout",
    type=click.FloatRange(0, 3600),
    default=5.0,
    show_default=True,
    help="On SIGTERM/SIGINT, seconds the current batch may take to finish before it is "
    "cancelled and released (a second signal: at once).",
)
@click.option(
    "--chunker",
    type=click.Choice(CHUNKERS),
    default="tokens",
    show_default=True,
    help="As pgrag ingest: tokens (structure-aware) or words (fixed windows).",
)
@click.option("--chunk-size", type=click.IntRange(min=2), default=None, help="As pgrag ingest.")
@click.option("--overlap", type=click.IntRange(min=0), default=None, help="As pgrag ingest.")
@click.option(
    "--language",
    default="english",
    show_default=True,
    help="Text-search configuration of the chunks (english, simple, german, ...).",
)
@click.option(
    "--fetch-timeout",
    type=click.FloatRange(0.1, 3600),
    default=DEFAULT_TIMEOUT,
    envvar="PGRAG_FETCH_TIMEOUT",
    show_default=True,
    help="Seconds a submitted URL's fetch may take, redirects included (env PGRAG_FETCH_TIMEOUT).",
)
@click.option(
    "--fetch-max-bytes",
    type=click.IntRange(1),
    default=DEFAULT_MAX_BYTES,
    envvar="PGRAG_FETCH_MAX_BYTES",
    show_default=True,
    help="Largest response body fetched for a submitted URL (env PGRAG_FETCH_MAX_BYTES).",
)
@click.option(
    "--document-timeout",
    type=click.FloatRange(0.1, 86400),
    default=DEFAULT_DOCUMENT_TIMEOUT,
    envvar="PGRAG_DOCUMENT_TIMEOUT",
    show_default=True,
    help="Seconds one document's extraction and chunking may take; over it, the document ends "
    "in error (env PGRAG_DOCUMENT_TIMEOUT).",
)
@click.option(
    "--document-memory",
    type=click.IntRange(16, 1 << 20),
    default=DEFAULT_DOCUMENT_MEMORY_MB,
    envvar="PGRAG_DOCUMENT_MEMORY",
    show_default=True,
    help="MiB of memory one document's extraction and chunking may use; over it, the document "
    "ends in error (env PGRAG_DOCUMENT_MEMORY).",
)
@progress_option
@json_option
@pass_state
def worker(
    state: CliState,
    concurrency: int,
    batch: int,
    once: bool,
    lease: float,
    poll: float,
    stop_timeout: float,
    chunker: str,
    chunk_size: int | None,
    overlap: int | None,
    language: str,
    fetch_timeout: float,
    fetch_max_bytes: int,
    document_timeout: float,
    document_memory: int,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Process the document queue: documents submitted with public.submit_document (SQL or
    PostgREST) are fetched (URLs the operator allowed in pgrag.fetch_allowlist), chunked,
    embedded with the database's model and swapped in, each document atomically.

    \b
    Wakes on LISTEN pgrag_queue (polls as a fallback); claims with FOR UPDATE SKIP LOCKED,
    so any number of workers share a queue. Failed attempts are retried after a growing delay
    up to pgrag.queue_settings.max_attempts, then the document ends in error with the reason.
    Each document is extracted and chunked in a child process under --document-timeout and
    --document-memory: a document over a limit ends in error, the worker goes on.
    SIGTERM/SIGINT: stop claiming, finish or release the current batch. --once exits when
    nothing is due, with exit status 1 when a document failed for good.
    """
    options = WorkerOptions(
        concurrency=concurrency,
        batch=batch,
        lease=lease,
        poll=poll,
        stop_timeout=stop_timeout,
        once=once,
        ingest=IngestOptions(
            chunker=chunker, chunk_size=chunk_size, overlap=overlap, language=language
        ),
        fetch=FetchLimits(timeout=fetch_timeout, max_bytes=fetch_max_bytes),
        document=DocumentLimits(timeout=document_timeout, memory_mb=document_memory),
    )
    mode = progress_mode(progress if progress is not None else (False if as_json else None))
    shown = Progress("worker", None, mode)
    runner = QueueWorker(
        state.dsn(), options, progress=shown, say=lambda line: click.echo(line, err=True)
    )
    summary = runner.run()
    if as_json:
        echo_json({"worker_id": runner.worker_id, **summary.as_dict()})
    else:
        print_summary(summary)
    status = 1 if once and summary.documents_failed else 0
    if runner.signalled:
        # Stopped by a signal: everything was committed or released; leave without the
        # interpreter's teardown, which a model thread still ending its slice could abort.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def print_summary(s: WorkerSummary) -> None:
    click.echo(
        f"documents: {s.documents_done} ready, {s.documents_unchanged} unchanged, "
        f"{s.documents_retrying} to retry, {s.documents_failed} failed"
        + (f", {s.documents_superseded} superseded" if s.documents_superseded else "")
        + (f", {s.documents_released} released" if s.documents_released else "")
    )
    click.echo(
        f"chunks:    {s.chunks_written} written, {s.chunks_embedded} embedded, "
        f"{s.chunks_reused} reused"
    )
    batches = f"{s.batches} batch{'' if s.batches == 1 else 'es'}"
    click.echo(f"time:      {s.seconds:.1f} s ({batches})")
