"""Hostile and unusual input to the extractors: YAML bombs, deep HTML, odd charsets, PDF page
furniture, and the same answer whatever the entry point."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from plugins.sample_files import HTML

from pgrag.errors import ExtractionError, PgragError
from pgrag.ingest import ingest_paths
from pgrag.pipeline.extract import (
    MAX_PARAGRAPH_CHARS,
    ExtractedDocument,
    document_from_response,
    extract_path,
    markdown_blocks,
    strip_binary,
)
from pgrag.pipeline.frontmatter import FRONT_MATTER_MAX_DEPTH, METADATA_MAX_BYTES, FrontMatterError
from pgrag.pipeline.html_depth import MAX_HTML_DEPTH, bound_nesting

REPO = Path(__file__).resolve().parent.parent
# Extraction of the hostile inputs below takes 1-3 s on a busy 2-core machine; before it was
# bounded, minutes.
# The bound is loose because the test machines are shared.
FAST = 10.0


def markdown(front_matter: str, body: str = "# Body\n\nSome text.\n") -> str:
    return f"---\n{front_matter}---\n{body}"


def alias_bomb(levels: int = 6) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


# -- YAML front matter ----------------------------------------------------------------------------


def test_a_yaml_alias_bomb_fails_its_document_alone(
    db: str, tmp_path: Path, local_embedder: Any
) -> None:
    (tmp_path / "bomb.md").write_text(markdown(alias_bomb()))
    (tmp_path / "fine.md").write_text(markdown("title: Fine\n", "# Fine\n\nStill ingested.\n"))

    started = time.perf_counter()
    summary = ingest_paths(db, [str(tmp_path)], embedder=local_embedder)

    assert time.perf_counter() - started < 60
    assert summary.documents_new == 1 and summary.documents_failed == 1
    [(uri, reason)] = summary.failures
    assert uri.endswith("bomb.md")
    assert "YAML alias" in reason and "write the value out" in reason and "\n" not in reason


def test_front_matter_nested_deeper_than_the_cap_is_refused(tmp_path: Path) -> None:
    deep = "x: " + "[" * 5000 + "]" * 5000 + "\n"
    path = tmp_path / "deep.md"
    path.write_text(markdown(deep))
    with pytest.raises(FrontMatterError, match=f"nested more than {FRONT_MATTER_MAX_DEPTH}"):
        extract_path(path)


def test_front_matter_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    big = "".join(f"k{i}: {'x' * 90}\n" for i in range(METADATA_MAX_BYTES // 90 + 10))
    assert len(big.splitlines()) < 1000  # within the lines a front matter may span
    with pytest.raises(FrontMatterError, match="larger than 64 KiB"):
        ExtractedDocument.from_text("big.md", markdown(big), source_type="markdown")


def test_values_json_cannot_hold_are_kept_as_their_text(tmp_path: Path) -> None:
    front = (
        "title: Dates\ndate: 2024-13-45\nreviewed: 2024-05-01\nat: 2024-05-01T10:00:00Z\n"
        f"huge: {'9' * 5000}\nbig: 12345678901234567890\nsmall: 42\n"
        "nan: .nan\ninf: -.inf\nover: 1e400\nratio: 0.5\n"
    )
    path = tmp_path / "values.md"
    path.write_text(markdown(front))

    meta = extract_path(path).metadata

    assert meta["date"] == "2024-13-45" and meta["reviewed"] == "2024-05-01"
    assert meta["at"] == "2024-05-01T10:00:00Z"
    assert meta["huge"] == "9" * 5000 and meta["big"] == "12345678901234567890"
    assert meta["small"] == 42 and meta["ratio"] == 0.5
    assert (meta["nan"], meta["inf"], meta["over"]) == (".nan", "-.inf", "1e400")
    json.dumps(meta, allow_nan=False)  # what jsonb accepts


def test_a_value_yaml_cannot_build_fails_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "tagged.md"
    path.write_text(markdown("when: !!python/object:os.system x\n"))
    with pytest.raises(FrontMatterError, match=r"cannot be read .*: fix or quote it") as info:
        extract_path(path)
    assert isinstance(info.value, PgragError) and str(path.resolve()) in str(info.value)


def test_chunking_the_text_alone_skips_a_refused_front_matter() -> None:
    lines = markdown(alias_bomb(), "# Body\n\nKept.\n").splitlines(keepends=True)
    assert [b.text for b in markdown_blocks(lines)] == ["Body", "Kept."]


# -- HTML and Markdown in linear time -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "page"),
    [
        ("200k nested div", "<div>x" * 200_000 + "</div>" * 200_000),
        ("50k nested li", "<ul><li>x" * 50_000 + "</li></ul>" * 50_000),
    ],
)
def test_deeply_nested_html_extracts_in_bounded_time(tmp_path: Path, name: str, page: str) -> None:
    path = tmp_path / "deep.html"
    path.write_text(f"<html><head><title>{name}</title></head><body>{page}</body></html>")

    started = time.perf_counter()
    doc = extract_path(path)
    blocks = list(doc.blocks)

    assert time.perf_counter() - started < FAST
    assert doc.title == name
    if "li" in name:  # flattened below the cap, the text stays: one list item holds it all
        assert len(blocks) == 1 and blocks[0].text.count("x") == 50_000
    else:  # one paragraph per div down to the cap, where the deeper ones are flattened
        assert len(blocks) == MAX_HTML_DEPTH and sum(b.text.count("x") for b in blocks) == 200_000


def test_loose_html_text_is_cut_into_paragraphs_of_bounded_size() -> None:
    page = "<div>" + "word <b>bold</b> " * 30_000 + "</div>"
    blocks = list(ExtractedDocument.from_text("long.html", page, source_type="html").blocks)
    assert len(blocks) == 3 and all(len(b.text) <= MAX_PARAGRAPH_CHARS + 10 for b in blocks)
    assert " ".join(b.text for b in blocks) == ("word bold " * 30_000).strip()


def test_tags_nested_beyond_the_cap_are_flattened_not_dropped() -> None:
    depth = MAX_HTML_DEPTH + 50
    page = "<div>" * depth + "<p>deep text</p>" + "</div>" * depth
    bounded = bound_nesting(page)
    assert bounded.count("<div>") == MAX_HTML_DEPTH and "deep text" in bounded
    assert bound_nesting("<div><p>a<p>b</div>" * 400) == "<div><p>a<p>b</div>" * 400


def tree_depth(html: str) -> int:
    from selectolax.lexbor import LexborHTMLParser

    deepest, todo = 0, [(LexborHTMLParser(html).root, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        child = node.child
        while child is not None:
            todo.append((child, depth + 1))
            child = child.next
    return deepest


@pytest.mark.parametrize(
    "unit",
    [
        "<span><div>x</span>",  # an end tag that stops at a block
        "<b><div>x</b>",  # misnested formatting
        "<em><button><em></em>",
        "<a><div>x",  # a link inside a link
        "<li><section>x",  # a list item that does not close the previous one
        "<li><ul></li>",
        "<ul><form></form>",  # </form> closes only the form
        "<p><b>x</p>x",  # formatting reopened after its paragraph
        "<option><section>",
        "<table><tr><td>x",
        "<tr><ul>",  # a row outside a table is ignored
        "<math><a>",  # in MathML and SVG every element nests
        "<svg><col><frame>",
        "<svg><textarea><object>",
        "<frameset><table>",
        "<noscript><div>",  # read as markup: the parser runs without scripting
    ],
)
def test_hostile_nesting_patterns_stay_within_twice_the_cap(unit: str) -> None:
    assert tree_depth(bound_nesting(unit * 2000, max_depth=16)) <= 2 * 16 + 4


def test_a_table_nested_in_a_cell_is_read_once() -> None:
    inner = "<table><tr><td>in1</td><td>in2</td></tr></table>"
    page = f"<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>{inner}</td></tr></table>"
    doc = ExtractedDocument.from_text("t.html", page, source_type="html")
    assert [b.text for b in doc.blocks] == ["| k | v |\n| a | in1 in2 |"]
    nested = ExtractedDocument.from_text("n.html", "<table><tr><td>x " * 20_000, source_type="html")
    assert sum(b.text.count("x") for b in nested.blocks) == 20_000  # not once per level


def test_markdown_of_many_short_lines_long_headings_or_image_marks_is_linear() -> None:
    started = time.perf_counter()
    blocks = list(markdown_blocks(["a\n"] * 100_000))
    [heading] = markdown_blocks(["# a" + " " * 100_000 + "b ##\n"])
    stripped = strip_binary("data: " + "![" * 100_000)
    assert time.perf_counter() - started < FAST
    assert sum(b.text.count("a") for b in blocks) == 100_000 and stripped.count("![") == 100_000
    assert heading.kind == "heading" and heading.text == "a" + " " * 100_000 + "b"


# -- charsets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "charset", ["x-unknown", "utf-7", "utf-16", "idna", "undefined", "base64", "utf-8\x00", "utf-8"]
)
def test_an_unusable_declared_charset_falls_back_to_detection(charset: str) -> None:
    page = "<html><head><title>Café</title></head><body><p>Crème brûlée à la carte.</p></body>"
    doc = document_from_response(
        "http://example.test/menu.html", page.encode("cp1252"), "text/html", charset
    )
    assert doc.title == "Café"
    assert [b.text for b in doc.blocks] == ["Crème brûlée à la carte."]


def test_utf16_text_with_a_byte_order_mark_is_read_not_refused_as_binary(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes("Wide notes: naïve café.\n".encode("utf-16"))
    doc = extract_path(path)
    assert [b.text for b in doc.blocks] == ["Wide notes: naïve café."]
    with pytest.raises(ExtractionError, match="binary content"):
        document_from_response(
            "http://example.test/x.txt", "no mark".encode("utf-16-le"), "text/plain", "utf-16"
        )


def test_a_utf8_byte_order_mark_does_not_hide_the_front_matter(tmp_path: Path) -> None:
    path = tmp_path / "bom.md"
    path.write_bytes(b"\xef\xbb\xbf" + markdown("team: ops\n").encode())
    doc = extract_path(path)
    assert doc.metadata["team"] == "ops" and [b.text for b in doc.blocks] == ["Body", "Some text."]


# -- titles ---------------------------------------------------------------------------------------


def test_an_html_page_gets_one_title_whatever_the_entry_point(tmp_path: Path) -> None:
    page = "<html><head><title>VPN how-to</title></head><body><h1>VPN</h1><p>Connect.</p>"
    path = tmp_path / "vpn.html"
    path.write_text(page)

    from_file = extract_path(path).title
    from_string = ExtractedDocument.from_text("vpn.html", page, source_type="html").title
    from_url = document_from_response("http://x.test/vpn.html", page.encode(), "text/html", None)

    assert from_file == from_string == from_url.title == "VPN how-to"
    assert ExtractedDocument.from_text("g.html", HTML, source_type="html").title == "Search guide"


# -- PDF ------------------------------------------------------------------------------------------


def make_book_pdf(path: Path, pages: int = 5) -> Path:
    """Pages with a running header (chapter and page number) and a page-number footer."""
    doc = pymupdf.open()
    for i in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 40), "Chapter 4: Function reference", fontsize=9)
        page.insert_text((500, 40), str(20 + i), fontsize=9)
        page.insert_text((72, 90), f"Section {i}", fontsize=16)
        page.insert_textbox(
            pymupdf.Rect(72, 110, 520, 300), f"What function {i} does, in full.", fontsize=11
        )
        page.insert_text((250, 815), f"pgrag manual, page {i} of {pages}", fontsize=9)
    doc.save(str(path))
    return path


def test_running_headers_and_footers_are_left_out_of_pdf_text(tmp_path: Path) -> None:
    doc = extract_path(make_book_pdf(tmp_path / "book.pdf"))
    texts = [b.text for b in doc.blocks]
    assert texts == [
        x for i in range(1, 6) for x in (f"Section {i}", f"What function {i} does, in full.")
    ]


def test_the_sample_pdf_is_the_same_bytes_on_every_run(tmp_path: Path) -> None:
    outputs = []
    for run in (1, 2):
        out = tmp_path / f"run{run}.pdf"
        subprocess.run(
            [sys.executable, str(REPO / "samples" / "make_sample_pdf.py"), str(out)], check=True
        )
        outputs.append(out.read_bytes())
        time.sleep(1.1)  # a clock-based date would differ
    assert outputs[0] == outputs[1]
