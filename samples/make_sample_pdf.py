"""Generate the sample PDF of the demo corpus (kept out of git: it is built, not stored).

    .venv/bin/python samples/make_sample_pdf.py [OUT.pdf]    # default samples/pgrag-overview.pdf

Three pages with a table of contents (it becomes the chunks' heading path) and a ruled table
that the PDF extractor keeps whole. The output is the same bytes on every run (fixed dates,
no random file identifier), so rebuilding the demo corpus changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pymupdf

PAGES = [
    (
        "Overview",
        "pgrag stores documents and their chunks in PostgreSQL. Each chunk has an embedding "
        "from the configured model and a full-text vector kept by Postgres itself. Search "
        "functions are plain SQL, so every client can call them.",
    ),
    (
        "Measurements",
        "The ingest benchmark compares the embedding model alone with the whole pipeline, and "
        "binary COPY with row-by-row inserts. The table below lists what each stage does.",
    ),
    (
        "Operations",
        "A run that is killed leaves every committed document whole. The next run finds the "
        "documents still marked processing and completes them, with no duplicate chunk.",
    ),
]
FIXED_DATE = "D:20240101000000Z"
TABLE = [
    ["Stage", "Work", "Runs on"],
    ["extract", "pages, headings, tables", "main thread"],
    ["embed", "new chunks only", "embedding thread"],
    ["load", "binary COPY and swap", "loading thread"],
]


def build(out: Path) -> Path:
    doc = pymupdf.open()
    for number, (title, text) in enumerate(PAGES, start=1):
        page = doc.new_page()
        page.insert_text((72, 72), title, fontsize=18)
        page.insert_textbox(pymupdf.Rect(72, 96, 520, 300), text, fontsize=11)
        if number == 2:
            x0, y0, widths, row_h = 72, 320, [110, 170, 140], 24
            right = x0 + sum(widths)
            for r in range(len(TABLE) + 1):
                page.draw_line((x0, y0 + r * row_h), (right, y0 + r * row_h))
            x = x0
            for w in [*widths, 0]:
                page.draw_line((x, y0), (x, y0 + len(TABLE) * row_h))
                x += w
            for r, row in enumerate(TABLE):
                x = x0
                for w, cell in zip(widths, row, strict=True):
                    page.insert_text((x + 4, y0 + r * row_h + 16), cell, fontsize=10)
                    x += w
    doc.set_toc([[1, title, n] for n, (title, _) in enumerate(PAGES, start=1)])
    doc.set_metadata(
        {
            "title": "pgrag overview",
            "author": "pgrag",
            "creationDate": FIXED_DATE,
            "modDate": FIXED_DATE,
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    # no_new_id: no random /ID (the trailer keeps none); garbage and deflate: a canonical layout.
    data = doc.tobytes(garbage=4, deflate=True, no_new_id=True)
    doc.close()
    out.write_bytes(data)
    return out


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        sys.exit(__doc__)
    target = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "pgrag-overview.pdf"
    )
    print(build(target))
