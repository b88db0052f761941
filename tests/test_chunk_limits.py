"""Chunks respect their limits: model tokens, headings with their text, no embedded binary data,
citations at the page of each chunk's own text, and a context that never exceeds its budget."""

from __future__ import annotations

import base64
import hashlib
import random
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect
from pgrag.ingest import ingest_documents
from pgrag.pipeline.chunking import Chunk, default_sizes, make_chunker, token_counter
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import Block, ExtractedDocument, extract_path
from pgrag.search import ContextOptions, build_context

PROSE = (
    "Hybrid retrieval combines keyword and vector search. Each chunk carries its page and "
    "heading path. The context builder numbers its sources for citations."
)


def chunks_of(blocks: list[Block], embedder: LocalEmbedder, chunker: str = "tokens") -> list[Chunk]:
    size, overlap = default_sizes(chunker, embedder.max_tokens)
    return list(
        make_chunker(
            chunker,
            token_counter(embedder),
            size,
            overlap,
            max_tokens=embedder.max_tokens - 2,
        ).chunks(blocks)
    )


def assert_fits_the_model(chunks: list[Chunk], embedder: LocalEmbedder, limit: int) -> None:
    counts = embedder.count_tokens_many([c.content for c in chunks])
    assert [c.token_count for c in chunks] == counts  # the real count of the stored text
    assert max(counts) <= limit
    # No word the tokenizer would read as one unknown token hides a huge text.
    assert all(len(w) <= 100 for c in chunks for w in c.content.split())


# -- token limits ---------------------------------------------------------------------------------


def test_a_long_line_without_spaces_is_cut_into_chunks_that_fit_the_model(
    local_embedder: LocalEmbedder,
) -> None:
    # (200 KB: a 1 MB line behaves the same, five times slower to tokenize.)
    rng = random.Random(1)
    line = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(200_000))
    chunks = chunks_of([Block(line)], local_embedder)

    size, _ = default_sizes("tokens", local_embedder.max_tokens)
    assert_fits_the_model(chunks, local_embedder, size)
    assert len(chunks) > 200
    own = "".join(c.content[c.overlap_chars :] for c in chunks)
    assert own.replace(" ", "") == line  # cut, never lost: only spaces were added


def test_a_dna_like_line_gets_real_token_counts(local_embedder: LocalEmbedder) -> None:
    rng = random.Random(2)
    line = "".join(rng.choice("ACGT") for _ in range(100_000))
    text = f"Sequence of sample 7: {line} (end)"
    chunks = chunks_of([Block(text)], local_embedder)

    size, _ = default_sizes("tokens", local_embedder.max_tokens)
    assert_fits_the_model(chunks, local_embedder, size)
    assert sum(c.token_count for c in chunks) > 15_000  # 100 KB is not a handful of tokens
    assert max(len(c.content) for c in chunks) < 4 * size * 4


def test_word_windows_never_exceed_what_the_model_reads(local_embedder: LocalEmbedder) -> None:
    # Identifiers tokenize into many word pieces: 178 such words are far more than 254 tokens.
    words = [f"zq{i}x-{i * 7919 % 10007}-kv{i % 97}" for i in range(2000)]
    chunks = chunks_of([Block(" ".join(words))], local_embedder, chunker="words")

    assert_fits_the_model(chunks, local_embedder, local_embedder.max_tokens - 2)
    own = " ".join(c.content[c.overlap_chars :] for c in chunks)
    assert own.split() == words


# -- headings -------------------------------------------------------------------------------------

GUIDE = """# Operations guide

## TLS

### Certificates

Certificates are renewed every ninety days by the renewal job.

## Release process

Releases are cut from the main branch after the full test suite passes.

## Empty section

## Backups

Backups run nightly and are kept for thirty days.
"""


def test_a_heading_is_never_a_chunk_of_its_own(local_embedder: LocalEmbedder) -> None:
    doc = ExtractedDocument.from_text("guide.md", GUIDE, source_type="markdown")
    chunks = chunks_of(list(doc.blocks), local_embedder)

    assert [c.heading_path for c in chunks] == [
        ("Operations guide", "TLS", "Certificates"),
        ("Operations guide", "Release process"),
        ("Operations guide", "Backups"),
    ]
    # Each chunk starts with the headings above its text, then the text.
    assert chunks[0].content.startswith("Operations guide\n\nTLS\n\nCertificates\n\nCertificates")
    assert chunks[1].content == (
        "Release process\n\nReleases are cut from the main branch after the full test suite passes."
    )
    assert "Empty section" not in chunks[2].content


