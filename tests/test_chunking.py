"""The chunkers, with the local model's real tokenizer (the model itself is never loaded)."""

from __future__ import annotations

import itertools
import re

import pytest

from pgrag.pipeline.chunking import (
    Chunk,
    default_sizes,
    make_chunker,
    split_sentences,
    token_counter,
)
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import Block

SENTENCES = [
    f"Sentence number {i} explains one idea about hybrid retrieval in Postgres."
    if i % 3
    else f"Short point {i}."
    for i in range(120)
]


def paragraphs(n_per: int = 6) -> list[Block]:
    return [
        Block(" ".join(SENTENCES[i : i + n_per]), heading_path=("Guide",))
        for i in range(0, len(SENTENCES), n_per)
    ]


def chunk(blocks: list[Block], embedder: LocalEmbedder, **kw: object) -> list[Chunk]:
    size = kw.pop("size", 100)
    overlap = kw.pop("overlap", 15)
    name = str(kw.pop("chunker", "tokens"))
    chunker = make_chunker(name, token_counter(embedder), int(size), int(overlap))  # type: ignore[call-overload]
    return list(chunker.chunks(blocks))


def norm(text: str) -> str:
    return " ".join(text.split())


def test_defaults_fit_the_model_window() -> None:
    assert default_sizes("tokens", 256) == (250, 31)  # all-MiniLM-L6-v2 truncates at 256
    assert default_sizes("tokens", 8191) == (512, 64)  # OpenAI: at most 512, 12.5 % overlap
    assert default_sizes("words", 8191) == (500, 50)


def test_token_chunks_fit_the_budget_cut_between_sentences_and_overlap_exactly(
    local_embedder: LocalEmbedder,
) -> None:
    chunks = chunk(paragraphs(), local_embedder, size=100, overlap=15)

    assert len(chunks) > 5
    assert [c.index for c in chunks] == list(range(len(chunks)))
    sentence_set = set(SENTENCES)
    for prev, cur in itertools.pairwise(chunks):
        repeated = cur.content[: cur.overlap_chars]
        assert cur.overlap_chars > 0 and prev.content.endswith(repeated.rstrip())
        assert local_embedder.count_tokens(repeated) <= 15
    for c in chunks:
        assert c.token_count == local_embedder.count_tokens(c.content) <= 100
        assert all(s in sentence_set for s in split_sentences(c.content.replace("\n", " ")))
        assert c.heading_path == ("Guide",) and c.sha256 == Chunk(0, c.content, 0).sha256
    # Stripping each chunk's overlap gives the text back exactly once, in order.
    rebuilt = " ".join(c.content[c.overlap_chars :] for c in chunks)
    assert norm(rebuilt) == norm(" ".join(SENTENCES))


def test_chunks_prefer_paragraph_boundaries_and_never_span_sections(
    local_embedder: LocalEmbedder,
) -> None:
    blocks = [
        Block("Install", heading_path=("Install",), kind="heading"),
        *[Block(b.text, heading_path=("Install",)) for b in paragraphs(4)[:3]],
        Block("Linux", heading_path=("Install", "Linux"), kind="heading"),
        Block("Use apt. It works.", heading_path=("Install", "Linux")),
    ]
    chunks = chunk(blocks, local_embedder, size=120, overlap=0)

    assert chunks[-1].content == "Linux\n\nUse apt. It works."
    assert chunks[-1].heading_path == ("Install", "Linux")
    assert all("Linux" not in c.content for c in chunks[:-1])
    # Paragraphs of ~60 tokens: each chunk holds whole paragraphs (none is cut in two).
    for c in chunks[:-1]:
        for part in c.content.split("\n\n"):
            assert part == "Install" or any(part == b.text for b in blocks)


def test_table_rows_are_never_split_and_small_tables_stay_whole(
    local_embedder: LocalEmbedder,
) -> None:
    rows = "\n".join(f"| row {i} | value {i * 7} | unit of measure {i} |" for i in range(60))
    intro = Block(" ".join(SENTENCES[:8]))
    small = Block("| a | b |\n| 1 | 2 |", kind="table")
    chunks = chunk([intro, Block(rows, kind="table"), small], local_embedder, size=80, overlap=10)

    table_lines = [ln for c in chunks for ln in c.content.split("\n") if ln.startswith("|")]
    assert all(
        re.fullmatch(r"\| row \d+ \| value \d+ \| unit of measure \d+ \||\| . \| . \|", ln)
        for ln in table_lines
    )
    assert any(c.content.endswith("| a | b |\n| 1 | 2 |") for c in chunks)


def test_a_sentence_longer_than_a_chunk_is_cut_between_words(
    local_embedder: LocalEmbedder,
) -> None:
    long_sentence = " ".join(f"word{i}" for i in range(300)) + "."
    chunks = chunk([Block(long_sentence)], local_embedder, size=60, overlap=0)

    assert len(chunks) > 3
    assert all(c.token_count <= 60 for c in chunks)
    assert norm(" ".join(c.content for c in chunks)) == long_sentence


def test_word_windows_have_fixed_size_and_overlap(local_embedder: LocalEmbedder) -> None:
    words = [f"w{i}" for i in range(1050)]
    blocks = [Block(" ".join(words[:500]), page=1), Block(" ".join(words[500:]), page=2)]
    chunks = chunk(blocks, local_embedder, chunker="words", size=500, overlap=50)

    assert [len(c.content.split()) for c in chunks] == [500, 500, 150]
    assert chunks[1].content.split()[:50] == chunks[0].content.split()[-50:]
    assert chunks[1].content[chunks[1].overlap_chars :].split()[0] == "w500"
    # A chunk is cited at the page of its own text, not of the overlap it repeats.
    assert (chunks[0].page, chunks[1].page, chunks[1].metadata) == (1, 2, {})
    assert chunks[2].token_count == local_embedder.count_tokens(chunks[2].content)


def test_sentence_splitter_keeps_abbreviations() -> None:
    text = "Dr. Smith et al. measured it, e.g. in mice. Results were clear! Was it 3.5 mg? Yes."
    assert split_sentences(text) == [
        "Dr. Smith et al. measured it, e.g. in mice.",
        "Results were clear!",
        "Was it 3.5 mg?",
        "Yes.",
    ]


@pytest.mark.parametrize(("size", "overlap"), [(4, 0), (100, 60)])
def test_bad_sizes_are_refused(size: int, overlap: int, local_embedder: LocalEmbedder) -> None:
    from pgrag.errors import ConfigError

    with pytest.raises(ConfigError):
        make_chunker("tokens", token_counter(local_embedder), size, overlap)
