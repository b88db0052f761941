"""Extractors: turn a file, a URL or a string into an :class:`ExtractedDocument`.

A document is a title, a content hash and a stream of :class:`Block` s (paragraphs, headings,
tables, code), each knowing its page and heading path. Blocks are produced lazily from the
source, page by page or line by line, so a 50 MB file is never held whole in memory as text
(HTML excepted: it is parsed as one tree). Opening a source checks what can be checked cheaply
(empty, binary, encrypted, corrupt) and raises :class:`ExtractionError` with a one-line reason.

Sources are untrusted, so every step is linear in the input and bounded in what it builds:
front matter is read within limits (:mod:`pgrag.pipeline.frontmatter`), HTML is flattened
beyond MAX_HTML_DEPTH before it is parsed (:mod:`pgrag.pipeline.html_depth`), a declared
charset that cannot be used falls back to detection, and no pattern is retried from every
position of a line.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pgrag.errors import ExtractionError
from pgrag.pipeline.frontmatter import FrontMatterError, parse_front_matter
from pgrag.pipeline.html_depth import bound_nesting

SOURCE_TYPES = ("pdf", "markdown", "html", "text", "url")
EXTENSIONS = {
    ".pdf": "pdf",
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdx": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".txt": "text",
    ".text": "text",
    ".rst": "text",
}
SNIFF_BYTES = 64 * 1024
MAX_PARAGRAPH_CHARS = 100_000  # a "paragraph" longer than this is flushed at a line boundary
DEFAULT_URL_TIMEOUT = 30.0  # seconds; env PGRAG_HTTP_TIMEOUT
URL_MAX_BYTES = 100 * 1024 * 1024
NO_TEXT = "no extractable text"
PDF_NO_TEXT = "PDF has no extractable text (scanned images?): run OCR on it first, e.g. ocrmypdf"


@dataclass(frozen=True)
class Block:
    """A unit of document structure: a paragraph, heading, table or code block.

    ``kind`` is ``text``, ``heading``, ``table`` or ``code``; tables and code are kept whole
    when they fit a chunk and are otherwise split between lines (rows), never inside one.
    """

    text: str
    page: int | None = None
    heading_path: tuple[str, ...] = ()
    kind: str = "text"


class LazyBlocks:
    """A re-iterable stream of blocks: each iteration reads the source again."""

    def __init__(self, produce: Callable[[], Iterator[Block]]) -> None:
        self._produce = produce

    def __iter__(self) -> Iterator[Block]:
        return self._produce()


@dataclass
class ExtractedDocument:
    """A source ready to chunk: identity, title, hash, and its blocks (a list or a lazy stream)."""

    uri: str
    title: str
    source_type: str
    blocks: Iterable[Block]
    metadata: dict[str, Any] = field(default_factory=dict)
    content_sha256: str = ""
    empty_message: str = field(default=NO_TEXT, repr=False)

    @classmethod
    def from_text(
        cls,
        uri: str,
        text: str,
        *,
        title: str = "",
        metadata: dict[str, Any] | None = None,
        source_type: str = "text",
    ) -> ExtractedDocument:
        """A document from a string (Markdown structure is parsed when source_type='markdown')."""
        if source_type not in SOURCE_TYPES:
            raise ExtractionError(
                f"{uri}: unknown source type {source_type!r} ({', '.join(SOURCE_TYPES)})"
            )
        lines = text.splitlines()
        front_matter: dict[str, Any] = {}
        if source_type == "markdown":
            front_matter = _front_matter(uri, lines)
            blocks = list(markdown_blocks(lines))
            title = title or markdown_title(lines, front_matter)
        elif source_type == "html":
            tree = _html_tree(text)
            blocks = list(html_blocks(text, tree))
            title = title or html_title(tree)
        else:
            blocks = list(text_blocks(lines))
        if not title and source_type != "html":  # a page's title is <title>, else <h1>
            title = next((b.text for b in blocks if b.kind == "heading"), "")
        return cls(
            uri=uri,
            title=title,
            source_type=source_type,
            blocks=blocks,
            metadata={**front_matter, **(metadata or {})},
            content_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        )


# -- plain text and Markdown ---------------------------------------------------------------------

_HEADING_MARK = re.compile(r"(#{1,6})\s+")


def _heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line (``## Title ##``), else None.

    The closing hashes are cut with rstrip: a regular expression ``(.*?)\\s*#*\\s*$`` is
    quadratic on a long line of spaces or hashes."""
    m = _HEADING_MARK.match(line)
    if m is None:
        return None
    return len(m.group(1)), line[m.end() :].rstrip().rstrip("#").strip()


