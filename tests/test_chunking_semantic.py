"""The semantic chunker with the real local model: breakpoints at topic changes, inside the
token chunker's limits (size, sections, pages, whole tables, overlap), and through pgrag ingest."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect
from pgrag.errors import ConfigError
from pgrag.pipeline import semantic_chunking
from pgrag.pipeline.chunking import Chunk, make_chunker, token_counter
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import Block
from pgrag.pipeline.semantic_chunking import parse_breakpoint

BREAD = [
    "The sourdough starter needs flour and water every day.",
    "Bakers keep the starter at room temperature in a glass jar.",
    "A strong starter doubles in size within six hours of feeding.",
    "The dough is folded several times during the bulk fermentation.",
    "Shaping the loaf builds tension on the surface of the dough.",
    "The loaf bakes in a hot Dutch oven for about forty minutes.",
    "A crisp crust forms once the lid comes off the pot.",
    "Cooling the bread on a rack keeps its bottom from going soggy.",
]
JUPITER = [
    "Jupiter is the largest planet in the solar system.",
    "Its Great Red Spot is a storm wider than the Earth.",
    "The planet has at least ninety-five known moons.",
    "Ganymede is the largest moon and has its own magnetic field.",
    "Europa hides a salty ocean under its icy crust.",
    "Io is the most volcanically active body known.",
    "The Juno probe has orbited Jupiter since 2016 to map its gravity field.",
    "The planet radiates more heat than it receives from the Sun.",
]


def semantic(
    blocks: list[Block],
    embedder: LocalEmbedder,
    size: int = 250,
    overlap: int = 0,
    breakpoint: str | None = None,
) -> list[Chunk]:
    chunker = make_chunker(
        "semantic",
        token_counter(embedder),
        size,
        overlap,
        embed=embedder.embed,
        breakpoint=breakpoint,
    )
    return list(chunker.chunks(blocks))


def own_text(chunk: Chunk) -> str:
    return chunk.content[chunk.overlap_chars :]


def test_a_chunk_boundary_falls_where_the_topic_changes(local_embedder: LocalEmbedder) -> None:
    text = Block(" ".join(BREAD + JUPITER))
    structural = make_chunker("tokens", token_counter(local_embedder), 250, 0)
    chunks = semantic([text], local_embedder, overlap=0)

    assert len(list(structural.chunks([text]))) == 1  # it all fits: only the topic cuts here
    assert any(own_text(c).startswith(JUPITER[0]) for c in chunks)
    for c in chunks:  # no chunk mixes the two topics
        assert not (any(s in c.content for s in BREAD) and any(s in c.content for s in JUPITER))


def test_a_fixed_distance_breakpoint_also_cuts_at_the_topic_change(
    local_embedder: LocalEmbedder,
) -> None:
    chunks = semantic([Block(" ".join(BREAD + JUPITER))], local_embedder, breakpoint="0.8")

    assert [own_text(c).split(". ")[0] + "." for c in chunks] == [BREAD[0], JUPITER[0]]


def test_no_semantic_chunk_exceeds_the_size_limit(local_embedder: LocalEmbedder) -> None:
    long_sentence = " ".join(f"word{i}" for i in range(200)) + "."
    blocks = [Block(" ".join(BREAD * 3 + JUPITER * 3)), Block(long_sentence), Block("A" * 500)]
    chunks = semantic(blocks, local_embedder, size=60, overlap=8)

    assert len(chunks) > 6
    assert all(c.token_count <= 60 for c in chunks)
    assert all(c.token_count == local_embedder.count_tokens(c.content) for c in chunks)


def test_a_long_document_is_embedded_in_bounded_windows(
    local_embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(semantic_chunking, "WINDOW_UNITS", 8)
    calls: list[int] = []

    def embed(texts: Sequence[str]) -> Any:
        calls.append(len(texts))
        return local_embedder.embed(texts)

    chunker = make_chunker(
        "semantic", token_counter(local_embedder), 60, 0, embed=embed, breakpoint="p90"
    )
    sentences = (BREAD + JUPITER) * 4
    chunks = list(chunker.chunks([Block(s) for s in sentences]))

    assert len(calls) == len(sentences) // 8 and max(calls) == 8
    assert " ".join(c.content for c in chunks).split() == " ".join(sentences).split()


def test_semantic_chunks_keep_their_section_and_page(local_embedder: LocalEmbedder) -> None:
    blocks = [
        Block("Baking", kind="heading", heading_path=("Baking",), page=1),
        Block(" ".join(BREAD[:4]), heading_path=("Baking",), page=1),
        Block(" ".join(BREAD[4:]), heading_path=("Baking",), page=2),
        Block("Planets", kind="heading", heading_path=("Planets",), page=2),
        Block(" ".join(JUPITER), heading_path=("Planets",), page=3),
    ]
    chunks = semantic(blocks, local_embedder, size=250, overlap=20)

    for c in chunks:  # a chunk never spans two sections
        other = JUPITER if c.heading_path == ("Baking",) else BREAD
        assert c.heading_path in (("Baking",), ("Planets",))
        assert not any(s in c.content for s in other)
    assert chunks[0].content.startswith("Baking\n\n" + BREAD[0])
    assert chunks[0].page == 1
    baking = [c for c in chunks if c.heading_path == ("Baking",)]
    assert any(2 in (c.page, c.metadata.get("page_end")) for c in baking)  # its second page
    planets = [c for c in chunks if c.heading_path == ("Planets",)]
    assert planets[0].content.startswith("Planets\n\n" + JUPITER[0])
    assert (planets[0].page, planets[0].metadata["page_end"]) == (2, 3)  # heading on page 2
    assert all(c.page == 3 for c in planets[1:])


def test_a_table_after_a_topic_change_stays_whole(local_embedder: LocalEmbedder) -> None:
    rows = "| moon | diameter km |\n|---|---|\n" + "\n".join(
        f"| moon {i} | {1000 + 37 * i} |" for i in range(12)
    )
    blocks = [Block(" ".join(BREAD)), Block(rows, kind="table"), Block(" ".join(JUPITER))]
    chunks = semantic(blocks, local_embedder, size=200, overlap=30)

    assert sum(rows in own_text(c) for c in chunks) == 1
    for c in chunks:  # elsewhere rows appear only as the overlap repeating the table's end
        if rows not in own_text(c):
            assert not [ln for ln in own_text(c).split("\n") if ln.startswith("|")]


def test_semantic_chunking_is_deterministic(local_embedder: LocalEmbedder) -> None:
    blocks = [Block(" ".join(BREAD + JUPITER + BREAD[::-1])), Block(" ".join(JUPITER[::-1]))]
    first = semantic(blocks, local_embedder, size=80, overlap=10)
    again = semantic(blocks, LocalEmbedder(), size=80, overlap=10)

    assert [(c.content, c.overlap_chars, c.token_count) for c in first] == [
        (c.content, c.overlap_chars, c.token_count) for c in again
    ]


def test_semantic_chunks_overlap_by_whole_trailing_sentences(
    local_embedder: LocalEmbedder,
) -> None:
    sentences = BREAD + JUPITER
    chunks = semantic([Block(" ".join(sentences * 2))], local_embedder, size=80, overlap=25)

    assert len(chunks) > 3
    for previous, c in itertools.pairwise(chunks):
        if not c.overlap_chars:
            continue
        repeated = c.content[: c.overlap_chars].strip()
        assert previous.content.endswith(repeated)  # the previous chunk's tail, repeated
        assert repeated.split(". ")[0] + ("" if repeated.endswith(".") else ".") in " ".join(
            sentences
        )
        assert local_embedder.count_tokens(repeated) <= 25 + 2
    assert any(c.overlap_chars for c in chunks[1:])


@pytest.mark.parametrize("spec", ["p0", "p100", "0", "2", "high", "p"])
def test_a_bad_breakpoint_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match="--breakpoint"):
        parse_breakpoint(spec)


def test_the_semantic_chunker_needs_an_embedder(local_embedder: LocalEmbedder) -> None:
    with pytest.raises(ConfigError, match="pgrag ingest"):
        make_chunker("semantic", token_counter(local_embedder), 100, 10)


def invoke(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, *args])


def test_ingest_with_the_semantic_chunker_records_it_and_another_chunker_rechunks(
    db: str, tmp_path: Path
) -> None:
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\n" + " ".join(BREAD + JUPITER) + "\n")

    first = invoke(
        db, "ingest", str(path), "--chunker", "semantic", "--breakpoint", "p80", "--json"
    )
    again = invoke(
        db, "ingest", str(path), "--chunker", "semantic", "--breakpoint", "p80", "--json"
    )
    other = invoke(db, "ingest", str(path), "--chunker", "tokens", "--json")

    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["documents_new"] == 1
    assert json.loads(again.output)["documents_unchanged"] == 1
    assert json.loads(other.output)["documents_changed"] == 1
    with connect(db) as conn:
        settings, chunks = conn.execute(
            "select d.metadata -> 'ingest',"
            " (select count(*) from pgrag.chunks c where c.document_id = d.id)"
            " from pgrag.documents d"
        ).fetchone() or (None, 0)
    assert settings["chunker"] == "tokens" and "breakpoint" not in settings
    assert chunks == 1  # the structural chunker keeps the two topics together


def test_ingest_stores_the_semantic_chunks(db: str, tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\n" + " ".join(BREAD + JUPITER) + "\n")

    result = invoke(db, "ingest", str(path), "--chunker", "semantic")

    assert result.exit_code == 0, result.output
    with connect(db) as conn:
        rows = conn.execute(
            "select substr(c.content, c.overlap_chars + 1), c.heading_path, d.metadata -> 'ingest'"
            " from pgrag.chunks c"
            " join pgrag.documents d on d.id = c.document_id order by c.chunk_index"
        ).fetchall()
    assert len(rows) >= 2
    assert any(own.startswith(JUPITER[0]) for own, _, _ in rows)  # after the default overlap
    assert all(list(path_) == ["Notes"] for _, path_, _ in rows)
    assert rows[0][2]["chunker"] == "semantic" and rows[0][2]["breakpoint"] == "p70"


def test_breakpoint_needs_the_semantic_chunker(db: str, tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text("Text.\n")

    result = invoke(db, "ingest", str(path), "--breakpoint", "p80")

    assert result.exit_code != 0
    assert "--breakpoint applies to --chunker semantic only" in result.output


def test_the_sentence_embeddings_are_recorded_as_ingest_usage(
    db: str, tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\n" + " ".join(BREAD + JUPITER) + "\n")

    result = invoke(db, "ingest", str(path), "--chunker", "semantic", "--overlap", "0")

    assert result.exit_code == 0, result.output
    with connect(db) as conn:
        recorded, chunks = conn.execute(
            "select (select sum(input_tokens) from pgrag.token_usage where operation = 'ingest'),"
            " array_agg(content order by chunk_index) from pgrag.chunks"
        ).fetchone() or (0, [])
    chunk_tokens = sum(min(n + 2, 256) for n in local_embedder.count_tokens_many(chunks))
    sentence_tokens = sum(n + 2 for n in local_embedder.count_tokens_many([*BREAD, *JUPITER]))
    assert recorded == chunk_tokens + sentence_tokens
