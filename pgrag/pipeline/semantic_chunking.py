"""Semantic chunking: chunk boundaries where the topic changes, inside the structural limits.

:class:`SemanticChunker` is the token chunker (:class:`~pgrag.pipeline.chunking.TokenChunker`)
with one more reason to start a chunk: a *breakpoint*, a gap between two consecutive sentences
where the embeddings of the text before and after it are far apart. Everything else is the
token chunker's: a chunk never exceeds ``chunk_size`` model tokens, never spans two sections
(heading paths), tables and code blocks stay whole when they fit, an over-long sentence is cut
between words, consecutive chunks overlap by whole trailing sentences (``overlap`` tokens at
most, after a breakpoint too), pages are recorded as ``page``/``metadata.page_end``; a page
boundary is no breakpoint by itself (a paragraph continuing on the next page stays together).

How a breakpoint is found: every sentence (a table or code block counts as one unit, compared
by its first ``MAX_UNIT_CHARS`` characters) is embedded with the ingest's own embedder, in
batches. The distance of a gap is ``1 - cosine`` between the mean embedding of the ``GROUP``
sentences before it and of the ``GROUP`` after it (within the section). A gap is a breakpoint
when its distance is a local peak (farther than its neighbours': of the high gaps around a topic
change, only the change) and above the rule's threshold: ``pN``, the N-th percentile of the gap
distances of the document (so about (100 - N) % of its gaps are candidates), or a fixed
distance (``0.8``). A breakpoint is honoured only once the chunk holds ``chunk_size // 4``
tokens of its own (no tiny chunks). Huge documents are processed in windows of
``WINDOW_UNITS`` sentences (the percentile is then the window's, and the gap before a
window's first sentence is no breakpoint): memory stays bounded.

Output is deterministic for a given model and runtime (no sampling, ties broken by position).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pgrag.errors import ConfigError
from pgrag.pipeline.chunking import TokenChunker, TokenCounter, _Piece
from pgrag.pipeline.extract import Block

EmbedMany = Callable[[Sequence[str]], Any]
"""The embedder's ``embed``: texts in, one unit-length vector per text out."""

DEFAULT_BREAKPOINT = "p70"  # chosen by cross-validation (benchmarks/chunking.py)
GROUP = 2  # sentences on each side of a gap whose mean embeddings are compared
WINDOW_UNITS = 1024  # sentences embedded and thresholded together (bounds memory)
MAX_UNIT_CHARS = 2000  # a table or code block is compared by its start

