"""Sources: files, folders (walked recursively) and http(s) URLs, opened for a run; ``--prune``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from pgrag.db import DEFAULT_TENANT, connect
from pgrag.embedders import Embedder
from pgrag.errors import ConfigError, ExtractionError, NothingToDo
from pgrag.extract import EXTENSIONS, ExtractedDocument, discover_paths, extract, source_type_for
from pgrag.ingest.lifecycle import FailedSource
from pgrag.ingest.options import IngestOptions, IngestSummary
from pgrag.ingest.run import IngestRun
from pgrag.progress import ProgressMode


def _open_sources(sources: Iterable[str]) -> Iterator[ExtractedDocument | FailedSource]:
    for source in sources:
        try:
            yield extract(source)
        except ExtractionError as exc:
            uri = source if source.startswith(("http://", "https://")) else _abspath(source)
            stype = "url" if uri.startswith("http") else (source_type_for(source) or "text")
            yield FailedSource(uri, stype, str(exc))


def _abspath(path: str) -> str:
    return str(Path(path).resolve())


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
    sources = list(discover_paths(paths, glob))
    options = options or IngestOptions()
    if sources:
        run = IngestRun(dsn, tenant, embedder, options, progress, len(sources))
        summary = run.ingest(_open_sources(sources))
    else:
        summary = IngestSummary()
    if prune:
        from pgrag.documents import delete_documents, missing_under

        with connect(dsn, autocommit=True) as conn:
            ids = sorted({i for folder in folders for i in missing_under(conn, tenant, folder)})
            if ids:
                summary.documents_removed = len(delete_documents(conn, tenant, document_ids=ids))
    if not sources and not summary.documents_removed:
        raise NothingToDo(_nothing_found(paths, glob))
    return summary


def _nothing_found(paths: Sequence[str], glob: str | None) -> str:
    where = ", ".join(paths)
    if glob:
        return f"no file matches --glob {glob!r} in {where}: nothing to ingest."
    known = " ".join(sorted(EXTENSIONS))
    return (
        f"no supported file in {where} (extensions {known}): nothing to ingest. "
        "Pass --glob to choose files by name."
    )
