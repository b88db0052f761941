"""Chunkers: blocks in, chunks out, sized in the embedding model's own tokens.

``tokens`` (default) splits along the document's structure: a chunk never spans two sections
(heading paths), prefers paragraph boundaries, falls back to sentences, and cuts inside a
sentence (between words) only when one sentence alone exceeds the budget. Table rows and code
lines are never split. Consecutive chunks of a section overlap by whole trailing sentences
(``overlap`` tokens at most, counted inside ``chunk_size``); ``overlap_chars`` records how
many leading characters of a chunk repeat the previous one.

``semantic`` (:mod:`pgrag.pipeline.semantic_chunking`) is ``tokens`` that also cuts where the
embeddings of consecutive sentences drift apart (a ``_Piece`` marked ``cut``).

``words`` cuts fixed windows of ``chunk_size`` words overlapping by ``overlap`` words (fewer
words when a window would exceed the model's token limit).

Limits hold for any input: a "word" longer than ``MAX_WORD_CHARS`` characters (a DNA line, a
hash run, minified code), which a WordPiece tokenizer reads as one unknown token, is cut into
pieces of at most that many characters joined by a space, and a piece still over the budget is
cut further; ``token_count`` is the real token count of the stored content. A heading is never a
chunk of its own: it starts the chunk of the text under it (headings of empty sections are
carried down to the next text, or dropped when none follows). A chunk's ``page`` is the page
where its own text starts (not its overlap); ``metadata.page_end`` the last page it spans.

Both are pure Python generators: memory stays bounded by one section (or window).
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgrag.errors import ConfigError
from pgrag.pipeline.extract import Block

CHUNKERS = ("tokens", "words")
# What pgrag ingest offers: semantic also embeds every sentence, so it needs the embedder (the
# worker's sandbox and SQL's chunk_text have only a tokenizer: they offer CHUNKERS).
INGEST_CHUNKERS = (*CHUNKERS, "semantic")
# WordPiece (BERT, all-MiniLM) reads a word longer than 100 characters as one [UNK] token.
MAX_WORD_CHARS = 100
TokenCounter = Callable[[Sequence[str]], list[int]]


@dataclass
class Chunk:
    """One chunk as stored in ``pgrag.chunks``."""

    index: int
    content: str
    token_count: int
    page: int | None = None
    heading_path: tuple[str, ...] = ()
    overlap_chars: int = 0
    language: str = "english"
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode("utf-8")).hexdigest()


def default_sizes(chunker: str, max_tokens: int) -> tuple[int, int]:
    """Default (chunk_size, overlap) for a model truncating inputs at ``max_tokens``.

    tokens: at most 512 tokens with 12.5 % overlap, but inside the model's window (all-MiniLM
    truncates at 256 word pieces including [CLS] and [SEP]: 250 tokens, 32 overlap).
    words: 500 words with 50 overlap when the model reads that many, else what fits.
    """
    if chunker == "words":
        if max_tokens >= 1024:
            return 500, 50
        words = int((max_tokens - 6) / 1.4)  # ~1.3-1.4 word pieces per English word
        return words, max(1, words // 10)
    size = min(512, max_tokens - 6)
    return size, size // 8


def chunk_settings(
    chunker: str,
    max_tokens: int,
    model_name: str,
    chunk_size: int | None = None,
    overlap: int | None = None,
) -> tuple[int, int]:
    """The (chunk_size, overlap) a chunk run uses: the given values, else the defaults of
    :func:`default_sizes` (a given chunk_size alone gets 1/8 (tokens) or 1/10 (words) of it as
    overlap). A tokens chunk larger than the model reads (``max_tokens`` minus [CLS] and [SEP])
    is refused: its end would be truncated away when embedded."""
    sizes = default_sizes(chunker, max_tokens)
    size = chunk_size or sizes[0]
    if overlap is None:
        overlap = size // (10 if chunker == "words" else 8) if chunk_size else sizes[1]
    if chunker != "words" and size > max_tokens - 2:
        raise ConfigError(
            f"--chunk-size {size} exceeds what {model_name} reads "
            f"({max_tokens} tokens): its chunks would be truncated."
        )
    return size, overlap


# -- sentences -------------------------------------------------------------------------------------

_ABBREV = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|cf|al|Dr|Mr|Mrs|Ms|Prof|Fig|Eq|No|Vol|approx|resp)\.|\b[A-Z]\.)$"
)
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph (a light rule-based splitter aware of common abbreviations)."""
    out: list[str] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        candidate = text[start : m.start()].rstrip()
        if _ABBREV.search(candidate):
            continue
        end = m.start() + len(m.group(0).rstrip())
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return out


# -- token chunker ---------------------------------------------------------------------------------


