"""A team's golden question set: JSONL, one question per line, validated line by line.

Each line is a JSON object with ``question`` (required) and optionally ``id``, ``tenant``,
``expected_sources``, ``expected_titles`` and ``reference_answer``; any other key is refused
(a misspelt ``expected_source`` would otherwise silently drop the question from the retrieval
metrics). Every invalid line is reported as ``FILE:LINE: what is wrong``.

How an expected source matches a document (:func:`source_matches`): both sides are normalised
(a ``file://`` prefix dropped, ``\\`` turned into ``/``, a leading ``./`` and a trailing ``/``
removed), then the entry matches when it equals the document's ``source_uri`` or, for an
entry that is not a URL, when it is a suffix of the stored path on a ``/`` boundary:
``samples/ingestion.md`` matches ``/home/me/pgrag/samples/ingestion.md`` but ``ion.md`` does
not. An expected title matches a document whose title is the same, ignoring case and runs
of whitespace.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgrag.errors import ConfigError

MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_QUESTIONS = 10_000
MAX_QUESTION_CHARS = 2_000
MAX_REFERENCE_CHARS = 20_000
MAX_EXPECTED = 100
MAX_NAME_CHARS = 2_048
"""Bounds of a golden file: its size, its questions, and each field's length."""

KEYS = ("id", "question", "tenant", "expected_sources", "expected_titles", "reference_answer")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


class GoldenFileError(ConfigError):
    """A golden file that cannot be used; ``problems`` holds one line per invalid line."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


@dataclass(frozen=True)
class GoldenQuestion:
    """One validated line of a golden file."""

    id: str
    question: str
    tenant: str
    line: int
    expected_sources: tuple[str, ...] = ()
    expected_titles: tuple[str, ...] = ()
    reference_answer: str | None = None

    @property
    def expected(self) -> list[str]:
        """Every expected item, as reported: sources as given, titles as ``title:TITLE``."""
        return [*self.expected_sources, *(f"title:{t}" for t in self.expected_titles)]

    @property
    def judged_for_retrieval(self) -> bool:
        return bool(self.expected_sources or self.expected_titles)


@dataclass
class _Line:
    """The fields of one line being validated, and what is wrong with them."""

    where: str
    data: dict[str, Any]
    problems: list[str] = field(default_factory=list)

    def text(self, key: str, limit: int, *, required: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            need = "is missing" if value is None else "must be a non-empty string"
            self.problems.append(f"{self.where}: {key!r} {need}.")
            return None
        if len(value) > limit:
            self.problems.append(
                f"{self.where}: {key!r} has {len(value)} characters; at most {limit} are allowed."
            )
            return None
        return value.strip()

    def names(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        ok = isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)
        if not ok:
            self.problems.append(f"{self.where}: {key!r} must be a list of non-empty strings.")
            return ()
        if len(value) > MAX_EXPECTED:
            self.problems.append(f"{self.where}: {key!r} has {len(value)} items; at most 100.")
            return ()
        if any(len(v) > MAX_NAME_CHARS for v in value):
            self.problems.append(f"{self.where}: an item of {key!r} is over 2048 characters.")
            return ()
        return tuple(dict.fromkeys(v.strip() for v in value))


def parse_line(raw: str, where: str, line: int, default_tenant: str) -> GoldenQuestion | str:
    """One line as a :class:`GoldenQuestion`, or the one-line problem with it."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return f"{where}: not valid JSON ({getattr(exc, 'msg', exc)})."
    if not isinstance(data, dict):
        return f"{where}: expected a JSON object, found {type(data).__name__}."
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        return f"{where}: unknown key {', '.join(map(repr, unknown))}; use {', '.join(KEYS)}."
    fields_ = _Line(where, data)
    question = fields_.text("question", MAX_QUESTION_CHARS, required=True)
    ident = data.get("id")
    if ident is not None and (isinstance(ident, bool) or not isinstance(ident, str | int)):
        fields_.problems.append(f"{where}: 'id' must be a string or an integer.")
    tenant = fields_.text("tenant", 200) or default_tenant
    sources = fields_.names("expected_sources")
    titles = fields_.names("expected_titles")
    reference = fields_.text("reference_answer", MAX_REFERENCE_CHARS)
    if fields_.problems or question is None:
        return fields_.problems[0]
    name = str(ident).strip() if isinstance(ident, str | int) and str(ident).strip() else None
    return GoldenQuestion(
        name or f"line-{line}", question, tenant, line, sources, titles, reference
    )


def load_golden(path: Path, default_tenant: str) -> list[GoldenQuestion]:
    """The questions of the golden file ``path`` (``default_tenant`` for lines naming none),
    or :class:`GoldenFileError` listing every invalid line (and the file's bounds)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise GoldenFileError(f"{path}: cannot read the golden file ({exc.strerror}).") from exc
    if size > MAX_FILE_BYTES:
        raise GoldenFileError(
            f"{path}: {size} bytes; a golden file holds at most 10 MiB: split it."
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise GoldenFileError(f"{path}: not UTF-8 text ({exc.reason}).") from exc
    questions: list[GoldenQuestion] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        parsed = parse_line(raw, f"{path}:{number}", number, default_tenant)
        if isinstance(parsed, str):
            problems.append(parsed)
        elif parsed.id in seen:
            problems.append(
                f"{path}:{number}: id {parsed.id!r} is already used on line {seen[parsed.id]}."
            )
        else:
            seen[parsed.id] = number
            questions.append(parsed)
    if len(questions) + len(problems) > MAX_QUESTIONS:
        raise GoldenFileError(f"{path}: more than {MAX_QUESTIONS} questions: split the file.")
    if problems:
        more = f" (and {len(problems) - 1} more invalid lines)" if len(problems) > 1 else ""
        raise GoldenFileError(problems[0] + more, problems)
    if not questions:
        raise GoldenFileError(f"{path}: no question; write one JSON object per line.")
    return questions


def normalise_source(text: str) -> str:
    """A source URI or path as compared: no ``file://``, ``/`` separators, no ``./`` or
    trailing ``/``."""
    value = text.strip().replace("\\", "/")
    if value.lower().startswith("file://"):
        value = value[len("file://") :]
    while value.startswith("./"):
        value = value[2:]
    return value.rstrip("/") or value


def source_matches(expected: str, source_uri: str) -> bool:
    """Whether the expected source ``expected`` names the document stored as ``source_uri``:
    equal once normalised, or (for a path, not a URL) a suffix of it on a ``/`` boundary."""
    want, have = normalise_source(expected), normalise_source(source_uri)
    if not want:
        return False
    if want == have:
        return True
    if _SCHEME.match(want):
        return False
    return have.endswith("/" + want.lstrip("/"))


def title_matches(expected: str, title: str | None) -> bool:
    """Whether ``title`` is the expected title, ignoring case and runs of whitespace."""
    return (
        bool(title)
        and " ".join(expected.split()).casefold() == " ".join((title or "").split()).casefold()
    )


def expected_items(question: GoldenQuestion, source_uri: str, title: str | None) -> list[int]:
    """The indexes (in :attr:`GoldenQuestion.expected`) of the expected items the document
    matches."""
    sources = [
        i for i, want in enumerate(question.expected_sources) if source_matches(want, source_uri)
    ]
    offset = len(question.expected_sources)
    titles = [
        offset + i for i, want in enumerate(question.expected_titles) if title_matches(want, title)
    ]
    return sources + titles
