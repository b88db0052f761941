"""The int8 local model: made once from the fp32 graph, cached, reused offline, and close to
fp32's embeddings; PGRAG_LOCAL_PRECISION picks it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pgrag.errors import ConfigError
from pgrag.pipeline.embedders import LocalEmbedder, local_model_path
from pgrag.pipeline.onnx_model import OnnxSentenceEncoder, int8_cache_path

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

    def no_second_quantisation(model_dir: Path) -> bytes:
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


def test_an_unknown_precision_is_a_one_line_error(monkeypatch: Any) -> None:
    monkeypatch.setenv("PGRAG_LOCAL_PRECISION", "int4")
    with pytest.raises(ConfigError, match="PGRAG_LOCAL_PRECISION") as caught:
        LocalEmbedder()
    assert "\n" not in str(caught.value)


def test_int8_needs_the_onnx_backend(monkeypatch: Any) -> None:
    monkeypatch.setenv("PGRAG_LOCAL_PRECISION", "int8")
    with pytest.raises(ConfigError, match="onnx backend"):
        LocalEmbedder(backend="sentence-transformers")
