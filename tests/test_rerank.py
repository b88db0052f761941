"""Re-ranking: the step that re-orders hits, a local cross-encoder and an HTTP re-rank API."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from plugins.rerank import Failure, RerankApi, build_cross_encoder

from pgrag.errors import ConfigError, RerankError
from pgrag.rerank import Reranker, rerank, reranker_from_spec
from pgrag.rerank.http import HttpReranker, retry_after
from pgrag.rerank.local import CrossEncoderReranker
from pgrag.search import SearchHit

DOCUMENTS = [
    "The widget service listens on port 8443.",
    "Tomato plants need six hours of sunlight.",
    "Boil pasta in salted water for nine minutes.",
    "ERR-4471 means the upload quota was hit.",
    "Deploy with the blue-green strategy on Fridays.",
]


def hit(rank: int, **arms: float | int | None) -> SearchHit:
    return SearchHit(
        rank=rank,
        score=1.0 / rank,
        chunk_id=100 + rank,
        document_id=rank,
        chunk_index=0,
        title=f"doc {rank}",
        source_uri=f"docs/{rank}.md",
        source_type="markdown",
        page=None,
        heading_path=[],
        content=f"text {rank}",
        **arms,  # type: ignore[arg-type]
    )


# -- the re-ordering step -----------------------------------------------------------------------


def test_rerank_orders_by_score_and_keeps_each_arms_rank_and_score() -> None:
    hits = [hit(1, vector_rank=3, vector_score=0.5, keyword_rank=1, keyword_score=7.0), hit(2)]
    hits.append(hit(3, vector_rank=1, vector_score=0.9))
    out = rerank(hits, [0.1, 0.5, 0.9], top_n=2)
    assert [h.chunk_id for h in out] == [103, 102]
    assert [(h.rank, h.rerank_rank, h.fused_rank) for h in out] == [(1, 1, 3), (2, 2, 2)]
    assert [h.rerank_score for h in out] == [0.9, 0.5]
    assert (out[0].vector_rank, out[0].vector_score, out[0].score) == (1, 0.9, 1.0 / 3)


def test_rerank_ties_keep_the_search_order() -> None:
    hits = [hit(r) for r in range(1, 6)]
    out = rerank(hits, [0.2, 0.7, 0.2, 0.7, 0.2], top_n=5)
    assert [h.fused_rank for h in out] == [2, 4, 1, 3, 5]


def test_rerank_refuses_scores_that_do_not_match_the_hits() -> None:
    with pytest.raises(RerankError, match="2 re-rank scores for 3 hits"):
        rerank([hit(1), hit(2), hit(3)], [0.1, 0.2], top_n=3)


def test_a_bad_rerank_spec_names_the_accepted_forms() -> None:
    with pytest.raises(ConfigError, match=r"names no re-ranker: use local:MODEL .* http"):
        reranker_from_spec("cohere")
    with pytest.raises(ConfigError, match="needs a model name or path"):
        reranker_from_spec("local:")


# -- the local cross-encoder --------------------------------------------------------------------


def test_a_local_cross_encoder_is_a_reranker(tiny_cross_encoder: Path) -> None:
    reranker = reranker_from_spec(f"local:{tiny_cross_encoder}")
    assert isinstance(reranker, Reranker) and reranker.name == f"local:{tiny_cross_encoder}"
    assert reranker.score("anything", []) == []


def test_local_scores_are_the_same_whatever_the_batch_size(tiny_cross_encoder: Path) -> None:
    one = CrossEncoderReranker(str(tiny_cross_encoder), batch_size=1)
    many = CrossEncoderReranker(str(tiny_cross_encoder), batch_size=64)
    query = "which port does the widget service use"
    a, b = one.score(query, DOCUMENTS), many.score(query, DOCUMENTS)
    assert len(a) == len(DOCUMENTS) and a == pytest.approx(b, abs=1e-5)
    assert len(set(round(s, 4) for s in a)) == len(a)  # distinct: an order to check against


def test_local_reranking_follows_the_models_scores(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoder))
    query = "tomato sunlight"
    hits = [
        SearchHit(**{**hit(n + 1).__dict__, "content": text}) for n, text in enumerate(DOCUMENTS)
    ]
    scores = reranker.score(query, DOCUMENTS)
    out = rerank(hits, scores, top_n=3)
    best = sorted(range(len(scores)), key=lambda i: -scores[i])[:3]
    assert [h.content for h in out] == [DOCUMENTS[i] for i in best]
    assert [h.rerank_score for h in out] == sorted(scores, reverse=True)[:3]


def test_a_long_document_is_truncated_to_what_the_model_reads(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoder))
    long = "widget " * 5000  # far beyond 512 word pieces
    scores = reranker.score("widget port", [long, DOCUMENTS[0]])
    assert len(scores) == 2 and reranker.max_length == 512


def test_the_local_model_loads_offline(
    tiny_cross_encoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert len(CrossEncoderReranker(str(tiny_cross_encoder)).score("q", DOCUMENTS[:2])) == 2


def test_a_model_not_on_this_machine_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    reranker = CrossEncoderReranker("cross-encoder/ms-marco-MiniLM-L-6-v2-not-cached")
    with pytest.raises(RerankError) as caught:
        reranker.score("q", ["d"])
    message = str(caught.value)
    assert "could not be loaded offline" in message and "huggingface-cli download" in message
    assert "\n" not in message


def test_a_missing_model_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(RerankError, match="does not exist"):
        CrossEncoderReranker(str(tmp_path / "nothing")).score("q", ["d"])


def test_a_model_with_several_outputs_is_refused(tmp_path: Path) -> None:
    folder = build_cross_encoder(tmp_path / "two", num_labels=2)
    with pytest.raises(RerankError, match=r"has 2 outputs: a re-ranker needs .*num_labels 1"):
        CrossEncoderReranker(str(folder)).score("q", ["d"])


# -- the HTTP re-rank API -----------------------------------------------------------------------


def api_reranker(api: RerankApi, **kwargs: object) -> HttpReranker:
    waits: list[float] = []
    options: dict[str, object] = {"sleep": waits.append, "timeout": 5.0, **kwargs}
    reranker = HttpReranker(api.url, **options)  # type: ignore[arg-type]
    reranker.waits = waits  # type: ignore[attr-defined]
    return reranker


def test_the_api_scores_every_document_in_order(rerank_api: RerankApi) -> None:
    reranker = api_reranker(rerank_api, model="rerank-test", api_key="k-1")
    scores = reranker.score("widget port", DOCUMENTS)
    assert scores == [2.0, 0.0, 0.0, 0.0, 0.0]
    (body,) = rerank_api.bodies
    assert body == {
        "query": "widget port",
        "documents": DOCUMENTS,
        "top_n": 5,
        "model": "rerank-test",
    }
    assert rerank_api.headers[0]["Authorization"] == "Bearer k-1"


def test_a_tei_style_bare_list_is_accepted(rerank_api: RerankApi) -> None:
    rerank_api.shape = "tei"
    assert api_reranker(rerank_api).score("pasta water", DOCUMENTS)[2] == 2.0


def test_429_waits_what_retry_after_asks_then_succeeds(rerank_api: RerankApi) -> None:
    rerank_api.failures = [Failure(429, {"Retry-After": "2"}), Failure(503)]
    reranker = api_reranker(rerank_api, backoff=0.25)
    assert reranker.score("widget", DOCUMENTS)[0] == 1.0
    assert reranker.waits == [2.0, 0.5]  # type: ignore[attr-defined]
    assert len(rerank_api.bodies) == 3


def test_retry_after_as_an_http_date() -> None:
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: no wait
    assert retry_after("soon") is None and retry_after("3.5") == 3.5


def test_a_500_that_persists_is_one_line_after_the_retries(rerank_api: RerankApi) -> None:
    rerank_api.failures = [Failure(500, body='{"error": "boom"}')] * 3
    with pytest.raises(RerankError) as caught:
        api_reranker(rerank_api, retries=2).score("q", DOCUMENTS)
    assert str(caught.value).startswith(f"the re-rank API at {rerank_api.url} answered HTTP 500")
    assert "boom" in str(caught.value) and len(rerank_api.bodies) == 3


def test_a_timeout_is_one_line(rerank_api: RerankApi) -> None:
    rerank_api.failures = [Failure(delay=1.5)]
    with pytest.raises(RerankError, match=r"did not answer within 0.3 s \(1 attempts\)"):
        api_reranker(rerank_api, timeout=0.3, retries=0).score("q", DOCUMENTS)


def test_a_reply_that_is_not_json_is_one_line(rerank_api: RerankApi) -> None:
    rerank_api.failures = [Failure(200, body="<html>hello</html>")]
    with pytest.raises(RerankError, match="answered something that is not JSON"):
        api_reranker(rerank_api).score("q", DOCUMENTS)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ('{"results": [{"index": 0, "relevance_score": 1.0}]}', "1 results for 2 documents"),
        ('{"results": [{"index": 0, "relevance_score": 1}, {"index": 5, "relevance_score": 1}]}',
         "index 5 for 2 documents"),
        ('{"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 1}]}',
         "index 0 twice"),
        ('{"results": [{"index": 0}, {"index": 1}]}', "without a numeric relevance_score"),
        ('{"answer": 42}', "no list of results"),
    ],
)  # fmt: skip
def test_a_reply_of_the_wrong_shape_is_one_line(
    rerank_api: RerankApi, reply: str, message: str
) -> None:
    rerank_api.failures = [Failure(200, body=reply)]
    with pytest.raises(RerankError, match=message):
        api_reranker(rerank_api).score("q", DOCUMENTS[:2])


def test_an_api_asking_for_a_key_says_which_setting(rerank_api: RerankApi) -> None:
    rerank_api.failures = [Failure(401), Failure(401)]
    with pytest.raises(RerankError, match=r"needs a key \(HTTP 401\): set PGRAG_RERANK_API_KEY"):
        api_reranker(rerank_api).score("q", DOCUMENTS)
    with pytest.raises(RerankError, match="refused the key"):
        api_reranker(rerank_api, api_key="wrong").score("q", DOCUMENTS)


def test_a_hosted_api_without_a_key_is_refused_before_any_call() -> None:
    with pytest.raises(RerankError, match=r"api\.cohere\.com needs a key"):
        HttpReranker("https://api.cohere.com/v2/rerank")


def test_a_refused_connection_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    reranker = HttpReranker(f"http://127.0.0.1:{port}/v1/rerank", retries=1, sleep=lambda _: None)
    with pytest.raises(RerankError, match=r"cannot reach the re-rank API .* server is running"):
        reranker.score("q", DOCUMENTS)
