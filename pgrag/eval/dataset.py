"""BEIR-format datasets: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgrag.errors import ConfigError


@dataclass
class BeirDataset:
    """A BEIR-format dataset: corpus, the judged queries, and their relevance judgements."""

    name: str
    path: Path
    corpus: dict[str, tuple[str, str]]  # doc id -> (title, text)
    queries: dict[str, str]  # query id -> text, judged queries only, file order
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> relevance

    def uri(self, doc_id: str) -> str:
        return f"beir:{self.name}/{doc_id}"

    def doc_id(self, uri: str) -> str | None:
        prefix = f"beir:{self.name}/"
        return uri[len(prefix) :] if uri.startswith(prefix) else None


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg}).") from exc


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id<TAB>corpus-id<TAB>score`` lines (a header line is skipped)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) < 3:
                raise ConfigError(f"{path}:{number}: expected query-id, corpus-id and score.")
            try:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
            except ValueError as exc:
                raise ConfigError(
                    f"{path}:{number}: the score {parts[2]!r} is no integer."
                ) from exc
    return qrels


def load_beir(
    path: Path, qrels_file: Path | None = None, limit_queries: int | None = None
) -> BeirDataset:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` (or ``qrels_file``)."""
    path = Path(path)
    corpus_file, queries_file = path / "corpus.jsonl", path / "queries.jsonl"
    qrels_file = qrels_file or path / "qrels" / "test.tsv"
    for required in (corpus_file, queries_file, qrels_file):
        if not required.is_file():
            raise ConfigError(
                f"{required} is missing: a BEIR dataset folder holds corpus.jsonl, "
                "queries.jsonl and qrels/test.tsv (or pass --qrels FILE)."
            )
    corpus = {
        str(row["_id"]): (str(row.get("title") or ""), str(row.get("text") or ""))
        for row in _jsonl(corpus_file)
    }
    qrels = load_qrels(qrels_file)
    queries = {
        str(row["_id"]): str(row["text"])
        for row in _jsonl(queries_file)
        if str(row["_id"]) in qrels
    }
    if limit_queries is not None:
        queries = dict(list(queries.items())[:limit_queries])
    qrels = {qid: judged for qid, judged in qrels.items() if qid in queries}
    if not queries:
        raise ConfigError(f"no query in {queries_file} has a judgement in {qrels_file}.")
    return BeirDataset(path.resolve().name, path, corpus, queries, qrels)
