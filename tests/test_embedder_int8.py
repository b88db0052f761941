"""The int8 local model: made once from the fp32 graph, cached, reused offline, and close to
fp32's embeddings; documents embed in it by default, queries in fp32, and PGRAG_LOCAL_PRECISION
chooses for both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect
from pgrag.errors import ConfigError
from pgrag.pipeline.embedders import Embedder, LocalEmbedder, get_embedder, local_model_path
from pgrag.pipeline.onnx_model import OnnxSentenceEncoder, cache_path, int8_cache_path
from pgrag.search import query_embedder

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def int8_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PGRAG_HOME whose model cache holds the int8 model (made here, once per module)."""
    home = tmp_path_factory.mktemp("int8-home")
    OnnxSentenceEncoder(local_model_path(), home / "models", precision="int8")
    return home


def sample_texts() -> list[str]:
    samples = [p.read_text() for p in sorted((ROOT / "samples").glob("*.md"))]
    paragraphs = [p for s in samples for p in s.split("\n\n") if len(p.strip()) > 40]
    return ["what happens when an ingest is killed?", *paragraphs[:30], "\n\n".join(samples)]


def test_the_int8_model_is_made_once_and_then_loaded_from_the_cache(
    int8_home: Path, monkeypatch: Any
) -> None:
    import pgrag.pipeline.onnx_model as onnx_model

    path = int8_cache_path(local_model_path(), int8_home / "models")
    checksum = path.with_name(path.name + ".sha256")
    assert path.is_file() and checksum.is_file()
    before = (path.stat().st_mtime_ns, checksum.read_text())

    def no_second_quantisation(model_dir: Path, graph: bytes) -> bytes:
        raise AssertionError("the cached int8 model was made again")

    monkeypatch.setattr(onnx_model, "quantize_int8", no_second_quantisation)
    encoder = OnnxSentenceEncoder(local_model_path(), int8_home / "models", precision="int8")
    assert encoder.graph_path == path
    assert (path.stat().st_mtime_ns, checksum.read_text()) == before


def test_int8_embeddings_are_unit_vectors_close_to_fp32s(
    int8_home: Path, local_embedder: LocalEmbedder, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PGRAG_HOME", str(int8_home))
    texts = sample_texts()
    quantised = LocalEmbedder(precision="int8").embed(texts)
    assert quantised.shape == (len(texts), 384) and quantised.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    cosines = (quantised * local_embedder.embed(texts)).sum(axis=1)
    assert cosines.min() >= 0.98


def test_precision_is_chosen_by_argument_or_environment(monkeypatch: Any) -> None:
    assert LocalEmbedder().precision == "fp32"
    monkeypatch.setenv("PGRAG_LOCAL_PRECISION", "int8")
    assert LocalEmbedder().precision == "int8"
    assert LocalEmbedder(precision="fp32").precision == "fp32"


def precision(embedder: Embedder) -> str:
    assert isinstance(embedder, LocalEmbedder)
    return embedder.precision


def test_documents_embed_in_int8_and_queries_in_fp32_unless_the_environment_says(
    monkeypatch: Any,
) -> None:
    monkeypatch.delenv("PGRAG_LOCAL_PRECISION", raising=False)
    assert precision(get_embedder("local", for_documents=True)) == "int8"
    assert precision(get_embedder("local")) == "fp32"
    assert LocalEmbedder(backend="sentence-transformers", for_documents=True).precision == "fp32"
    for chosen in ("fp32", "int8"):
        monkeypatch.setenv("PGRAG_LOCAL_PRECISION", chosen)
        assert precision(get_embedder("local", for_documents=True)) == chosen
        assert precision(get_embedder("local")) == chosen


def test_pgrag_ingest_stores_int8_embeddings_that_an_fp32_query_finds(
    db: str, tmp_path: Path, local_embedder: LocalEmbedder, monkeypatch: Any
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("PGRAG_HOME", str(home))
    monkeypatch.delenv("PGRAG_LOCAL_PRECISION", raising=False)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Killed ingests\n\nA killed ingest leaves whole documents.")

    assert CliRunner().invoke(main, ["--dsn", db, "ingest", str(docs)]).exit_code == 0

    with connect(db) as conn:
        content, stored = conn.execute("select content, embedding from pgrag.chunks").fetchone()
        assert precision(query_embedder(conn)) == "fp32"
    quantised = LocalEmbedder(precision="int8").embed([content])[0]
    np.testing.assert_allclose(stored.to_numpy(), quantised, atol=1e-5)
    assert not np.allclose(stored.to_numpy(), local_embedder.embed([content])[0], atol=1e-4)
    # Making the int8 copy cached the fp32 graph too: a search loads it, builds nothing.
    assert cache_path(local_model_path(), home / "models").is_file()
    found = CliRunner().invoke(main, ["--dsn", db, "search", "what does a killed ingest leave?"])
    assert found.exit_code == 0 and "Killed ingests" in found.output


def test_pgrag_eval_embeds_its_corpus_as_ingest_does_and_its_queries_as_search_does(
    db: str, tmp_path: Path, int8_home: Path, local_embedder: LocalEmbedder, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PGRAG_HOME", str(int8_home))
    monkeypatch.delenv("PGRAG_LOCAL_PRECISION", raising=False)
    data = tmp_path / "killed"
    (data / "qrels").mkdir(parents=True)
    doc = {"_id": "k", "title": "Killed ingests", "text": "A killed ingest leaves whole documents."}
    query = "what does a killed ingest leave?"
    (data / "corpus.jsonl").write_text(json.dumps(doc) + "\n")
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": query}) + "\n")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tk\t1\n")

    result = CliRunner().invoke(
        main, ["--dsn", db, "eval", str(data), "--mode", "vector", "--json"]
    )

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["vector"]["ndcg@10"] == 1.0
    with connect(db) as conn:
        content, stored = conn.execute(
            "select content, embedding from pgrag.chunks where tenant_id = 'beir-killed'"
        ).fetchone()
        (cached,) = conn.execute(
            "select embedding from pgrag.query_embeddings where tenant_id = 'beir-killed'"
        ).fetchone()
    quantised = LocalEmbedder(precision="int8").embed([content])[0]
    np.testing.assert_allclose(stored.to_numpy(), quantised, atol=1e-5)
    np.testing.assert_allclose(cached.to_numpy(), local_embedder.embed([query])[0], atol=1e-5)


def test_an_unknown_precision_is_a_one_line_error(monkeypatch: Any) -> None:
    monkeypatch.setenv("PGRAG_LOCAL_PRECISION", "int4")
    with pytest.raises(ConfigError, match="PGRAG_LOCAL_PRECISION") as caught:
        LocalEmbedder()
    assert "\n" not in str(caught.value)


def test_int8_needs_the_onnx_backend(monkeypatch: Any) -> None:
    monkeypatch.setenv("PGRAG_LOCAL_PRECISION", "int8")
    with pytest.raises(ConfigError, match="onnx backend"):
        LocalEmbedder(backend="sentence-transformers")