_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")


# Embedded binary data is not text: a Markdown image written as a data: URI, an inline data:
# URI, or a long base64 run (attachments, PEM bodies) would otherwise become hundreds of chunks.
_DATA_IMAGE_LINK = re.compile(r"\]\(\s*data:")
_DATA_URI = re.compile(r"\bdata:[a-zA-Z0-9.+-]+/[a-zA-Z0-9.+-]+(?:;[a-zA-Z0-9.+=-]+)*,[^\s)\"'<>]*")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{64,}={0,2}")


def _is_base64(run: str) -> bool:
    """A run of base64 characters that mixes cases and digits (DNA, hex hashes and long
    words do not)."""
    return (
        any(c.isdigit() for c in run)
        and any(c.islower() for c in run)
        and any(c.isupper() for c in run)
    )


def _strip_data_images(text: str) -> str:
    """``text`` with each Markdown image ``![alt](data:...)`` replaced by its alt text.

    One pass: each ``](data:`` is tied to the nearest ``![`` after the previous ``]`` (alt text
    holds no ``]``) and the next ``)``, so no character is scanned twice (a regular expression
    retried at every ``![`` is quadratic on a line of them).
    """
    out: list[str] = []
    copied = 0  # text[:copied] is in out
    floor = 0  # no alt text starts before this
    for m in _DATA_IMAGE_LINK.finditer(text):
        if m.start() < copied:
            continue
        close = text.find(")", m.end())
        if close < 0:
            break
        floor = max(floor, copied, text.rfind("]", floor, m.start()) + 1)
        bang = text.find("![", floor, m.start())
        floor = m.start() + 1
        if bang < 0:
            continue
        out += (text[copied:bang], text[bang + 2 : m.start()])
        copied = close + 1
    if not out:
        return text
    out.append(text[copied:])
    return "".join(out)


def strip_binary(text: str) -> str:
    """``text`` without embedded binary data (data: URIs, long base64 runs); a Markdown image
    keeps its alt text."""
    if "data:" in text:
        text = _strip_data_images(text)
        text = _DATA_URI.sub("", text)
    if len(text) >= 64:
        text = _BASE64_RUN.sub(lambda m: "" if _is_base64(m.group(0)) else m.group(0), text)
    return text


def text_blocks(lines: Iterable[str]) -> Iterator[Block]:
    """Paragraphs separated by blank lines (embedded binary data skipped)."""
    lines = map(strip_binary, lines)
    buf: list[str] = []
    size = 0
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip():
            if buf:
                yield Block("\n".join(buf))
                buf, size = [], 0
            continue
        buf.append(line.rstrip())
        size += len(line)
        if size > MAX_PARAGRAPH_CHARS:
            yield Block("\n".join(buf))
            buf, size = [], 0
    if buf:
        yield Block("\n".join(buf))


FRONT_MATTER_MAX_LINES = 1000
_FRONT_MATTER_END = ("---", "...")


def split_front_matter(
    lines: Iterable[str], *, strict: bool = True
) -> tuple[dict[str, Any], Iterator[str]]:
    """(front matter, the remaining lines) of a Markdown document.

    Front matter is a YAML mapping between a first line ``---`` and a line ``---`` (or
    ``...``), as Jekyll, Hugo and most static-site generators write it. Parsed within bounds by
    :func:`pgrag.pipeline.frontmatter.parse_front_matter`: values JSON cannot hold (dates) become
    strings, and front matter it refuses (aliases, too deep, too large) raises
    :class:`FrontMatterError` (``strict``) or is skipped as ``{}`` (not ``strict``: for readers
    of the text alone). A block that is not closed within FRONT_MATTER_MAX_LINES lines or is not
    a YAML mapping is not front matter: its lines come back as text, and the front matter is
    ``{}``.
    """
    it = iter(lines)
    head: list[str] = []
    for raw in it:
        head.append(raw)
        break
    if not head or head[0].rstrip("\r\n").strip() != "---":
        return {}, itertools.chain(head, it)
    for raw in it:
        head.append(raw)
        if raw.rstrip("\r\n").strip() in _FRONT_MATTER_END:
            try:
                parsed = parse_front_matter(
                    "".join(line if line.endswith("\n") else line + "\n" for line in head[1:-1])
                )
            except FrontMatterError:
                if strict:
                    raise
                parsed = {}
            if parsed is not None:
                return parsed, it
            break
        if len(head) > FRONT_MATTER_MAX_LINES:
            break
    return {}, itertools.chain(head, it)