_PERCENTILE = re.compile(r"p(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Breakpoint:
    """Where a chunk may end: gaps above a ``percentile`` of the document's distances, or
    above a fixed cosine ``distance``."""

    percentile: float | None = None
    distance: float | None = None

    @property
    def spec(self) -> str:
        """The rule as written on the command line and recorded with each document."""
        if self.percentile is not None:
            return f"p{self.percentile:g}"
        return f"{self.distance:g}"

    def threshold(self, distances: np.ndarray) -> float:
        if self.percentile is not None:
            return float(np.percentile(distances, self.percentile))
        assert self.distance is not None
        return self.distance


def parse_breakpoint(spec: str | None) -> Breakpoint:
    """``pN`` (0 < N < 100: percentile of the document's gap distances) or a cosine distance
    between 0 and 2 (exclusive); ``None``: :data:`DEFAULT_BREAKPOINT`."""
    text = (spec or DEFAULT_BREAKPOINT).strip().lower()
    match = _PERCENTILE.fullmatch(text)
    try:
        value = float(match.group(1) if match else text)
    except ValueError:
        value = float("nan")
    if match and 0 < value < 100:
        return Breakpoint(percentile=value)
    if not match and 0 < value < 2:
        return Breakpoint(distance=value)
    raise ConfigError(
        f"--breakpoint {spec!r}: use pN (a percentile of the document's sentence distances, "
        "0 < N < 100, e.g. p90) or a cosine distance between 0 and 2 (e.g. 0.8)."
    )


class SentenceEmbedder:
    """A twin of the ingest's embedder for the chunker's sentence embeddings: the same model and
    settings, with its own runtime session (the local model: the ingest embeds chunks on another
    thread meanwhile) and its own token count, which :meth:`take_usage` hands to the run to
    record in ``pgrag.token_usage`` beside the chunks' own."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = copy.copy(embedder)
        self.embedder.__dict__.pop("_model", None)  # a session of its own, loaded on first use
        self.embedder.tokens_used = 0
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        return self.embedder.embed(texts)

    def take_usage(self) -> tuple[int, int]:
        """Tokens and calls since the last call (or since the start)."""
        usage = (int(self.embedder.tokens_used), self.calls)
        self.embedder.tokens_used, self.calls = 0, 0
        return usage


def gap_distances(vectors: np.ndarray, sections: Sequence[int], group: int = GROUP) -> np.ndarray:
    """Distance of the gap before each unit (NaN before the first unit of a section): 1 minus
    the cosine of the mean of up to ``group`` vectors before it and up to ``group`` after."""
    n = len(sections)
    out = np.full(n, np.nan)
    start = 0
    for i in range(1, n + 1):
        if i < n and sections[i] == sections[start]:
            continue
        end = i  # units start..end-1 form one section
        for gap in range(start + 1, end):
            left = vectors[max(start, gap - group) : gap].sum(axis=0)
            right = vectors[gap : min(end, gap + group)].sum(axis=0)
            norm = float(np.linalg.norm(left) * np.linalg.norm(right))
            out[gap] = 1.0 - float(left @ right) / norm if norm > 0 else 1.0
        start = i
    return out


def breakpoints(distances: np.ndarray, threshold: float) -> list[int]:
    """Gaps above ``threshold`` that are local peaks (no farther than the gap after them, and
    farther than the gap before them): of a run of high gaps around a topic change, only the
    change itself."""
    d = np.nan_to_num(distances, nan=-np.inf)
    before = np.concatenate(([-np.inf], d[:-1]))
    after = np.concatenate((d[1:], [-np.inf]))
    return [int(i) for i in np.flatnonzero((d > threshold) & (d > before) & (d >= after))]


class SemanticChunker(TokenChunker):
    """The token chunker, cutting also where the topic changes (see the module's docs)."""

    def __init__(
        self,
        count_many: TokenCounter,
        chunk_size: int,
        overlap: int,
        language: str,
        embed: EmbedMany,
        breakpoint: Breakpoint,
    ) -> None:
        super().__init__(count_many, chunk_size, overlap, language)
        self.embed = embed
        self.breakpoint = breakpoint
        self.min_cut_tokens = chunk_size // 4

    def _blocks(self, blocks: Iterable[Block]) -> Iterator[tuple[Block, list[_Piece]]]:
        window: list[tuple[Block, list[_Piece]]] = []
        units = 0
        for block in blocks:
            pieces = self._pieces(block)
            window.append((block, pieces))
            units += len(pieces)
            if units >= WINDOW_UNITS:
                self._mark(window)
                yield from window
                window, units = [], 0
        self._mark(window)
        yield from window

    def _mark(self, window: list[tuple[Block, list[_Piece]]]) -> None:
        """Set ``cut`` on the pieces that start after a breakpoint of the window."""
        texts: list[str] = []
        owners: list[_Piece] = []
        sections: list[int] = []
        section = 0
        path: tuple[str, ...] | None = None
        for block, pieces in window:
            if block.kind == "heading" or block.heading_path != path:
                section += 1  # a new section: the chunker cuts there anyway
                path = block.heading_path
            if block.kind == "heading" or not pieces:
                continue
            if block.kind in ("table", "code"):  # one unit, cut before it at most
                texts.append(block.text[:MAX_UNIT_CHARS])
                owners.append(pieces[0])
                sections.append(section)
                continue
            for piece in pieces:
                texts.append(piece.text)
                owners.append(piece)
                sections.append(section)
        if len(texts) < 2 or len(set(sections)) == len(sections):
            return
        vectors = np.asarray(self.embed(texts), dtype=np.float64)
        distances = gap_distances(vectors, sections)
        gaps = distances[~np.isnan(distances)]
        for i in breakpoints(distances, self.breakpoint.threshold(gaps)):
            owners[i].cut = True
