"""`pgrag eval`: BEIR loading, document rankings from chunk hits, metrics pinned to hand values."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.errors import ConfigError
from pgrag.eval import (
    BeirDataset,
    document_ranking,
    load_beir,
    metrics,
    parse_mode,
)
from pgrag.search import SearchHit, SearchOptions

INV_LOG2_3 = 1 / math.log2(3)  # DCG gain of a relevant document at rank 2


def hit(rank: int, uri: str, chunk_index: int = 0) -> SearchHit:
    return SearchHit(
        rank=rank,
        score=1.0 / rank,
        chunk_id=rank,
        document_id=0,
        chunk_index=chunk_index,
        title="",
        source_uri=uri,
        source_type="text",
        page=None,
        heading_path=[],
        content="",
    )


def test_metrics_match_hand_derived_values() -> None:
    qrels = {
        "first": {"a": 1},  # its only relevant document ranks first
        "second": {"a": 1},  # ... ranks second
        "eleventh": {"a": 1},  # ... ranks 11th: outside @10, inside @100
        "half": {"a": 1, "z": 1},  # one of two relevant documents found, first
        "nothing": {"a": 1},  # no result at all still counts (as 0)
    }
    others = [f"d{i}" for i in range(20)]
    rankings = {
        "first": ["a", *others[:9]],
        "second": ["d0", "a", *others[1:5]],
        "eleventh": [*others[:10], "a"],
        "half": ["a", "d0"],
        "nothing": [],
    }
    got = metrics(qrels, rankings)
    ndcg = [1.0, INV_LOG2_3, 0.0, 1 / (1 + INV_LOG2_3), 0.0]
    assert got["ndcg@10"] == pytest.approx(sum(ndcg) / 5, abs=1e-9)
    assert got["recall@10"] == pytest.approx((1 + 1 + 0 + 0.5 + 0) / 5)
    assert got["recall@100"] == pytest.approx((1 + 1 + 1 + 0.5 + 0) / 5)
    assert got["mrr@10"] == pytest.approx((1 + 0.5 + 0 + 1 + 0) / 5)  # rank 11 gives 0 @10
    assert metrics({"q": {"a": 1}}, {"q": ["a"]}) == {
        "ndcg@10": 1.0,
        "recall@10": 1.0,
        "recall@100": 1.0,
        "mrr@10": 1.0,
    }


def test_a_document_ranks_at_its_best_chunk() -> None:
    dataset = BeirDataset("tiny", Path("."), {}, {}, {})
    hits = [
        hit(1, "beir:tiny/long", 0),
        hit(2, "beir:tiny/long", 3),
        hit(3, "beir:tiny/long", 1),
        hit(4, "beir:tiny/b"),
        hit(5, "beir:other/x"),  # another dataset's document is ignored
        hit(6, "beir:tiny/long", 2),
    ]
    assert document_ranking(dataset, list(reversed(hits))) == ["long", "b"]
    got = metrics({"q": {"b": 1}}, {"q": document_ranking(dataset, hits)})
    assert got["mrr@10"] == 0.5 and got["ndcg@10"] == pytest.approx(INV_LOG2_3)


def test_parse_mode() -> None:
    assert parse_mode("keyword") == ("keyword", SearchOptions(mode="keyword"))
    name, options = parse_mode("hybrid:rrf_k=20,candidate-count=200,vector_weight=0.5")
    assert name == "hybrid:rrf_k=20,candidate-count=200,vector_weight=0.5"
    assert (options.rrf_k, options.candidate_count, options.vector_weight) == (20, 200, 0.5)
    with pytest.raises(ConfigError, match="unknown eval mode"):
        parse_mode("bm42")
    with pytest.raises(ConfigError, match="no tunable search option"):
        parse_mode("hybrid:limit=5")


# -- a tiny BEIR dataset, end to end ------------------------------------------------------------

LONG_DOC = " ".join(
    f"Zymurgy note {i}: zymurgy studies fermentation, and every zymurgy brewer tracks "
    f"yeast strain {i}, wort gravity, mash temperature, hop schedule and conditioning time "
    f"for batch number {i} in the cellar log."
    for i in range(40)
)

CORPUS = [
    {"_id": "err", "title": "Error codes", "text": "ERR-4471 means the upload quota was hit."},
    {"_id": "garden", "title": "Tomatoes", "text": "Tomato plants need six hours of sunlight."},
    {"_id": "long", "title": "Brewing log", "text": LONG_DOC},
    {
        "_id": "b",
        "title": "Library catalogue",
        "text": "The library holds one old book on zymurgy among its many volumes on history, "
        "geography, painting, music, architecture, poetry and the natural sciences.",
    },
    {"_id": "pasta", "title": "Pasta", "text": "Boil pasta in salted water for nine minutes."},
]
QUERIES = [
    {"_id": "q1", "text": "ERR-4471 upload quota"},
    {"_id": "q2", "text": "zymurgy"},
    {"_id": "q3", "text": "tomato sunlight"},
    {"_id": "q9", "text": "a query without judgements is not evaluated"},
]
QRELS = [("q1", "err", 1), ("q2", "b", 1), ("q3", "garden", 1)]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in CORPUS) + "\n")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in QUERIES) + "\n")
    lines = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{s}" for q, d, s in QRELS)]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


def test_load_beir(tiny: Path, tmp_path: Path) -> None:
    data = load_beir(tiny)
    assert data.name == "tiny" and len(data.corpus) == 5
    assert list(data.queries) == ["q1", "q2", "q3"]  # judged queries only
    assert data.qrels["q2"] == {"b": 1}
    assert list(load_beir(tiny, limit_queries=2).qrels) == ["q1", "q2"]
    other = tmp_path / "other.tsv"
    other.write_text("q3\tpasta\t1\n")
    assert load_beir(tiny, qrels_file=other).qrels == {"q3": {"pasta": 1}}
    with pytest.raises(ConfigError, match=r"queries\.jsonl"):
        load_beir(tmp_path)


def test_eval_end_to_end(db: str, tiny: Path, local_embedder: Any) -> None:
    from pgrag.db import connect
    from pgrag.search import search

    runner = CliRunner()
    args = ["--dsn", db, "eval", str(tiny), "--mode", "keyword", "--mode", "hybrid", "--json"]
    result = runner.invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report) == ["keyword", "hybrid"]
    for row in report.values():
        assert set(row) >= {
            "ndcg@10",
            "recall@10",
            "recall@100",
            "mrr@10",
            "latency_p50_ms",
            "latency_p95_ms",
        }
        assert all(0.0 <= row[m] <= 1.0 for m in ("ndcg@10", "recall@10", "mrr@10"))
        assert row["latency_p95_ms"] >= row["latency_p50_ms"] > 0
        assert row["queries"] == 3

    with connect(db) as conn:
        count = conn.execute(
            "select chunk_count from pgrag.documents"
            " where tenant_id = 'beir-tiny' and source_uri = 'beir:tiny/long'"
        ).fetchone()
        assert count is not None and count[0] > 1  # the brewing log spans several chunks
        hits = search(conn, "zymurgy", SearchOptions(mode="keyword", limit=20), tenant="beir-tiny")
    uris = [h.source_uri for h in hits]
    # every chunk of the long document outranks the library catalogue ...
    assert uris[: count[0]] == ["beir:tiny/long"] * count[0] and uris[count[0]] == "beir:tiny/b"
    # ... which still ranks second among documents: q2's MRR is 1/2, so keyword's mean is
    # (1 + 1/2 + 1) / 3, and nDCG@10 is (1 + 1/log2(3) + 1) / 3.
    keyword = report["keyword"]
    assert keyword["mrr@10"] == pytest.approx(2.5 / 3, abs=1e-4)
    assert keyword["ndcg@10"] == pytest.approx((2 + INV_LOG2_3) / 3, abs=1e-4)
    assert keyword["recall@10"] == 1.0

    # A second run re-uses the tenant: nothing is re-ingested, figures are the same.
    again = runner.invoke(main, [*args[:5], "keyword", "--json"], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["keyword"]["ndcg@10"] == (keyword["ndcg@10"])

    table = runner.invoke(main, ["--dsn", db, "eval", str(tiny), "--mode", "keyword"])
    assert table.exit_code == 0, table.output
    assert "tiny: 5 documents, 3 queries" in table.output
    assert "ndcg@10" in table.output and "keyword" in table.output


def test_eval_without_the_eval_extra_says_how_to_install_it(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytrec_eval comes with the eval extra only; None in sys.modules makes its import fail.
    monkeypatch.setitem(sys.modules, "pytrec_eval", None)
    result = CliRunner().invoke(main, ["--dsn", "postgresql://unused/x", "eval", str(tiny)])
    assert result.exit_code == 1
    assert result.output == (
        "Error: pgrag eval needs the eval extra (pytrec-eval-terrier): "
        "pip install 'pgrag-sql[eval]'.\n"
    )