def _front_matter(uri: str, lines: Iterable[str]) -> dict[str, Any]:
    """The front matter of a Markdown document; a refused one fails it with its uri."""
    try:
        return split_front_matter(lines)[0]
    except FrontMatterError as exc:
        raise FrontMatterError(f"{uri}: {exc}") from exc


def markdown_blocks(lines: Iterable[str]) -> Iterator[Block]:
    """Headings (with their path), paragraphs, tables and fenced code, in order (embedded
    binary data skipped).

    YAML front matter is not text: it is left out (see :func:`split_front_matter`)."""
    lines = map(strip_binary, lines)
    stack: list[tuple[int, str]] = []
    buf: list[str] = []
    kind = "text"
    fence: str | None = None

    def path() -> tuple[str, ...]:
        return tuple(title for _, title in stack)

    size = 0  # characters in buf, kept as lines come (a sum per line would be quadratic)

    def flush() -> Iterator[Block]:
        nonlocal buf, kind, size
        if buf and any(x.strip() for x in buf):
            yield Block("\n".join(buf), heading_path=path(), kind=kind)
        buf, kind, size = [], "text", 0

    _, rest = split_front_matter(lines, strict=False)
    for raw in rest:
        line = raw.rstrip("\r\n")
        if fence is not None:
            buf.append(line)
            if line.strip().startswith(fence):
                fence = None
                yield from flush()
            continue
        m = _FENCE.match(line)
        if m:
            yield from flush()
            fence, kind = m.group(1), "code"
            buf.append(line)
            continue
        heading = _heading(line)
        if heading is not None:
            yield from flush()
            level, title = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            yield Block(title, heading_path=path(), kind="heading")
            continue
        if _SETEXT.match(line) and len(buf) == 1 and kind == "text" and buf[0].strip():
            title = buf[0].strip()
            buf, size = [], 0
            level = 1 if line.strip().startswith("=") else 2
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            yield Block(title, heading_path=path(), kind="heading")
            continue
        if not line.strip():
            yield from flush()
            continue
        is_row = line.lstrip().startswith("|")
        if buf and (kind == "table") != is_row:
            yield from flush()
        if is_row:
            kind = "table"
        buf.append(line.rstrip())
        size += len(line)
        if kind == "text" and size > MAX_PARAGRAPH_CHARS:
            yield from flush()
    yield from flush()


def markdown_title(lines: Iterable[str], front_matter: dict[str, Any] | None = None) -> str:
    """Front-matter ``title`` or the first heading (reads only the top of the file)."""
    if front_matter is None:
        front_matter, lines = split_front_matter(lines)
    title = front_matter.get("title")
    if isinstance(title, str | int | float) and str(title).strip():
        return str(title).strip()
    for i, raw in enumerate(lines):
        heading = _heading(raw.strip())
        if heading is not None:
            return heading[1]
        if i > 200:
            break
    return ""


# -- HTML ----------------------------------------

_DROP_TAGS = (
    "script, style, nav, header, footer, aside, noscript, form, iframe, svg, template, button"
)
# Elements read whole as one block: their text, however nested, is that block's alone.
_BLOCK_TAGS = frozenset(
    "h1 h2 h3 h4 h5 h6 p li pre blockquote table dt dd figcaption".split()  # noqa: SIM905
)
# Elements whose start and end end the paragraph of loose text around them (text sitting in a
# div, a section or the body itself); every other element (b, a, code, span, unknown tags) is
# inline and its text stays in the paragraph.
_BREAK_NAMES = (
    "address article aside body center details dialog dir div dl fieldset figure footer form "
    "header hgroup hr html legend listing main menu nav ol optgroup option plaintext search "
    "section select summary textarea ul xmp caption colgroup tbody thead tfoot tr td th"
)
_BREAK_TAGS = frozenset(_BREAK_NAMES.split())


def _html_tree(text: str, *, bounded: bool = False) -> Any:
    """The parsed page without scripts, navigation and the like, nested at most
    MAX_HTML_DEPTH elements deep (deeper tags are flattened: the parser is quadratic in depth;
    ``bounded``: ``text`` comes from :func:`bound_nesting` already).
    """
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(text if bounded else bound_nesting(text))
    for node in tree.css(_DROP_TAGS):
        node.decompose()
    return tree


