"""The local model on ONNX Runtime: the same embeddings as sentence-transformers, a search path
without torch, and a graph cache under PGRAG_HOME that repairs itself."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.errors import ConfigError
from pgrag.pipeline.embedders import LocalEmbedder, get_embedder, local_model_path
from pgrag.pipeline.onnx_model import OnnxSentenceEncoder, cache_path

ROOT = Path(__file__).resolve().parent.parent
HEAVY_MODULES = ("torch", "sentence_transformers", "transformers", "fitz", "pymupdf", "onnx")


def texts_of_every_shape() -> list[str]:
    """Short and long, empty and odd: texts under, at and far over the 256-token limit."""
    samples = [p.read_text() for p in sorted((ROOT / "samples").glob("*.md"))]
    paragraphs = [p for s in samples for p in s.split("\n\n") if p.strip()]
    tokenizer = LocalEmbedder()._tokenizer
    piece = "retrieval "  # one word piece each
    assert len(tokenizer.encode(piece * 10, add_special_tokens=False).ids) == 10
    return [
        "",
        " ",
        "a",
        "what happens when an ingest is killed?",
        "ERR-4471 v2.3.1 V-ZQX41-7 part numbers and codes",
        "Ünïcödé — “quotes”, emoji 🚀 and 日本語のテキスト",
        "\n\n\t  leading and trailing whitespace \n",
        "x" * 3000,  # one long word: many word pieces
        *paragraphs,
        "\n\n".join(samples),  # far over 512 tokens
        *(piece * n for n in (250, 253, 254, 255, 256, 300, 600)),  # around the limit
        " ".join(paragraphs) * 3,
    ]


@pytest.fixture(scope="module")
def reference() -> Any:
    """sentence-transformers' own model object (the reference implementation)."""
    return LocalEmbedder(backend="sentence-transformers")


def test_onnx_embeddings_equal_sentence_transformers(
    local_embedder: LocalEmbedder, reference: Any
) -> None:
    texts = texts_of_every_shape()
    assert local_embedder.backend == "onnx"
    fast = local_embedder.embed(texts)
    slow = reference.embed(texts)
    assert fast.shape == slow.shape == (len(texts), 384)
    cosines = (fast * slow).sum(axis=1)
    assert cosines.min() >= 0.9999, texts[int(cosines.argmin())][:80]
    assert np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)


def test_one_text_alone_equals_the_same_text_in_a_mixed_batch(local_embedder: LocalEmbedder):
    texts = texts_of_every_shape()
    batch = local_embedder.embed(texts)
    for i in (0, 3, len(texts) - 1):
        alone = local_embedder.embed([texts[i]])[0]
        assert float(alone @ batch[i]) >= 0.99999


def test_truncation_keeps_the_same_word_pieces_as_sentence_transformers(
    reference: Any, tmp_path: Path
) -> None:
    encoder = OnnxSentenceEncoder(local_model_path(), tmp_path)
    model = reference._model
    for text in texts_of_every_shape():
        expected = model.tokenize([text])["input_ids"][0].tolist()
        assert encoder._tokenizer.encode(text).ids == expected
    assert encoder.max_length == model.max_seq_length == 256


def test_cold_hybrid_search_imports_no_torch(db: str, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("PGRAG_HOME", str(tmp_path / "home"))  # the ingest below caches the graph
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Killed ingests\n\nA killed ingest leaves whole documents.")
    assert CliRunner().invoke(main, ["--dsn", db, "ingest", str(docs)]).exit_code == 0
    probe = (
        "import json, sys\n"
        "from pgrag.cli import main\n"
        "main(['--dsn', sys.argv[1], 'search', 'what happens when an ingest is killed?',"
        " '--mode', 'hybrid', '--json'], standalone_mode=False)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, db], capture_output=True, text=True, check=True
    )
    *_, loaded = done.stdout.strip().splitlines()
    assert json.loads(loaded) == []
    assert "Killed ingests" in done.stdout


def test_the_graph_is_cached_under_pgrag_home(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("PGRAG_HOME", str(tmp_path))
    embedder = LocalEmbedder()
    embedder.embed(["hello"])
    graph = embedder._model.graph_path
    assert graph.parent == tmp_path / "models"
    assert graph == cache_path(local_model_path(), tmp_path / "models")
    checksum = graph.with_name(graph.name + ".sha256").read_text().strip()
    assert hashlib.sha256(graph.read_bytes()).hexdigest() == checksum
    assert sorted(p.name for p in graph.parent.iterdir()) == [graph.name, graph.name + ".sha256"]


@pytest.mark.parametrize("damage", ["corrupt", "truncate", "delete", "delete-checksum"])
def test_a_damaged_graph_cache_is_rebuilt_and_search_still_works(
    db: str, tmp_path: Path, damage: str, monkeypatch: Any
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("PGRAG_HOME", str(home))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Cache\n\nThe graph cache repairs itself when damaged.")
    assert CliRunner().invoke(main, ["--dsn", db, "ingest", str(docs)]).exit_code == 0
    graph = cache_path(local_model_path(), home / "models")
    checksum = graph.with_name(graph.name + ".sha256")
    good = graph.read_bytes()
    if damage == "corrupt":
        graph.write_bytes(b"\x00garbage" + good[100:])
    elif damage == "truncate":
        graph.write_bytes(good[: len(good) // 2])
    elif damage == "delete":
        graph.unlink()
    else:
        checksum.unlink()

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pgrag.cli import main; main()",
            "--dsn",
            db,
            "search",
            "does the cache repair itself?",
            "--mode",
            "hybrid",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "The graph cache repairs itself" in done.stdout
    assert graph.read_bytes() == good
    assert checksum.read_text().strip() == hashlib.sha256(good).hexdigest()


def test_a_failed_cache_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: Any) -> None:
    import pgrag.pipeline.onnx_model as onnx_model

    def interrupted(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(onnx_model.os, "replace", interrupted)
    data, _ = onnx_model.cached_graph(local_model_path(), tmp_path)
    assert data  # the graph still runs from memory
    assert list(tmp_path.iterdir()) == []  # no temporary file, no half-written graph


def test_backend_is_chosen_by_argument_or_environment(monkeypatch: Any) -> None:
    assert LocalEmbedder().backend == "onnx"
    monkeypatch.setenv("PGRAG_LOCAL_BACKEND", "sentence-transformers")
    assert LocalEmbedder().backend == "sentence-transformers"
    assert get_embedder("local").backend == "sentence-transformers"  # type: ignore[attr-defined]
    assert LocalEmbedder(backend="onnx").backend == "onnx"
    monkeypatch.setenv("PGRAG_LOCAL_BACKEND", "tensorflow")
    with pytest.raises(ConfigError, match="PGRAG_LOCAL_BACKEND"):
        LocalEmbedder()


def test_a_missing_onnx_runtime_is_a_one_line_error(tmp_path: Path, monkeypatch: Any) -> None:
    from pgrag.errors import EmbeddingError

    monkeypatch.setenv("PGRAG_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    with pytest.raises(EmbeddingError, match=r"onnxruntime.*PGRAG_LOCAL_BACKEND"):
        LocalEmbedder().embed(["hello"])
