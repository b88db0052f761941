"""Sources: files, folders (walked recursively) and http(s) URLs, opened for a run; ``--prune``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from pgrag import tracing
from pgrag.db import DEFAULT_TENANT, connect
from pgrag.errors import ConfigError, ExtractionError, Interrupted, NothingToDo
from pgrag.ingest.lifecycle import FailedSource
from pgrag.ingest.options import IngestOptions, IngestSummary
from pgrag.ingest.plan import one_line_error
from pgrag.ingest.run import IngestRun
from pgrag.pipeline.embedders import Embedder
from pgrag.pipeline.extract import (
    EXTENSIONS,
    ExtractedDocument,
    discover_paths,
    extract,
    is_url,
    source_type_for,
)
from pgrag.progress import ProgressMode


def _open_sources(sources: Iterable[str]) -> Iterator[ExtractedDocument | FailedSource]:
    for source in sources:
        uri = source if is_url(source) else _abspath(source)
        try:
            with tracing.span("extract", {"pgrag.document.uri": uri}):
                opened = extract(source)
        except Exception as exc:  # any error of one source (a parser's too) fails it alone
            stype = "url" if uri.startswith("http") else (source_type_for(source) or "text")
            reason = str(exc) if isinstance(exc, ExtractionError) else one_line_error(exc)
            yield FailedSource(uri, stype, reason)
            continue
        yield opened


def _abspath(path: str) -> str:
    return str(Path(path).resolve())


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def ingest_paths(
    dsn: str,
    paths: Sequence[str],
    *,
    glob: str | None = None,
    tenant: str = DEFAULT_TENANT,
    embedder: Embedder | None = None,
    options: IngestOptions | None = None,
    progress: bool | ProgressMode = False,
    prune: bool = False,
) -> IngestSummary:
    """Ingest files, folders (walked recursively, ``glob`` to filter) and http(s) URLs.

    ``prune``: afterwards remove the tenant's documents stored under one of the folders whose
    file no longer exists (one transaction). Raises :class:`NothingToDo` when no file matches
    (and nothing was pruned).
    """
    for p in paths:
        if not p.startswith(("http://", "https://")) and not Path(p).exists():
            raise ConfigError(f"{p}: no such file or folder")
    folders = [Path(p).resolve() for p in paths if not p.startswith("http") and Path(p).is_dir()]
    if prune and not folders:
        raise ConfigError("--prune removes documents of deleted files under a folder: name one.")
    options = options or IngestOptions()
    run: IngestRun | None = None
    try:
        sources = list(discover_paths(paths, glob))
        if sources:
            sizes = {_abspath(p): _size(p) for p in sources if not is_url(p)}
            run = IngestRun(
                dsn, tenant, embedder, options, progress, len(sources), source_bytes=sizes
            )
            summary = run.ingest(_open_sources(sources))
        else:
            summary = IngestSummary()
    except KeyboardInterrupt as exc:  # Ctrl-C just before or just after the run's own handling
        raise Interrupted(
            run.late_interrupt_message()
            if run is not None
            else "interrupted before any document was read: nothing was written. Run the same "
            "command again to ingest."
        ) from exc
    if prune:
        try:
            _prune(dsn, tenant, folders, summary)
        except KeyboardInterrupt as exc:
            raise Interrupted(
                "interrupted while pruning, after the ingest itself finished. The removal is "
                "one transaction, done whole or not at all: run the same command again to "
                "make sure (finished documents are skipped)."
            ) from exc
    if not sources and not summary.documents_removed:
        raise NothingToDo(_nothing_found(paths, glob))
    return summary


def _prune(dsn: str, tenant: str, folders: list[Path], summary: IngestSummary) -> None:
    """Remove the tenant's documents under ``folders`` whose file no longer exists."""
    from pgrag.documents import delete_documents, missing_under

    with connect(dsn, autocommit=True) as conn:
        ids = sorted({i for folder in folders for i in missing_under(conn, tenant, folder)})
        if ids:
            summary.documents_removed = len(delete_documents(conn, tenant, document_ids=ids))


def _nothing_found(paths: Sequence[str], glob: str | None) -> str:
    where = ", ".join(paths)
    if glob:
        return f"no file matches --glob {glob!r} in {where}: nothing to ingest."
    known = " ".join(sorted(EXTENSIONS))
    return (
        f"no supported file in {where} (extensions {known}): nothing to ingest. "
        "Pass --glob to choose files by name."
    )