def html_title(tree: Any) -> str:
    node = tree.css_first("title")
    title = node.text(strip=True) if node is not None else ""
    if not title:
        h1 = tree.css_first("h1")
        title = h1.text(separator=" ", strip=True) if h1 is not None else ""
    return " ".join(title.split())


def _html_pieces(root: Any) -> Iterator[Any]:
    """What the page under ``root`` is made of, in document order: each block element that no
    other block element contains (:data:`_BLOCK_TAGS`), each text run outside them (a ``str``),
    and ``None`` where an element of :data:`_BREAK_TAGS` starts or ends. One walk that does not
    enter a block element: each node is visited once."""
    node = root.child
    while node is not None:
        tag = node.tag
        if tag in _BLOCK_TAGS:
            yield node
        elif tag == "-text":
            yield node.text_content
        elif tag in _BREAK_TAGS:
            yield None
        if tag not in _BLOCK_TAGS and node.child is not None:
            node = node.child
            continue
        if tag in _BREAK_TAGS:
            yield None  # a break element without children ends where it starts
        while node is not None and node.next is None:
            node = node.parent
            if node is None or node.mem_id == root.mem_id:
                return
            if node.tag in _BREAK_TAGS:
                yield None
        if node is not None:
            node = node.next


def _own_rows(table: Any) -> Iterator[Any]:
    """The rows of ``table`` itself, not of tables nested in its cells: a nested table's text
    is in its cell's text already (taking every ``tr`` below repeated it once per level)."""
    for child in table.iter():
        if child.tag == "tr":
            yield child
        elif child.tag in ("thead", "tbody", "tfoot"):
            yield from (tr for tr in child.iter() if tr.tag == "tr")


def _heading_path(stack: list[tuple[int, str]]) -> tuple[str, ...]:
    return tuple(title for _, title in stack)


def _block_element(node: Any, stack: list[tuple[int, str]]) -> Block | None:
    """The block a block element (:data:`_BLOCK_TAGS`) makes, read whole; a heading also
    updates the heading ``stack``."""
    tag = node.tag
    if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
        title = " ".join(node.text(separator=" ", strip=True).split())
        if not title:
            return None
        level = int(tag[1])
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        return Block(title, heading_path=_heading_path(stack), kind="heading")
    if tag == "table":
        rows = []
        for tr in _own_rows(node):
            cells = [
                " ".join(c.text(separator=" ", strip=True).split())
                for c in tr.iter()
                if c.tag in ("th", "td")
            ]
            if any(cells):
                rows.append("| " + " | ".join(cells) + " |")
        if not rows:
            return None
        return Block("\n".join(rows), heading_path=_heading_path(stack), kind="table")
    if tag == "pre":
        code = strip_binary(node.text(strip=False)).strip("\n")
        return Block(code, heading_path=_heading_path(stack), kind="code") if code.strip() else None
    content = " ".join(strip_binary(node.text(separator=" ", strip=True)).split())
    if not content:
        return None
    return Block("- " + content if tag == "li" else content, heading_path=_heading_path(stack))


def html_blocks(text: str, tree: Any = None) -> Iterator[Block]:
    """Main text of an HTML page: headings (with their path), paragraphs, list items, tables,
    code, and the text that sits outside them (in a div, a section, the body), one paragraph
    per run between block-level elements; each text once, in document order."""
    tree = tree if tree is not None else _html_tree(text)
    root = tree.css_first("main") or tree.css_first("article") or tree.body or tree.root
    if root is None:
        return
    stack: list[tuple[int, str]] = []
    loose: list[str] = []  # the text runs of the paragraph being read, stripped
    size = 0

    def paragraph() -> Iterator[Block]:
        nonlocal loose, size
        content = " ".join(strip_binary(" ".join(loose)).split())
        if content:
            yield Block(content, heading_path=_heading_path(stack))
        loose, size = [], 0

    for piece in _html_pieces(root):
        if isinstance(piece, str):
            run = piece.strip()
            if run:
                loose.append(run)
                size += len(run) + 1  # and the space that joins it
                if size > MAX_PARAGRAPH_CHARS:
                    yield from paragraph()
            continue
        yield from paragraph()
        if piece is not None:
            block = _block_element(piece, stack)
            if block is not None:
                yield block
    yield from paragraph()


