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
    assign_folds,
    cross_validate,
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


# -- choosing a mode by cross-validation --------------------------------------------------------


def test_folds_are_deterministic_and_partition_the_queries() -> None:
    qids = [f"q{i}" for i in range(7)]
    folds = assign_folds(qids, 3)
    # A hash of the id alone decides the split: pinned, so it is the same on every machine ...
    assert folds == [["q4", "q3", "q1"], ["q5", "q6"], ["q0", "q2"]]
    # ... and in whatever order the queries come.
    assert assign_folds(list(reversed(qids)), 3) == folds
    assert sorted(q for fold in folds for q in fold) == qids


def per_query_values(folds: list[list[str]], ndcg_per_fold: list[float]) -> dict[str, Any]:
    """Every query of fold k gets ``ndcg_per_fold[k]`` as nDCG@10 (and 1 - it as recall@10)."""
    return {
        q: {"ndcg@10": v, "recall@10": 1 - v, "recall@100": 1.0, "mrr@10": v}
        for fold, v in zip(folds, ndcg_per_fold, strict=True)
        for q in fold
    }


def test_each_fold_scores_the_candidate_best_on_the_other_folds() -> None:
    folds = assign_folds([f"q{i}" for i in range(6)], 3)  # three folds of two queries
    # "spiky" wins the full test on the strength of fold 1 alone; on every held-out fold the
    # candidate chosen on the others is the worse one there, so the selection scores 0.
    per_query = {
        "spiky": per_query_values(folds, [1.0, 0.0, 0.0]),
        "steady": per_query_values(folds, [0.0, 0.4, 0.4]),
    }
    cv = cross_validate(per_query, 3)
    assert cv.folds == folds
    assert cv.fold_means == {"spiky": [1.0, 0.0, 0.0], "steady": [0.0, 0.4, 0.4]}
    assert cv.chosen == ["steady", "spiky", "spiky"]
    assert cv.out_of_fold == {"ndcg@10": 0.0, "recall@10": 1.0, "recall@100": 1.0, "mrr@10": 0.0}
    assert cv.best_full_test == ("spiky", pytest.approx(1 / 3))
    assert cv.optimism == pytest.approx(1 / 3)


def test_a_candidate_chosen_on_every_fold_shows_no_optimism() -> None:
    qids = [f"q{i}" for i in range(10)]
    # Means of the same per-query values summed in another order differ in the last bit.
    values = [0.1344, 0.8474, 0.7638, 0.2551, 0.4954, 0.4495, 0.6516, 0.7887, 0.0939, 0.0283]
    best = {
        q: {"ndcg@10": v, "recall@10": v, "recall@100": v, "mrr@10": v}
        for q, v in zip(qids, values, strict=True)
    }
    worse = {q: {m: x - 0.5 for m, x in row.items()} for q, row in best.items()}
    cv = cross_validate({"best": best, "worse": worse}, 5)
    assert cv.chosen == ["best"] * 5
    assert f"{cv.optimism:+.4f}" == "+0.0000"


def test_a_tie_on_the_other_folds_goes_to_the_first_candidate_given() -> None:
    folds = assign_folds([f"q{i}" for i in range(4)], 2)
    same = per_query_values(folds, [0.5, 0.7])
    assert cross_validate({"b": same, "a": same}, 2).chosen == ["b", "b"]


def test_a_single_candidate_reports_only_its_per_fold_means() -> None:
    folds = assign_folds([f"q{i}" for i in range(4)], 2)
    report = cross_validate({"only": per_query_values(folds, [0.5, 0.7])}, 2).as_dict()
    assert report["fold_ndcg@10"] == {"only": [0.5, 0.7]}
    assert "chosen" not in report and "out_of_fold" not in report


def test_eval_folds_reports_the_cross_validated_choice(
    db: str, tiny: Path, local_embedder: Any
) -> None:
    args = ["--dsn", db, "eval", str(tiny), "--mode", "keyword", "--mode", "vector", "--folds", "3"]
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    cv = report["cross_validation"]
    assert cv["folds"] == 3 and cv["fold_sizes"] == [1, 1, 1]
    assert set(cv["fold_ndcg@10"]) == {"keyword", "vector"}
    # One query per fold: each fold's nDCG@10 is that query's, and their mean the full test's.
    for mode in ("keyword", "vector"):
        assert sum(cv["fold_ndcg@10"][mode]) / 3 == pytest.approx(report[mode]["ndcg@10"], 1e-3)
    assert all(choice in ("keyword", "vector") for choice in cv["chosen"])
    assert set(cv["out_of_fold"]) == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    best = max(report[m]["ndcg@10"] for m in ("keyword", "vector"))
    assert cv["best_full_test"]["ndcg@10"] == best
    assert cv["optimism_ndcg@10"] == pytest.approx(best - cv["out_of_fold"]["ndcg@10"], abs=2e-4)

    table = CliRunner().invoke(main, args, catch_exceptions=False)
    assert table.exit_code == 0, table.output
    assert "cross-validation: 3 folds of 1, 1, 1 queries" in table.output
    assert "out-of-fold choice" in table.output and "optimism" in table.output


@pytest.mark.parametrize(
    ("folds", "message"),
    [
        ("1", "Invalid value for '--folds': 1 is not in the range x>=2."),
        ("4", "--folds 4: only 3 queries; use at most 3 folds."),
    ],
)
def test_a_bad_number_of_folds_exits_2_with_one_line(tiny: Path, folds: str, message: str) -> None:
    # A usage error before any work: the database is unreachable here.
    args = ["--dsn", "postgresql://nobody@127.0.0.1:1/none", "eval", str(tiny), "--folds", folds]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.output == f"Error: {message} (see 'main eval --help')\n"