@dataclass
class _Piece:
    text: str
    tokens: int
    page: int | None
    sep: str  # joins this piece to the previous one inside a chunk
    table: bool = False
    heading: bool = False
    cut: bool = False  # a semantic breakpoint: a new chunk starts here (SemanticChunker)


def split_words(text: str) -> list[str]:
    """Whitespace-separated words, each longer than ``MAX_WORD_CHARS`` cut into such slices."""
    out: list[str] = []
    for word in text.split():
        if len(word) <= MAX_WORD_CHARS:
            out.append(word)
        else:
            out.extend(word[i : i + MAX_WORD_CHARS] for i in range(0, len(word), MAX_WORD_CHARS))
    return out


_LONG_WORD = re.compile(rf"\S{{{MAX_WORD_CHARS + 1}}}")


def _paragraph_units(block: Block) -> list[tuple[str, str]]:
    """(text, separator-before) units of a block: sentences, rows or lines."""
    if block.kind in ("table", "code"):
        return [(line, "\n") for line in block.text.split("\n") if line.strip()]
    if block.kind == "heading":
        return [(block.text.strip(), "\n\n")]
    lines: list[tuple[str, str]] = []
    current: list[str] = []
    for line in block.text.split("\n"):
        if _LIST_ITEM.match(line):
            if current:
                lines.append((" ".join(current), "\n"))
            current = [line.strip()]
        elif line.strip():
            current.append(line.strip())
    if current:
        lines.append((" ".join(current), "\n"))
    units: list[tuple[str, str]] = []
    for text, sep in lines:
        for i, sentence in enumerate(split_sentences(text)):
            units.append((sentence, sep if i == 0 else " "))
    return units