# -- PDF ----------------------------------------


def _open_pdf(uri: str, path: str | None = None, data: bytes | None = None) -> Any:
    import pymupdf

    pymupdf.TOOLS.mupdf_display_errors(False)
    try:
        doc = pymupdf.open(path) if path is not None else pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # FileDataError, RuntimeError, ...: all mean unreadable
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ExtractionError(f"{uri}: corrupt or unreadable PDF ({reason})") from exc
    if doc.needs_pass:
        doc.close()
        raise ExtractionError(f"{uri}: encrypted PDF (password protected): decrypt it first")
    if doc.page_count == 0:
        doc.close()
        raise ExtractionError(f"{uri}: corrupt or unreadable PDF (no pages)")
    return doc


def _table_markdown(rows: list[list[Any]]) -> str:
    grid = [[" ".join(str(c or "").split()) for c in row] for row in rows]
    width = max(len(r) for r in grid)
    grid = [r + [""] * (width - len(r)) for r in grid]
    keep = [j for j in range(width) if any(r[j] for r in grid)]  # drop empty (merged) columns
    lines = []
    for i, row in enumerate(grid):
        cells = [row[j] for j in keep]
        lines.append("| " + " | ".join(cells) + " |")
        if i == 0:
            lines.append("|" + "---|" * len(cells))
    return "\n".join(lines)


def _inside(inner: tuple[float, ...], outer: tuple[float, ...]) -> bool:
    cx, cy = (inner[0] + inner[2]) / 2, (inner[1] + inner[3]) / 2
    return outer[0] <= cx <= outer[2] and outer[1] <= cy <= outer[3]


def _has_rulings(page: Any) -> bool:
    segments = 0
    for path in page.get_cdrawings():
        for item in path.get("items", ()):
            if item[0] in ("l", "re", "qu"):
                segments += 1
                if segments >= 3:
                    return True
    return False


FURNITURE_MARGIN = 0.08  # running headers and footers sit in the top or bottom 8% of a page
FURNITURE_MIN_PAGES = 3  # ... and repeat, digits aside, on at least this many pages


def _margin(y0: float, y1: float, height: float) -> str | None:
    if y1 <= height * FURNITURE_MARGIN:
        return "top"
    if y0 >= height * (1 - FURNITURE_MARGIN):
        return "bottom"
    return None


def _furniture_key(text: str) -> str:
    """A block's text with page numbers and layout left out: what repeats from page to page."""
    return " ".join(re.sub(r"\d+", "#", text).casefold().split())


def _page_furniture(doc: Any) -> set[tuple[str, str]]:
    """(margin, key) of the text blocks repeated in the top or bottom margin of at least
    FURNITURE_MIN_PAGES pages: running headers, footers and page numbers, not content.
    A first pass over the pages' text (no tables), one page at a time."""
    if doc.page_count < FURNITURE_MIN_PAGES:
        return set()
    counts: Counter[tuple[str, str]] = Counter()
    for pno in range(doc.page_count):
        try:
            page = doc.load_page(pno)
            height = page.rect.height
            seen: set[tuple[str, str]] = set()
            for _x0, y0, _x1, y1, text, _no, btype in page.get_text("blocks"):
                where = _margin(y0, y1, height) if btype == 0 else None
                if where is not None and text.strip():
                    seen.add((where, _furniture_key(text)))
        except Exception:  # an unreadable page is reported by the second pass
            continue
        counts.update(seen)
    return {key for key, n in counts.items() if n >= FURNITURE_MIN_PAGES}


