"""Files of every kind the extractors read, generated on the spot: PDFs (a report with a table
of contents and a table, an encrypted one, a scanned one, a corrupt one), Markdown, HTML."""

from __future__ import annotations

from pathlib import Path

import pymupdf

TABLE_ROWS = [
    ["Metric", "Value", "Unit"],
    ["Latency", "12", "ms"],
    ["Throughput", "450", "rows per s"],
]


def make_report_pdf(path: Path, pages: int = 3, table_page: int = 2) -> Path:
    """A multi-page PDF with a title, a table of contents and a ruled table on one page."""
    doc = pymupdf.open()
    for i in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 72), f"Chapter {i}", fontsize=16)
        body = f"This is page {i} of the report. It discusses topic number {i} at length. " * 3
        page.insert_textbox(pymupdf.Rect(72, 100, 520, 300), body, fontsize=11)
        if i == table_page:
            x0, y0, cw, rh = 72, 400, 150, 24
            for r in range(len(TABLE_ROWS) + 1):
                page.draw_line((x0, y0 + r * rh), (x0 + 3 * cw, y0 + r * rh))
            for c in range(4):
                page.draw_line((x0 + c * cw, y0), (x0 + c * cw, y0 + len(TABLE_ROWS) * rh))
            for r, row in enumerate(TABLE_ROWS):
                for c, cell in enumerate(row):
                    page.insert_text((x0 + c * cw + 4, y0 + r * rh + 16), cell, fontsize=10)
    toc = [[1, f"Chapter {i}", i] for i in range(1, pages + 1)]
    toc.insert(table_page, [2, "Results", table_page])
    doc.set_toc(toc)
    doc.set_metadata({"title": "Quarterly Report"})
    doc.save(str(path))
    return path


def make_encrypted_pdf(path: Path) -> Path:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret")
    doc.save(
        str(path),
        encryption=pymupdf.PDF_ENCRYPT_AES_256,
        user_pw="user",
        owner_pw="owner",
    )
    return path


def make_scanned_pdf(path: Path) -> Path:
    """A PDF whose only page is an image: nothing to extract without OCR."""
    doc = pymupdf.open()
    page = doc.new_page()
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 64), False)
    pix.clear_with(200)
    page.insert_image(pymupdf.Rect(72, 72, 272, 272), pixmap=pix)
    doc.save(str(path))
    return path


def make_corrupt_pdf(path: Path) -> Path:
    path.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\n garbage \x00\x01\x02 trailer")
    return path


MARKDOWN = """---
title: Installing pgrag
---
# Install

pgrag needs PostgreSQL with pgvector.

## Linux

Use the package manager. Then run pgrag migrate.

### Debian

apt-get install postgresql-18-pgvector

## macOS

Use Homebrew.

| OS | Command |
|----|---------|
| macOS | brew install pgvector |

```sh
# not a heading
pgrag migrate
```
"""

HTML = """<html><head><title>Search guide</title><style>body{color:red}</style>
<script>var tracking = "do not index";</script></head>
<body><nav><a href="/">Home</a> <a href="/docs">Docs navigation menu</a></nav>
<header>Site header banner</header>
<main><h1>Search</h1><p>Hybrid search fuses <b>BM25</b> and vectors.</p>
<h2>Filters</h2><ul><li>tenant</li><li>metadata</li></ul>
<table><tr><th>k</th><th>meaning</th></tr><tr><td>60</td><td>RRF constant</td></tr></table>
</main><aside>Related posts sidebar</aside><footer>Copyright footer</footer></body></html>
"""