class TokenChunker:
    # A semantic breakpoint (``_Piece.cut``) starts a new chunk only when the current one holds
    # at least this many tokens of its own (SemanticChunker sets it; no piece is cut here).
    min_cut_tokens = 0

    def __init__(
        self, count_many: TokenCounter, chunk_size: int, overlap: int, language: str
    ) -> None:
        if chunk_size < 8:
            raise ConfigError(f"--chunk-size {chunk_size} is too small (at least 8 tokens).")
        if not 0 <= overlap < chunk_size // 2:
            raise ConfigError(
                f"--overlap {overlap} must be at least 0 and less than half of --chunk-size "
                f"{chunk_size}."
            )
        self.count_many = count_many
        self.size = chunk_size
        self.overlap = overlap
        self.language = language

    def _slice(self, word: str) -> list[tuple[str, int]]:
        """A word over the budget, cut by characters into parts of at most ``size`` tokens."""
        parts = [word]
        counts = self.count_many(parts)
        while any(n > self.size for n in counts):
            nxt: list[str] = []
            for part, n in zip(parts, counts, strict=True):
                if n > self.size and len(part) > 1:
                    half = len(part) // 2
                    nxt.extend((part[:half], part[half:]))
                else:
                    nxt.append(part)
            if len(nxt) == len(parts):  # single characters over the budget: nothing to cut
                break
            parts = nxt
            counts = self.count_many(parts)
        return list(zip(parts, counts, strict=True))

    def _split_long(self, text: str, page: int | None, sep: str) -> list[_Piece]:
        """A sentence longer than the budget (or holding an over-long word), cut between words
        into budget-sized pieces; words longer than MAX_WORD_CHARS are sliced first."""
        words = split_words(text)
        counts = self.count_many(words)
        pieces: list[_Piece] = []
        cur: list[str] = []
        cur_tokens = 0
        for word, n in zip(words, counts, strict=True):
            if n > self.size:  # one "word" longer than a chunk: slice it by characters
                if cur:
                    joiner = sep if not pieces else " "
                    pieces.append(_Piece(" ".join(cur), cur_tokens, page, joiner))
                    cur, cur_tokens = [], 0
                for part, m in self._slice(word):
                    pieces.append(_Piece(part, m, page, sep if not pieces else " "))
                continue
            if cur and cur_tokens + n > self.size:
                pieces.append(_Piece(" ".join(cur), cur_tokens, page, sep if not pieces else " "))
                cur, cur_tokens = [], 0
            cur.append(word)
            cur_tokens += n
        if cur:
            pieces.append(_Piece(" ".join(cur), cur_tokens, page, sep if not pieces else " "))
        return pieces

    def _pieces(self, block: Block) -> list[_Piece]:
        units = _paragraph_units(block)
        long = [_LONG_WORD.search(u[0]) is not None for u in units]
        counted = iter(self.count_many([u[0] for u, lw in zip(units, long, strict=True) if not lw]))
        counts = [0 if lw else next(counted) for lw in long]
        out: list[_Piece] = []
        table = block.kind == "table"
        heading = block.kind == "heading"
        for (text, sep), n, lw in zip(units, counts, long, strict=True):
            if lw or n > self.size:
                out.extend(self._split_long(text, block.page, sep))
            else:
                out.append(_Piece(text, n, block.page, sep, table, heading))
        if out:
            out[0].sep = "\n\n"
        return out

    def _blocks(self, blocks: Iterable[Block]) -> Iterator[tuple[Block, list[_Piece]]]:
        """Each block with its pieces (SemanticChunker marks breakpoints on them)."""
        for block in blocks:
            yield block, self._pieces(block)

    def chunks(self, blocks: Iterable[Block]) -> Iterator[Chunk]:
        index = 0
        current: list[_Piece] = []
        seeded = 0  # leading pieces of `current` repeated from the previous chunk
        path: tuple[str, ...] | None = None

        def emit() -> Chunk:
            nonlocal index
            content, overlap_chars = _join(current, seeded)
            # Pages of the chunk's own text: the overlap repeated from the previous chunk is
            # cited there, not here.
            pages = [p.page for p in current[seeded:] if p.page is not None]
            meta: dict[str, Any] = {}
            if pages and max(pages) != pages[0]:
                meta["page_end"] = max(pages)
            chunk = Chunk(
                index=index,
                content=content,
                token_count=self.count_many([content])[0],
                page=pages[0] if pages else None,
                heading_path=path or (),
                overlap_chars=overlap_chars,
                language=self.language,
                metadata=meta,
            )
            index += 1
            return chunk

        def only_headings() -> bool:
            return all(p.heading for p in current[seeded:])

        def seed() -> tuple[list[_Piece], int]:
            """Trailing whole sentences of the chunk just emitted, within the overlap budget."""
            if self.overlap <= 0:
                return [], 0
            tail: list[_Piece] = []
            total = 0
            for piece in reversed(current):
                if total + piece.tokens > self.overlap:
                    break
                tail.insert(0, piece)
                total += piece.tokens
            if len(tail) == len(current):  # never repeat a whole chunk
                tail = tail[1:]
            return [_Piece(p.text, p.tokens, p.page, p.sep, p.table, p.heading) for p in tail], len(
                tail
            )

        for block, pieces in self._blocks(blocks):
            if block.heading_path != path or block.kind == "heading":
                if current and seeded < len(current) and not only_headings():
                    yield emit()
                    current, seeded = [], 0
                else:
                    # Headings with no text yet (a section that opens with a sub-heading): they
                    # go down with the text under them, as long as they enclose it.
                    current = [
                        p for p in current[seeded:] if p.heading and p.text in block.heading_path
                    ]
                    seeded = 0
                path = block.heading_path
            if not pieces:
                continue
            block_tokens = sum(p.tokens for p in pieces)
            used = sum(p.tokens for p in current)
            fresh = len(current) - seeded
            keep_whole = block.kind in ("table", "code") and block_tokens <= self.size
            if fresh > 0 and used + block_tokens > self.size and only_headings():
                # Headings that leave no room: the text keeps them in its heading path only.
                if keep_whole or used >= self.size // 2:
                    while current and used + block_tokens > self.size:
                        used -= current.pop(0).tokens
                    fresh = len(current)
            elif (
                fresh > 0
                and used + block_tokens > self.size
                and (keep_whole or used >= self.size // 2)
            ):
                # Start the paragraph (or whole table) in a new chunk rather than splitting it.
                yield emit()
                current, seeded = seed()
                used = sum(p.tokens for p in current)
                if keep_whole:
                    while current and used + block_tokens > self.size:
                        used -= current.pop(0).tokens
                        seeded -= 1
            for piece in pieces:
                if (
                    piece.cut
                    and len(current) > seeded
                    and not only_headings()
                    and sum(p.tokens for p in current[seeded:]) >= self.min_cut_tokens
                ):
                    yield emit()
                    current, seeded = seed()
                    used = sum(p.tokens for p in current)
                    while keep_whole and current and used + block_tokens > self.size:
                        used -= current.pop(0).tokens  # the table or code block stays whole
                        seeded -= 1
                used = sum(p.tokens for p in current)
                if used + piece.tokens > self.size and len(current) > seeded and only_headings():
                    while current and used + piece.tokens > self.size:
                        used -= current.pop(0).tokens
                elif used + piece.tokens > self.size and len(current) > seeded:
                    yield emit()
                    current, seeded = seed()
                    used = sum(p.tokens for p in current)
                while seeded and used + piece.tokens > self.size:
                    used -= current.pop(0).tokens
                    seeded -= 1
                current.append(piece)
        if current and seeded < len(current) and (index == 0 or not only_headings()):
            yield emit()


def _join(pieces: list[_Piece], seeded: int) -> tuple[str, int]:
    """Content of a chunk and the length of its leading overlap (separator included)."""
    parts: list[str] = []
    overlap_chars = 0
    for i, piece in enumerate(pieces):
        if i > 0:
            parts.append(piece.sep)
        parts.append(piece.text)
        if i == seeded - 1:
            overlap_chars = sum(len(x) for x in parts)
    content = "".join(parts)
    if 0 < seeded < len(pieces):
        overlap_chars += len(pieces[seeded].sep)
    return content, overlap_chars


# -- word windows ----------------------------------------------------------------------------------


class WordChunker:
    def __init__(
        self,
        count_many: TokenCounter,
        chunk_size: int,
        overlap: int,
        language: str,
        max_tokens: int | None = None,
    ) -> None:
        if chunk_size < 2 or not 0 <= overlap < chunk_size:
            raise ConfigError(
                f"--chunk-size {chunk_size} / --overlap {overlap}: need chunk-size >= 2 and "
                "0 <= overlap < chunk-size words."
            )
        self.count_many = count_many
        self.size = chunk_size
        self.overlap = overlap
        self.language = language
        self.max_tokens = max_tokens

    def chunks(self, blocks: Iterable[Block]) -> Iterator[Chunk]:
        # (word, page, heading path, tokens of the word)
        window: deque[tuple[str, int | None, tuple[str, ...], int]] = deque()
        index = 0
        fresh = 0  # words in the window not yet emitted
        total = 0  # tokens in the window
        batch: list[Chunk] = []

        def make(overlap_words: int) -> Chunk:
            nonlocal index
            words = [w for w, _, _, _ in window]
            content = " ".join(words)
            overlap_chars = len(" ".join(words[:overlap_words])) + 1 if overlap_words else 0
            own = list(window)[overlap_words:]
            pages = [p for _, p, _, _ in own if p is not None]
            meta: dict[str, Any] = {}
            if pages and max(pages) != pages[0]:
                meta["page_end"] = max(pages)
            chunk = Chunk(
                index=index,
                content=content,
                token_count=0,
                page=pages[0] if pages else None,
                heading_path=own[0][2] if own else window[0][2],
                overlap_chars=overlap_chars,
                language=self.language,
                metadata=meta,
            )
            index += 1
            return chunk

        def flush(chunks: list[Chunk]) -> Iterator[Chunk]:
            for chunk, n in zip(chunks, self.count_many([c.content for c in chunks]), strict=True):
                chunk.token_count = n
                yield chunk

        for block in blocks:
            words = split_words(block.text)
            counts = self.count_many(words) if self.max_tokens else [0] * len(words)
            for word, n in zip(words, counts, strict=True):
                if fresh and self.max_tokens and total + n > self.max_tokens:
                    # The window would exceed what the model reads: cut it here, shorter.
                    batch.append(make(len(window) - fresh))
                    while window and (len(window) > self.overlap or total + n > self.max_tokens):
                        total -= window.popleft()[3]
                    fresh = 0
                window.append((word, block.page, block.heading_path, n))
                total += n
                fresh += 1
                if len(window) == self.size:
                    batch.append(make(self.size - fresh))
                    for _ in range(self.size - self.overlap):
                        total -= window.popleft()[3]
                    fresh = 0
                if len(batch) >= 64:
                    yield from flush(batch)
                    batch = []
        if fresh:
            batch.append(make(len(window) - fresh))
        yield from flush(batch)


def make_chunker(
    name: str,
    count_many: TokenCounter,
    chunk_size: int,
    overlap: int,
    language: str = "english",
    max_tokens: int | None = None,
    embed: Callable[[Sequence[str]], Any] | None = None,
    breakpoint: str | None = None,
) -> TokenChunker | WordChunker:
    """A chunker; ``max_tokens`` bounds word windows by what the model reads (tokens chunks
    are bounded by ``chunk_size`` tokens already). ``semantic`` needs ``embed`` (the ingest's
    embedder) and takes ``breakpoint`` (see :mod:`pgrag.pipeline.semantic_chunking`)."""
    if name == "semantic":
        from pgrag.pipeline.semantic_chunking import SemanticChunker, parse_breakpoint

        if embed is None:
            raise ConfigError(
                "the semantic chunker embeds every sentence: use it with pgrag ingest "
                f"(here choose one of {', '.join(CHUNKERS)})."
            )

        rule = parse_breakpoint(breakpoint)
        return SemanticChunker(count_many, chunk_size, overlap, language, embed, rule)
    if name == "tokens":
        return TokenChunker(count_many, chunk_size, overlap, language)
    if name == "words":
        return WordChunker(count_many, chunk_size, overlap, language, max_tokens)
    raise ConfigError(f"unknown chunker {name!r}: choose one of {', '.join(CHUNKERS)}.")


def token_counter(embedder: Any) -> TokenCounter:
    """The embedder's batch token counter (falls back to one call per text)."""
    many: TokenCounter | None = getattr(embedder, "count_tokens_many", None)
    if many is not None:
        return many
    return lambda texts: [embedder.count_tokens(t) for t in texts]