def pdf_blocks(open_doc: Callable[[], Any], uri: str) -> Iterator[Block]:
    """Text blocks and tables, page by page (a page is loaded, read and released in turn),
    without the running headers and footers (:func:`_page_furniture`)."""
    doc = open_doc()
    try:
        furniture = _page_furniture(doc)
        toc = [(lvl, title.strip(), page) for lvl, title, page, *_ in doc.get_toc(simple=True)]
        stack: list[tuple[int, str]] = []
        t = 0
        for pno in range(doc.page_count):
            page_no = pno + 1
            while t < len(toc) and toc[t][2] <= page_no:
                lvl, title, _ = toc[t]
                while stack and stack[-1][0] >= lvl:
                    stack.pop()
                stack.append((lvl, title))
                t += 1
            path = tuple(title for _, title in stack)
            try:
                page = doc.load_page(pno)
                items: list[tuple[float, Block]] = []
                boxes: list[tuple[float, ...]] = []
                # find_tables (ruling-line strategy) costs ~0.5 s a page even when there is
                # nothing to find: only ask when the page draws lines or rectangles.
                tables = page.find_tables().tables if _has_rulings(page) else []
                for table in tables:
                    # Cell text through the page's text layer: table.extract() loses spaces.
                    rows = [
                        [page.get_textbox(cell) if cell else "" for cell in row.cells]
                        for row in table.rows
                    ]
                    if rows:
                        boxes.append(tuple(table.bbox))
                        items.append(
                            (table.bbox[1], Block(_table_markdown(rows), page_no, path, "table"))
                        )
                height = page.rect.height
                for x0, y0, x1, y1, text, _no, btype in page.get_text("blocks", sort=True):
                    if btype != 0 or any(_inside((x0, y0, x1, y1), b) for b in boxes):
                        continue
                    where = _margin(y0, y1, height) if furniture else None
                    if where is not None and (where, _furniture_key(text)) in furniture:
                        continue
                    text = re.sub(r"-\n(?=[a-z])", "", text)
                    text = " ".join(text.split())
                    if text:
                        items.append((y0, Block(text, page_no, path)))
            except ExtractionError:
                raise
            except Exception as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise ExtractionError(f"{uri}: unreadable PDF page {page_no} ({reason})") from exc
            items.sort(key=lambda it: it[0])
            for _, block in items:
                yield block
    finally:
        doc.close()


# -- files and URLs ----------------------------------------


def source_type_for(path: str | Path) -> str | None:
    """The source type a file extension implies, or None when unknown."""
    return EXTENSIONS.get(Path(path).suffix.lower())


def _looks_binary(sample: bytes) -> bool:
    if b"\x00" in sample:
        return True
    if not sample:
        return False
    control = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13, 27))
    return control / len(sample) > 0.05


def _scan_file(path: Path) -> tuple[str, bool, bytes]:
    """One streaming pass: (sha256, valid UTF-8, first bytes)."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    utf8 = True
    head = b""
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            if not head:
                head = chunk[:SNIFF_BYTES]
            digest.update(chunk)
            if utf8:
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError:
                    utf8 = False
    if utf8:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            utf8 = False
    return digest.hexdigest(), utf8, head


# Codecs a page or file may not name: not encodings of text a browser would read (UTF-7 is
# refused by browsers, the others are transforms), or ones that raise whatever the errors mode.
_REFUSED_CODECS = frozenset(
    ("utf-7", "idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape")
)
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def text_codec(name: str | None) -> str | None:
    """The Python codec a charset label names, when it is one text may be decoded with."""
    if not name:
        return None
    label = name.strip().strip("\"'").strip().lower()
    if not label or len(label) > 40:
        return None
    try:
        info = codecs.lookup(label)
    except (LookupError, ValueError, TypeError):
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in _REFUSED_CODECS:
        return None
    return info.name


def bom_encoding(data: bytes) -> str | None:
    """The encoding a byte-order mark at the start of ``data`` announces (UTF-8/16/32)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    return None


def decode_declared(data: bytes, charset: str | None) -> tuple[str, str]:
    """(text, encoding) of bytes whose sender declared ``charset``: a byte-order mark first,
    then the declared charset when it is a usable text codec, else detection; never raises
    (undecodable bytes become U+FFFD)."""
    encoding = bom_encoding(data)
    if encoding is None:
        encoding = text_codec(charset)
        if encoding in ("utf-16", "utf-32"):  # without a byte-order mark: not what it says
            encoding = None
    if encoding == "utf-8":  # a page said UTF-8 but is not: detect what it is instead
        return decode_bytes(data)
    if encoding is not None:
        try:
            return data.decode(encoding, errors="replace"), encoding
        except (UnicodeError, LookupError, ValueError):
            pass
    return decode_bytes(data)


def detect_encoding(sample: bytes) -> str:
    """Best guess for non-UTF-8 bytes (charset-normalizer), else latin-1 (never fails)."""
    try:
        from charset_normalizer import from_bytes

        matches = list(from_bytes(sample))
        if matches:
            best = matches[0]
            # Short samples often tie between code pages: prefer the most common Western one.
            for m in matches:
                if (
                    m.encoding in ("cp1252", "latin_1", "iso8859_15")
                    and m.chaos <= best.chaos + 0.01
                    and m.coherence >= best.coherence - 0.01
                ):
                    return "cp1252"
            return text_codec(str(best.encoding)) or "latin-1"
    except ImportError:  # pragma: no cover - charset-normalizer is a dependency
        pass
    return "latin-1"