def test_a_document_of_headings_only_still_has_one_chunk(local_embedder: LocalEmbedder) -> None:
    doc = ExtractedDocument.from_text("t.md", "# Title\n\n## Sub\n", source_type="markdown")
    chunks = chunks_of(list(doc.blocks), local_embedder)
    assert [(c.content, c.heading_path) for c in chunks] == [("Title\n\nSub", ("Title", "Sub"))]


# -- embedded binary data -------------------------------------------------------------------------

IMAGE = base64.b64encode(random.Random(3).randbytes(400_000)).decode()


def test_a_markdown_base64_image_makes_no_chunk_of_base64(local_embedder: LocalEmbedder) -> None:
    text = f"# Logo\n\nOur logo:\n\n![the logo](data:image/png;base64,{IMAGE})\n\n{PROSE}\n"
    doc = ExtractedDocument.from_text("logo.md", text, source_type="markdown")
    chunks = chunks_of(list(doc.blocks), local_embedder)

    assert len(chunks) == 1
    assert "base64" not in chunks[0].content and IMAGE[:40] not in chunks[0].content
    assert "the logo" in chunks[0].content and PROSE in chunks[0].content


def test_html_and_text_skip_data_uris_and_base64_runs(local_embedder: LocalEmbedder) -> None:
    html = (
        f"<html><body><p>{PROSE}</p><p>inline data:image/png;base64,{IMAGE[:5000]} end</p>"
        f"<pre>{IMAGE[:3000]}</pre></body></html>"
    )
    wrapped = "\n".join(IMAGE[i : i + 76] for i in range(0, 20_000, 76))  # a MIME/PEM body
    text = f"{PROSE}\n\n-----BEGIN DATA-----\n{wrapped}\n-----END DATA-----\n"
    for source_type, source in (("html", html), ("text", text)):
        doc = ExtractedDocument.from_text(f"x.{source_type}", source, source_type=source_type)
        content = " ".join(c.content for c in chunks_of(list(doc.blocks), local_embedder))
        assert PROSE in content
        assert IMAGE[:40] not in content and IMAGE[100:140] not in content
        assert len(content) < 2 * len(PROSE) + 100


def test_dna_and_hashes_are_text_not_binary() -> None:
    dna = "ACGT" * 40
    sha = hashlib.sha256(b"x").hexdigest()
    doc = ExtractedDocument.from_text("s.txt", f"{dna}\n\n{sha}", source_type="text")
    assert [b.text for b in doc.blocks] == [dna, sha]


# -- PDF citations --------------------------------------------------------------------------------


def sentence(page: int, n: int) -> str:
    return f"Finding {page}-{n} of the audit, reported on page {page}, concerns {n * 13} items."


def make_pdf(path: Path, pages: int = 6, per_page: int = 9) -> None:
    import pymupdf

    doc = pymupdf.open()
    for p in range(1, pages + 1):
        page = doc.new_page()
        y = 72
        for n in range(per_page):
            # Three sentences per paragraph, three paragraphs per page.
            if n % 3 == 0 and n:
                y += 18
            page.insert_text((72, y), sentence(p, n), fontsize=9)
            y += 14
    doc.save(str(path))


