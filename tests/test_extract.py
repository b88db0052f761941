"""Extractors on real files generated here: PDF (PyMuPDF), Markdown, HTML, text, URLs."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from plugins.sample_files import (
    HTML,
    MARKDOWN,
    make_corrupt_pdf,
    make_encrypted_pdf,
    make_report_pdf,
    make_scanned_pdf,
)
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from pgrag.errors import ExtractionError
from pgrag.pipeline.extract import ExtractedDocument, extract_path, extract_url

# -- PDF ------------------------------------------------------------------------------------------


def test_pdf_blocks_carry_page_numbers_toc_headings_and_whole_tables(tmp_path: Path) -> None:
    doc = extract_path(make_report_pdf(tmp_path / "report.pdf"))

    blocks = list(doc.blocks)
    assert doc.title == "Quarterly Report" and doc.source_type == "pdf"
    assert doc.metadata["pages"] == 3
    assert {b.page for b in blocks} == {1, 2, 3}
    assert all(f"page {b.page} of" in b.text for b in blocks if "of the report" in b.text)
    tables = [b for b in blocks if b.kind == "table"]
    assert len(tables) == 1 and tables[0].page == 2
    assert tables[0].text.splitlines()[0] == "| Metric | Value | Unit |"
    assert "| Throughput | 450 | rows per s |" in tables[0].text
    assert tables[0].heading_path == ("Chapter 2", "Results")
    assert blocks[0].heading_path == ("Chapter 1",)
    assert doc.content_sha256 == hashlib.sha256((tmp_path / "report.pdf").read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("maker", "reason"),
    [
        (make_encrypted_pdf, "encrypted PDF"),
        (make_corrupt_pdf, "corrupt or unreadable PDF"),
    ],
)
def test_unusable_pdfs_are_rejected_with_one_line(tmp_path: Path, maker, reason) -> None:  # type: ignore[no-untyped-def]
    path = maker(tmp_path / "bad.pdf")
    with pytest.raises(ExtractionError, match=reason) as info:
        extract_path(path)
    assert "\n" not in str(info.value) and str(path.resolve()) in str(info.value)


def test_scanned_pdf_yields_no_blocks_and_says_so(tmp_path: Path) -> None:
    doc = extract_path(make_scanned_pdf(tmp_path / "scan.pdf"))
    assert list(doc.blocks) == []
    assert "scanned" in doc.empty_message and "OCR" in doc.empty_message


# -- Markdown, HTML, text -------------------------------------------------------------------------


def test_markdown_keeps_the_heading_path_tables_and_code(tmp_path: Path) -> None:
    path = tmp_path / "install.md"
    path.write_text(MARKDOWN)
    doc = extract_path(path)
    blocks = list(doc.blocks)

    assert doc.title == "Installing pgrag"
    by_text = {b.text.splitlines()[0]: b for b in blocks}
    assert by_text["pgrag needs PostgreSQL with pgvector."].heading_path == ("Install",)
    assert by_text["apt-get install postgresql-18-pgvector"].heading_path == (
        "Install",
        "Linux",
        "Debian",
    )
    assert by_text["Use Homebrew."].heading_path == ("Install", "macOS")
    table = by_text["| OS | Command |"]
    assert table.kind == "table" and len(table.text.splitlines()) == 3
    code = by_text["```sh"]
    assert code.kind == "code" and "# not a heading" in code.text
    assert code.heading_path == ("Install", "macOS")


def test_html_main_text_without_navigation_scripts_or_styles(tmp_path: Path) -> None:
    path = tmp_path / "guide.html"
    path.write_text(HTML)
    doc = extract_path(path)
    text = "\n".join(b.text for b in doc.blocks)

    assert doc.title == "Search guide"
    for dropped in ("tracking", "navigation", "banner", "sidebar", "footer", "color:red"):
        assert dropped not in text
    blocks = {b.text: b for b in doc.blocks}
    assert blocks["Hybrid search fuses BM25 and vectors."].heading_path == ("Search",)
    assert blocks["- metadata"].heading_path == ("Search", "Filters")
    assert blocks["| k | meaning |\n| 60 | RRF constant |"].kind == "table"


def html(page: str) -> list[tuple[str, tuple[str, ...]]]:
    """(text, heading path) of each block of an HTML page, in order."""
    doc = ExtractedDocument.from_text("page.html", page, source_type="html")
    return [(b.text, b.heading_path) for b in doc.blocks]


def test_text_directly_in_divs_is_extracted_once_in_order() -> None:
    page = (
        "<html><body><div><div>Hello world in a div.</div><div>More <b>bold</b> text.</div>"
        "<div>Before <p>a paragraph in a div</p> after.</div></div><p>para</p></body></html>"
    )
    assert [text for text, _ in html(page)] == [
        "Hello world in a div.",
        "More bold text.",
        "Before",
        "a paragraph in a div",
        "after.",
        "para",
    ]


def test_inline_elements_stay_inside_their_paragraph() -> None:
    page = (
        "<body><section>Call <code>search()</code> with <em>k</em> set, see "
        "<a href='/docs'>the docs</a> and <span>the <i>notes</i></span><br>below, "
        "<custom-box>unknown tags</custom-box> included.</section></body>"
    )
    assert [text for text, _ in html(page)] == [
        "Call search() with k set, see the docs and the notes below, unknown tags included."
    ]


def test_block_level_elements_start_a_new_paragraph_of_loose_text() -> None:
    page = (
        "<main>Bare text in main<section>a section</section>between"
        "<article><div>a div</div>in the article</article><hr>after a rule"
        "<ul>not in an item<li>an item</li></ul><details><summary>More</summary>hidden "
        "by default</details></main>"
    )
    assert [text for text, _ in html(page)] == [
        "Bare text in main",
        "a section",
        "between",
        "a div",
        "in the article",
        "after a rule",
        "not in an item",
        "- an item",
        "More",
        "hidden by default",
    ]


def test_loose_text_is_under_the_heading_before_it() -> None:
    page = (
        "<body><div>Preamble</div><div><h1>Guide</h1><div>Intro</div></div>"
        "<div><h2>Install</h2>Run the installer.<div><h3>Linux</h3><span>Use apt.</span></div>"
        "</div><h2>Search</h2><div>Ask a question.</div></body>"
    )
    assert html(page) == [
        ("Preamble", ()),
        ("Guide", ("Guide",)),
        ("Intro", ("Guide",)),
        ("Install", ("Guide", "Install")),
        ("Run the installer.", ("Guide", "Install")),
        ("Linux", ("Guide", "Install", "Linux")),
        ("Use apt.", ("Guide", "Install", "Linux")),
        ("Search", ("Guide", "Search")),
        ("Ask a question.", ("Guide", "Search")),
    ]


def test_quotes_definitions_captions_and_code_in_divs_are_one_block_each() -> None:
    page = (
        "<body><div><blockquote>A <b>quoted</b> line<div>and its source</div></blockquote>"
        "<dl><dt>RRF</dt><dd>Reciprocal <i>rank</i> fusion</dd></dl>"
        "<figure><img src='x.png'>Figure text<figcaption>The caption</figcaption></figure>"
        "<pre>select 1;\n  select 2;</pre></div></body>"
    )
    doc = ExtractedDocument.from_text("page.html", page, source_type="html")
    assert [(b.text, b.kind) for b in doc.blocks] == [
        ("A quoted line and its source", "text"),
        ("RRF", "text"),
        ("Reciprocal rank fusion", "text"),
        ("Figure text", "text"),
        ("The caption", "text"),
        ("select 1;\n  select 2;", "code"),
    ]


def test_loose_text_in_boilerplate_scripts_and_outside_main_stays_out() -> None:
    page = (
        "<body><div>Outside main</div><main><div>Kept<nav>Menu</nav><script>var x;</script>"
        "<style>p{}</style><aside>Sidebar</aside><form>Search box</form> too</div>"
        "<footer>Copyright</footer></main></body>"
    )
    assert [text for text, _ in html(page)] == ["Kept too"]


def test_non_utf8_text_is_decoded_with_a_fallback_not_dropped(tmp_path: Path) -> None:
    path = tmp_path / "legacy.txt"
    path.write_bytes("Crème brûlée à la française, déjà vu, naïve façade.\n".encode("latin-1"))
    doc = extract_path(path)
    assert [b.text for b in doc.blocks] == ["Crème brûlée à la française, déjà vu, naïve façade."]
    assert doc.metadata["encoding"] != "utf-8"


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.md", b"", "empty file"),
        ("image.txt", bytes(range(256)) * 40, "binary content"),
        ("archive.md", b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + b"\x00" * 100, "binary content"),
    ],
)
def test_empty_and_binary_files_are_rejected(
    tmp_path: Path, name: str, content: bytes, reason: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ExtractionError, match=reason):
        extract_path(path)


# -- URLs -----------------------------------------------------------------------------------------


def test_url_type_follows_the_content_type(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/guide").respond_with_data(HTML, content_type="text/html")
    doc = extract_url(httpserver.url_for("/guide"))
    assert doc.source_type == "url" and doc.title == "Search guide"
    assert doc.metadata["format"] == "html"
    assert "Hybrid search fuses BM25 and vectors." in [b.text for b in doc.blocks]


def test_url_404_and_timeout_are_one_line_errors(httpserver: HTTPServer) -> None:
    def slow(request: Request) -> Response:
        time.sleep(1.5)
        return Response("late", content_type="text/plain")

    httpserver.expect_request("/slow").respond_with_handler(slow)
    httpserver.expect_request("/missing").respond_with_data("no such page", status=404)
    with pytest.raises(ExtractionError, match="HTTP 404"):
        extract_url(httpserver.url_for("/missing"))
    with pytest.raises(ExtractionError, match=r"timed out after 0.3 s"):
        extract_url(httpserver.url_for("/slow"), timeout=0.3)