def decode_bytes(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 when valid, else the detected encoding, never dropping input."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        enc = detect_encoding(data[: 1 << 20])
        try:
            return data.decode(enc, errors="replace"), enc
        except (UnicodeError, LookupError, ValueError):  # a codec that fails even so
            return data.decode("latin-1"), "latin-1"


def title_from_name(name: str) -> str:
    """The title of a document that has none, from its file name or URI path: the last part
    without its extension, ``_`` and ``-`` as spaces (``kb/printer-setup.md``: "printer setup")."""
    stem = PurePosixPath(name.rstrip("/")).stem
    return stem.replace("_", " ").replace("-", " ").strip()


def extract_path(path: str | Path, source_type: str | None = None) -> ExtractedDocument:
    """Open a local file as a document; raise :class:`ExtractionError` for unusable input."""
    p = Path(path)
    uri = str(p.resolve())
    if not p.is_file():
        raise ExtractionError(f"{uri}: no such file")
    source_type = source_type or source_type_for(p) or "text"
    if p.stat().st_size == 0:
        raise ExtractionError(f"{uri}: empty file")
    sha, utf8, head = _scan_file(p)
    stem_title = title_from_name(p.name)
    metadata: dict[str, Any] = {"file_name": p.name, "size_bytes": p.stat().st_size}
    if source_type == "pdf":
        doc = _open_pdf(uri, path=str(p))
        info = doc.metadata or {}
        pages = doc.page_count
        doc.close()
        metadata["pages"] = pages
        for key in ("author", "subject", "keywords"):
            if info.get(key):
                metadata[key] = info[key]
        return ExtractedDocument(
            uri=uri,
            title=(info.get("title") or "").strip() or stem_title,
            source_type="pdf",
            blocks=LazyBlocks(lambda: pdf_blocks(lambda: _open_pdf(uri, path=str(p)), uri)),
            metadata=metadata,
            content_sha256=sha,
            empty_message=f"{uri}: {PDF_NO_TEXT}",
        )
    bom = bom_encoding(head)  # UTF-16 and UTF-32 text has NUL bytes: its mark says it is text
    if bom in (None, "utf-8-sig") and _looks_binary(head):
        raise ExtractionError(f"{uri}: binary content, not {source_type} (NUL or control bytes)")
    if bom is not None:
        encoding = bom
    elif utf8:
        encoding = "utf-8"
    elif p.stat().st_size <= SNIFF_BYTES:
        encoding = detect_encoding(head)
    else:
        with p.open("rb") as f:
            encoding = detect_encoding(f.read(1 << 20))
    metadata["encoding"] = encoding

    def lines() -> Iterator[str]:
        with p.open("r", encoding=encoding, errors="replace", newline=None) as f:
            yield from f

    if source_type == "html":
        text = bound_nesting(p.read_bytes().decode(encoding, errors="replace"))
        tree = _html_tree(text, bounded=True)
        return ExtractedDocument(
            uri=uri,
            title=html_title(tree) or stem_title,
            source_type="html",
            blocks=LazyBlocks(lambda: html_blocks(text, _html_tree(text, bounded=True))),
            metadata=metadata,
            content_sha256=sha,
            empty_message=f"{uri}: empty file ({NO_TEXT})",
        )
    if source_type == "markdown":
        front_matter = _front_matter(uri, lines())
        metadata = {**metadata, **front_matter}
        return ExtractedDocument(
            uri=uri,
            title=markdown_title(lines(), front_matter) or stem_title,
            source_type="markdown",
            blocks=LazyBlocks(lambda: markdown_blocks(lines())),
            metadata=metadata,
            content_sha256=sha,
            empty_message=f"{uri}: empty file ({NO_TEXT})",
        )
    return ExtractedDocument(
        uri=uri,
        title=stem_title,
        source_type="text",
        blocks=LazyBlocks(lambda: text_blocks(lines())),
        metadata=metadata,
        content_sha256=sha,
        empty_message=f"{uri}: empty file ({NO_TEXT})",
    )


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def extract_url(url: str, timeout: float | None = None) -> ExtractedDocument:
    """Fetch ``url`` over HTTP; the extractor follows the Content-Type (then the path).

    For ``pgrag ingest``, whose user names the URL. URLs a tenant submits are fetched by the
    worker with :func:`pgrag.worker.fetch.fetch` (allow-list, address checks, limits) and
    converted with :func:`document_from_response`.
    """
    if timeout is None:
        timeout = float(os.environ.get("PGRAG_HTTP_TIMEOUT", DEFAULT_URL_TIMEOUT))
    request = urllib.request.Request(url, headers={"User-Agent": "pgrag-ingest"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            content_type = response.headers.get_content_type() or ""
            charset = response.headers.get_content_charset()
            data = response.read(URL_MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise ExtractionError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except TimeoutError as exc:
        raise ExtractionError(f"{url}: timed out after {timeout:g} s") from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise ExtractionError(f"{url}: timed out after {timeout:g} s") from exc
        raise ExtractionError(f"{url}: cannot fetch ({reason})") from exc
    except OSError as exc:
        raise ExtractionError(f"{url}: cannot fetch ({exc})") from exc
    if len(data) > URL_MAX_BYTES:
        raise ExtractionError(f"{url}: larger than {URL_MAX_BYTES // (1 << 20)} MB")
    return document_from_response(url, data, content_type, charset)


def document_from_response(
    url: str, data: bytes, content_type: str, charset: str | None
) -> ExtractedDocument:
    """The document an HTTP response body is: PDF, HTML, Markdown or text by its Content-Type
    (then the URL path's extension); ``source_type = 'url'``."""
    if not data.strip():
        raise ExtractionError(f"{url}: empty response")
    sha = hashlib.sha256(data).hexdigest()
    path_type = source_type_for(urllib.parse.urlparse(url).path)
    if content_type == "application/pdf" or (not content_type and path_type == "pdf"):
        fmt = "pdf"
    elif content_type in ("text/html", "application/xhtml+xml"):
        fmt = "html"
    elif content_type in ("text/markdown", "text/x-markdown"):
        fmt = "markdown"
    elif content_type.startswith("text/"):
        fmt = path_type if path_type in ("markdown", "html") else "text"
    else:
        fmt = path_type or ""
    if fmt not in ("pdf", "html", "markdown", "text"):
        raise ExtractionError(f"{url}: unsupported content type {content_type or 'unknown'}")
    metadata: dict[str, Any] = {"content_type": content_type, "format": fmt}
    base_title = urllib.parse.urlparse(url).path.rstrip("/").rsplit("/", 1)[-1] or url
    if fmt == "pdf":
        doc = _open_pdf(url, data=data)
        title = (doc.metadata or {}).get("title", "").strip() or base_title
        doc.close()
        return ExtractedDocument(
            uri=url,
            title=title,
            source_type="url",
            blocks=LazyBlocks(lambda: pdf_blocks(lambda: _open_pdf(url, data=data), url)),
            metadata=metadata,
            content_sha256=sha,
            empty_message=f"{url}: {PDF_NO_TEXT}",
        )
    if bom_encoding(data) in (None, "utf-8-sig") and _looks_binary(data[:SNIFF_BYTES]):
        raise ExtractionError(f"{url}: binary content, not {fmt}")
    text, _ = decode_declared(data, charset)
    doc_ = ExtractedDocument.from_text(url, text, source_type=fmt)
    return ExtractedDocument(
        uri=url,
        title=doc_.title or base_title,
        source_type="url",
        blocks=doc_.blocks,
        metadata=metadata,
        content_sha256=sha,
        empty_message=f"{url}: {NO_TEXT}",
    )


def discover_paths(paths: Iterable[str], glob: str | None = None) -> Iterator[str]:
    """Files and URLs to ingest: folders walked recursively (known extensions, or ``glob``)."""
    for item in paths:
        if is_url(item):
            yield item
            continue
        p = Path(item)
        if p.is_dir():
            pattern = glob or "*"
            for child in sorted(p.rglob(pattern)):
                if not child.is_file() or any(
                    part.startswith(".") for part in child.parts[len(p.parts) :]
                ):
                    continue
                if glob or source_type_for(child):
                    yield str(child)
        elif glob and not p.match(glob):
            continue
        else:
            yield item


def extract(source: str) -> ExtractedDocument:
    """A file path or a URL as a document."""
    return extract_url(source) if is_url(source) else extract_path(source)
