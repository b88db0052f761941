"""Golden-set evaluation without a database: the file's validation, how expected sources match
documents, the retrieval metrics pinned to hand values, the judges' replies and scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgrag.errors import ConfigError
from pgrag.eval.golden import (
    GoldenFileError,
    GoldenQuestion,
    load_golden,
    source_matches,
    title_matches,
)
from pgrag.eval.golden_report import parse_threshold
from pgrag.eval.golden_retrieval import RankedDocument, document_ranking, retrieval_metrics
from pgrag.eval.judges import (
    JudgeReplyInvalid,
    average_precision,
    claims_score,
    parse_claims,
    parse_relevance,
    parse_useful,
)
from pgrag.search import SearchHit

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "golden.jsonl"
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    return path


# -- the golden file --------------------------------------------------------------------------


def test_the_sample_golden_file_is_valid_and_names_existing_samples() -> None:
    questions = load_golden(REPO / "samples" / "golden.jsonl", "default")
    assert 15 <= len(questions) <= 25
    assert len({q.id for q in questions}) == len(questions)
    for q in questions:
        for source in q.expected_sources:
            assert (REPO / source).is_file(), source


def test_a_line_gets_defaults_for_its_id_and_tenant(tmp_path: Path) -> None:
    path = write(
        tmp_path, {"question": "Where?"}, "", {"question": "Who?", "tenant": "t2", "id": 7}
    )
    first, second = load_golden(path, "t1")
    assert (first.id, first.tenant, first.line) == ("line-1", "t1", 1)
    assert (second.id, second.tenant, second.line) == ("7", "t2", 3)
    assert not first.judged_for_retrieval


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, found list"),
        ({"expected_sources": ["a.md"]}, "'question' is missing"),
        ({"question": "  "}, "'question' must be a non-empty string"),
        ({"question": "x" * 2001}, "'question' has 2001 characters; at most 2000"),
        ({"question": "Q", "expected_source": ["a.md"]}, "unknown key 'expected_source'"),
        ({"question": "Q", "expected_sources": [1]}, "must be a list of non-empty strings"),
        ({"question": "Q", "id": True}, "'id' must be a string or an integer"),
    ],
)
def test_an_invalid_line_is_refused_naming_its_line(
    tmp_path: Path, line: object, says: str
) -> None:
    path = write(tmp_path, {"question": "fine"}, line)
    with pytest.raises(GoldenFileError) as caught:
        load_golden(path, "default")
    assert str(caught.value).startswith(f"{path}:2: ")
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_every_invalid_line_is_listed_once(tmp_path: Path) -> None:
    path = write(tmp_path, "{", {"question": "ok", "id": "a"}, {"question": "again", "id": "a"})
    with pytest.raises(GoldenFileError) as caught:
        load_golden(path, "default")
    assert caught.value.problems == [
        f"{path}:1: not valid JSON (Expecting property name enclosed in double quotes).",
        f"{path}:3: id 'a' is already used on line 2.",
    ]
    assert str(caught.value).endswith("(and 1 more invalid lines)")


def test_a_file_without_questions_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GoldenFileError, match="no question"):
        load_golden(write(tmp_path, ""), "default")


# -- matching expected sources ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "stored", "matches"),
    [
        ("samples/ingestion.md", "/home/me/pgrag/samples/ingestion.md", True),
        ("./samples/ingestion.md", "/home/me/pgrag/samples/ingestion.md", True),
        ("ingestion.md", "/home/me/pgrag/samples/ingestion.md", True),
        ("ion.md", "/home/me/pgrag/samples/ingestion.md", False),
        ("samples\\ingestion.md", "/srv/samples/ingestion.md", True),
        ("file:///srv/samples/ingestion.md", "/srv/samples/ingestion.md", True),
        ("https://example.com/docs/", "https://example.com/docs", True),
        ("example.com/docs", "https://example.com/docs", True),
        ("https://example.com/docs", "https://mirror.test/example.com/docs", False),
        ("docs/widgets.md", "docs/widgets.md", True),
        ("widgets.md", "docs/gadgets.md", False),
    ],
)
def test_an_expected_source_matches_equal_or_as_a_path_suffix(
    expected: str, stored: str, matches: bool
) -> None:
    assert source_matches(expected, stored) is matches


def test_an_expected_title_matches_ignoring_case_and_spacing() -> None:
    assert title_matches("getting  started with PGRAG", "Getting started with pgrag")
    assert not title_matches("Getting started", "Getting started with pgrag")
    assert not title_matches("x", None)


# -- retrieval metrics -----------------------------------------------------------------------


def hit(rank: int, document_id: int, uri: str, title: str = "") -> SearchHit:
    return SearchHit(rank, 1.0 / rank, rank, document_id, 0, title, uri, "text", None, [], "")


def question(qid: str, *sources: str, titles: tuple[str, ...] = ()) -> GoldenQuestion:
    return GoldenQuestion(qid, "q?", "default", 1, tuple(sources), titles)


def test_a_document_ranks_once_at_its_best_chunk_and_an_item_counts_once() -> None:
    q = question("q", "a.md", titles=("Alpha",))
    hits = [hit(1, 10, "/x/b.md"), hit(2, 11, "/x/a.md"), hit(3, 10, "/x/b.md"),
            hit(4, 12, "/y/a.md", "Alpha")]  # fmt: skip
    ranking = document_ranking(q, hits)
    assert [(d.document_id, d.item) for d in ranking] == [(10, None), (11, 0), (12, 1)]
    # a second document matching an item already found is not relevant again
    again = document_ranking(question("q", "a.md"), hits)
    assert [d.item for d in again] == [None, 0, None]


def test_retrieval_metrics_match_hand_derived_values() -> None:
    def ranked(*items: int | None) -> list[RankedDocument]:
        return [RankedDocument(100 + i, "", "", item) for i, item in enumerate(items)]

    questions = [
        question("first", "a"),  # found first
        question("third", "a"),  # found third
        question("late", "a"),  # found 4th: outside k=3
        question("half", "a", "b"),  # one of two found, second
        question("none", "a"),  # no result at all
    ]
    rankings = {
        "first": ranked(0, None, None),
        "third": ranked(None, None, 0),
        "late": ranked(None, None, None, 0),
        "half": ranked(None, 0, None),
        "none": [],
    }
    got = retrieval_metrics(questions, rankings, k=3)
    assert got["first"] == {"hit_rate": 1.0, "mrr": 1.0, "recall": 1.0}
    assert got["third"] == pytest.approx({"hit_rate": 1.0, "mrr": 1 / 3, "recall": 1.0})
    assert got["late"] == {"hit_rate": 0.0, "mrr": 0.0, "recall": 0.0}
    assert got["half"] == {"hit_rate": 1.0, "mrr": 0.5, "recall": 0.5}
    assert got["none"] == {"hit_rate": 0.0, "mrr": 0.0, "recall": 0.0}


# -- judges -----------------------------------------------------------------------------------


def test_claims_are_parsed_strictly_and_scored_as_a_share() -> None:
    reply = '```json\n{"claims": [{"claim": "a", "supported": true}, ' \
        '{"claim": "b", "supported": false}], "extra": 1}\n```'  # fmt: skip
    claims = parse_claims(reply, "faithfulness")
    assert claims_score(claims) == 0.5
    assert claims_score(parse_claims('{"claims": []}', "faithfulness")) is None


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ("Looks faithful.", "the faithfulness judge replied with no JSON object"),
        ("[1]", "JSON list, not an object"),
        ('{"verdicts": []}', "left out claims from its reply"),
        ('{"claims": [{"claim": "a", "supported": "yes"}]}', "a claim that is not"),
        ('{"claims": "all"}', "claims that are not a list"),
    ],
)
def test_a_malformed_claims_reply_is_refused(reply: str, says: str) -> None:
    with pytest.raises(JudgeReplyInvalid, match=says):
        parse_claims(reply, "faithfulness")


def test_relevance_and_usefulness_replies_are_checked() -> None:
    got = parse_relevance('{"questions": ["Which port?"], "noncommittal": false}')
    assert (got.questions, got.noncommittal) == (["Which port?"], False)
    with pytest.raises(JudgeReplyInvalid, match="noncommittal 'no'"):
        parse_relevance('{"questions": ["Q"], "noncommittal": "no"}')
    with pytest.raises(JudgeReplyInvalid, match="list of 1 to 10 strings"):
        parse_relevance('{"questions": [], "noncommittal": false}')
    assert parse_useful('{"useful": [true, false]}', 2) == [True, False]
    with pytest.raises(JudgeReplyInvalid, match="3 useful verdicts for 2 sources"):
        parse_useful('{"useful": [true, false, true]}', 2)


def test_context_precision_is_the_mean_precision_at_each_useful_rank() -> None:
    assert average_precision([True, False, True]) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision([False, True]) == 0.5
    assert average_precision([False, False]) == 0.0


def test_a_threshold_names_a_known_metric_and_a_share() -> None:
    assert parse_threshold("hit-rate=0.8") == ("hit_rate", 0.8)
    for bad in ("ndcg=0.5", "faithfulness", "recall=high", "mrr=1.5", "mrr=nan"):
        with pytest.raises(ConfigError, match="--min"):
            parse_threshold(bad)


def test_every_judge_prompt_is_documented_word_for_word() -> None:
    from pgrag.eval.judges import PROMPTS

    docs = " ".join((REPO / "docs" / "evaluation.md").read_text(encoding="utf-8").split())
    for name, prompt in PROMPTS.items():
        assert " ".join(prompt.split()) in docs, name