def test_every_pdf_sentence_is_cited_with_its_true_page(
    tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    path = tmp_path / "audit.pdf"
    make_pdf(path)
    chunks = chunks_of(list(extract_path(path).blocks), local_embedder)
    assert len(chunks) > 3 and any(c.overlap_chars for c in chunks)

    for chunk in chunks:
        own = chunk.content[chunk.overlap_chars :]
        found = [(int(p), int(n)) for p, n in re.findall(r"Finding (\d+)-(\d+)", own)]
        assert found, chunk
        first_page = found[0][0]
        last_page = max(p for p, _ in found)
        # The chunk is cited at the page where its own text starts, with the last page it spans.
        assert chunk.page == first_page
        assert chunk.metadata.get("page_end", chunk.page) == last_page


def test_context_cites_a_page_range_when_a_source_spans_pages(
    db: str, tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    path = tmp_path / "audit.pdf"
    make_pdf(path, pages=3, per_page=12)
    ingest_documents(db, [extract_path(path)], tenant="t", embedder=local_embedder)
    with connect(db) as conn:
        spans = conn.execute(
            "select page, (metadata->>'page_end')::int from pgrag.chunks order by chunk_index"
        ).fetchall()
        ctx = build_context(
            conn,
            "Finding 2-11 of the audit",
            ContextOptions(token_budget=4000),
            tenant="t",
            embedder=local_embedder,
        )
    spanning = [(p, e) for p, e in spans if e is not None]
    assert spanning, spans
    for source in ctx.sources:
        if source.get("page_end"):
            assert f"pages {source['page']}-{source['page_end']}" in ctx.context
    assert any(s.get("page_end") for s in ctx.sources) == any(
        f"pages {p}-{e}" in ctx.context for p, e in spanning
    )


# -- the context budget ---------------------------------------------------------------------------


def insert_lying_chunk(dsn: str, content: str, token_count: int, embedding: Any) -> None:
    """A chunk written by some client with a wrong token_count (SQL cannot trust the count)."""
    with connect(dsn) as conn:
        doc = conn.execute(
            "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status,"
            " chunk_count) values ('t', 'Blob', 'text', 'blob.txt', 'ready', 1) returning id"
        ).fetchone()
        assert doc is not None
        conn.execute(
            "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding,"
            " token_count, content_sha256) values ('t', %s, 0, %s, %s, %s, 'x')",
            (doc[0], content, embedding, token_count),
        )


@pytest.fixture
def big_corpus(db: str, local_embedder: LocalEmbedder) -> str:
    line = "".join(random.Random(4).choice("ACGT") for _ in range(30_000))
    docs = [
        ExtractedDocument.from_text("dna.txt", f"Genome of the widget bacterium:\n{line}"),
        ExtractedDocument.from_text(
            "widgets.md",
            "# Widgets\n\n" + " ".join([PROSE] * 20) + "\n\nThe widget genome is sequenced.",
            source_type="markdown",
        ),
    ]
    summary = ingest_documents(db, docs, tenant="t", embedder=local_embedder)
    assert not summary.failures
    vector = local_embedder.embed(["widget genome sequence"])[0]
    insert_lying_chunk(db, "widget genome " + "GATTACA" * 50_000, 1, vector)
    return db


@pytest.mark.parametrize("budget", [200, 500, 2000])
def test_build_context_never_exceeds_its_token_budget(
    big_corpus: str, local_embedder: LocalEmbedder, budget: int
) -> None:
    with connect(big_corpus) as conn:
        ctx = build_context(
            conn,
            "widget genome sequence",
            ContextOptions(token_budget=budget, min_score=-1.0, window=1),
            tenant="t",
            embedder=local_embedder,
        )
    assert ctx.sources
    assert local_embedder.count_tokens(ctx.context) <= budget
    assert sum(s["token_count"] for s in ctx.sources) <= budget
    assert "GATTACA" * 1000 not in ctx.context  # the chunk with a lying count is skipped


def test_ask_token_budget_bounds_the_printed_context(
    big_corpus: str, local_embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PGRAG_CHAT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(
        main,
        [
            "--dsn",
            big_corpus,
            "ask",
            "widget genome sequence",
            "--token-budget",
            "500",
            "--tenant",
            "t",
            "--context-only",
            "--min-score",
            "-1",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "[Source 1]" in result.output
    assert len(result.output) < 500 * 8


# -- relevance floor ------------------------------------------------------------------------------


@pytest.fixture
def samples(db: str, local_embedder: LocalEmbedder) -> str:
    root = Path(__file__).resolve().parent.parent / "samples"
    docs = [extract_path(p) for p in sorted(root.iterdir()) if p.suffix in (".md", ".html")]
    summary = ingest_documents(db, docs, tenant="t", embedder=local_embedder)
    assert not summary.failures
    return db


@pytest.mark.parametrize(
    "question",
    [
        "what is the capital of France?",
        "how do I bake sourdough bread?",
        "who won the football world cup in 2018?",
    ],
)
def test_an_off_topic_question_gets_no_context_by_default(
    samples: str, local_embedder: LocalEmbedder, question: str
) -> None:
    with connect(samples) as conn:
        ctx = build_context(conn, question, ContextOptions(), tenant="t", embedder=local_embedder)
    assert ctx.context == "" and ctx.sources == []


def test_a_question_the_documents_answer_still_gets_context(
    samples: str, local_embedder: LocalEmbedder
) -> None:
    with connect(samples) as conn:
        ctx = build_context(
            conn,
            "how are documents split into chunks?",
            ContextOptions(),
            tenant="t",
            embedder=local_embedder,
        )
    assert ctx.sources and "[Source 1]" in ctx.context


def test_ask_says_no_relevant_information_for_an_off_topic_question(
    samples: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PGRAG_CHAT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(
        main,
        ["--dsn", samples, "ask", "what is the capital of France?", "--tenant", "t"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "No relevant information found."
