"""``pgrag eval``: retrieval quality on a BEIR-format dataset (needs the ``eval`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pgrag.cli.common import echo_json, json_option, pass_state, progress_option, tenant_option
from pgrag.cli.rerank import rerank_options, rerank_settings
from pgrag.cli.state import CliState
from pgrag.db import connect, wait_for_replay
from pgrag.pipeline.embedders import embedder_for_database
from pgrag.query_cache import QueryEmbeddings
from pgrag.search import ContextOptions, query_embedder

if TYPE_CHECKING:
    from pgrag.eval import CrossValidation
    from pgrag.progress import ProgressMode
    from pgrag.rerank import RerankSettings
    from pgrag.search import SearchOptions


def _checked_modes(
    ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]
) -> tuple[str, ...]:
    """The --mode specs once each parses: a bad one is a usage error (exit 2), before any work."""
    from pgrag.errors import ConfigError
    from pgrag.eval import parse_mode

    for spec in specs:
        try:
            parse_mode(spec)
        except ConfigError as exc:
            raise click.BadParameter(str(exc)) from exc
        except ValueError as exc:  # a number that is none: hybrid:rrf_k=many
            raise click.BadParameter(f"{spec!r}: {exc}.") from exc
    return specs


@click.command("eval")
@click.argument(
    "dataset_dir", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--golden",
    "golden_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Evaluate your own questions instead of a BEIR dataset: a JSONL golden file "
    "(docs/evaluation.md), searched in the tenants already ingested.",
)
@click.option(
    "-k",
    "--k",
    "k",
    type=click.IntRange(min=1, max=100),
    default=10,
    show_default=True,
    help="--golden: documents counted by hit_rate@k, mrr@k and recall@k.",
)
@click.option(
    "--min",
    "minimums",
    multiple=True,
    metavar="METRIC=VALUE",
    help="--golden: fail (exit status 5) when METRIC's mean is below VALUE, in any mode for a "
    "retrieval metric (hit_rate, mrr, recall, faithfulness, answer_relevance, "
    "context_precision, context_recall); repeatable.",
)
@click.option(
    "--max-errors",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="--golden: how many questions may go unjudged (a malformed judge reply, an endpoint "
    "error) before the run fails (exit 5).",
)
@click.option(
    "--context-limit",
    type=click.IntRange(min=1),
    help="--golden: chunks the answer's context considers, as pgrag ask -k (SQL default 8).",
)
@click.option(
    "--token-budget",
    type=click.IntRange(min=1),
    help="--golden: the answer's context size in tokens, as pgrag ask (SQL default 2000).",
)
@click.option(
    "--no-answers",
    is_flag=True,
    help="--golden: retrieval metrics only, even with a chat endpoint configured.",
)
@click.option(
    "--chat-model",
    envvar="PGRAG_CHAT_MODEL",
    help="--golden: the model answering, as pgrag ask (env PGRAG_CHAT_MODEL; gpt-4o-mini).",
)
@click.option(
    "--judge-model",
    envvar="PGRAG_CHECK_MODEL",
    help="--golden: the model judging the answers (env PGRAG_CHECK_MODEL; the chat model).",
)
@click.option(
    "--qrels",
    "qrels_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Relevance judgements to use instead of DATASET_DIR/qrels/test.tsv.",
)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    metavar="MODE",
    callback=_checked_modes,
    help="keyword, vector, hybrid, hybrid-rrf, hybrid-equal, hybrid-window, hybrid-mmr; "
    "repeatable; "
    "tune with MODE:option=value,... (e.g. hybrid:rrf_k=20). "
    "Default: keyword, vector, hybrid, hybrid-rrf.",
)
@click.option("--limit-queries", type=click.IntRange(min=1), help="Evaluate the first N queries.")
@click.option(
    "--fetch",
    type=click.IntRange(min=10),
    default=100,
    show_default=True,
    help="Chunks fetched per query for the metrics (recall@100 needs at least 100).",
)
@click.option(
    "--folds",
    type=click.IntRange(min=2),
    metavar="N",
    help="Cross-validate: the modes given are candidates; each of N query folds scores the "
    "one best (nDCG@10) on the other folds. Reports the out-of-fold figures.",
)
@click.option(
    "--no-ingest", is_flag=True, help="Skip the (incremental) ingest; the tenant already holds it."
)
@rerank_options
@tenant_option(
    default=None,
    help_text="Tenant holding the corpus (default beir-<dataset name>); with --golden, the "
    "tenant of the questions that name none (default 'default').",
)
@progress_option
@json_option
@pass_state
def evaluate(
    state: CliState,
    dataset_dir: Path | None,
    golden_file: Path | None,
    k: int,
    minimums: tuple[str, ...],
    max_errors: int,
    context_limit: int | None,
    token_budget: int | None,
    no_answers: bool,
    chat_model: str | None,
    judge_model: str | None,
    qrels_file: Path | None,
    modes: tuple[str, ...],
    limit_queries: int | None,
    fetch: int,
    folds: int | None,
    no_ingest: bool,
    rerank_spec: str | None,
    rerank_top: int,
    tenant: str | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Measure retrieval quality on a BEIR-format dataset (nDCG@10, recall@10/100, MRR@10),
    or with --golden FILE on your own questions (retrieval and answer metrics).

    DATASET_DIR holds corpus.jsonl, queries.jsonl and qrels/test.tsv. The corpus is ingested
    into its own tenant (later runs skip unchanged documents); latency is the p50/p95 of one
    search call returning 10 rows, query embedding excluded. Query embeddings come from the
    query-embedding cache when an earlier run embedded them. With --read-dsn the ingest writes
    to --dsn and the searches run on the read DSN once it has replayed the ingest.

    With --folds N the modes are candidates for a ranking default: the queries are split into
    N folds (by a hash of their id: the same split on every run), each fold scores the
    candidate best on the other folds, and the out-of-fold nDCG@10 says what choosing a
    candidate is worth on queries it was not chosen on (the full-test best is optimistic).

    With --rerank each mode is measured as it is and re-ranked (MODE+rerank): the re-ranker
    re-orders each query's first --rerank-top chunks; its time counts in the latency.

    With --golden FILE (JSONL: question, expected_sources, reference_answer, tenant, id) each
    question is searched in its tenant in each mode (hit_rate, mrr and recall at --k against
    its expected sources) and, with a chat endpoint configured, answered as pgrag ask answers
    and judged (faithfulness, answer_relevance, context_precision, context_recall); --min
    METRIC=VALUE turns a figure into a CI gate (exit status 5).
    """
    from pgrag import eval as ev
    from pgrag.errors import ConfigError
    from pgrag.progress import Progress

    mode: ProgressMode = "off" if progress is False or (as_json and not progress) else "auto"
    if (dataset_dir is None) == (golden_file is None):
        raise click.UsageError("give either DATASET_DIR (a BEIR dataset) or --golden FILE.")
    if golden_file is not None:
        given = {"--qrels": qrels_file, "--folds": folds, "--limit-queries": limit_queries}
        extra = [name for name, value in given.items() if value is not None]
        if extra or no_ingest:
            raise click.UsageError(
                f"{(extra or ['--no-ingest'])[0]} applies to a BEIR dataset, not to --golden "
                "(a golden file is evaluated in the tenants already ingested)."
            )
        _golden(
            state,
            golden_file,
            modes,
            k,
            fetch,
            minimums,
            max_errors,
            ContextOptions(token_budget=token_budget, limit=context_limit),
            no_answers,
            chat_model,
            judge_model,
            rerank_spec,
            rerank_top,
            tenant,
            mode,
            as_json,
        )
        return
    golden_only = {
        "--min": minimums,
        "--context-limit": context_limit,
        "--token-budget": token_budget,
    }
    if any(golden_only.values()) or no_answers:
        name = next((n for n, v in golden_only.items() if v), "--no-answers")
        raise click.UsageError(f"{name} applies to --golden FILE, not to a BEIR dataset.")
    assert dataset_dir is not None
    ev.trec_eval()  # the eval extra: before any work, say how to install it when it is missing
    dataset = ev.load_beir(dataset_dir, qrels_file, limit_queries)
    parsed = [ev.parse_mode(spec) for spec in (modes or ev.DEFAULT_EVAL_MODES)]
    reranking = rerank_settings(rerank_spec, rerank_top)
    runs: list[tuple[str, SearchOptions, RerankSettings | None]]
    runs = [(name, options, None) for name, options in parsed]
    if reranking is not None:
        runs += [(f"{name}+rerank", options, reranking) for name, options in parsed]
    if folds is not None:
        try:  # before any work: more folds than queries is a usage error
            ev.assign_folds(dataset.queries, folds)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from exc
    tenant = tenant or f"beir-{dataset.name}"
    if no_ingest:
        with state.connect_read() as conn:
            embedder = query_embedder(conn)
    else:
        # Writes go to --dsn; with a separate read replica, the searches below wait until it
        # has replayed them, so they never measure a partly replicated corpus.
        # The corpus embeds as `pgrag ingest` embeds documents (the local model in int8 by
        # default) and the queries as `pgrag search` does: the figures are what a default
        # ingest and search give.
        dsn = state.dsn()
        with connect(dsn) as conn:
            embedder = query_embedder(conn)
            documents = embedder_for_database(conn, for_documents=True)
        ev.ingest_dataset(dsn, dataset, tenant=tenant, embedder=documents, progress=mode)
        if state.separate_reads:
            with connect(dsn, autocommit=True) as writer, state.connect_read() as reader:
                wait_for_replay(writer, reader)
    results: dict[str, ev.ModeResult] = {}
    with state.connect_read_and_write() as (conn, writer):
        queries = QueryEmbeddings(writer, tenant, embedder)
        embeddings = ev.embed_queries(embedder, dataset, queries)
        queries.record_usage()
        for name, options, reranker in runs:
            total = 2 * len(dataset.queries)
            with Progress(f"eval {name}", total, mode, unit="searches") as bar:
                results[name] = ev.run_mode(
                    conn,
                    dataset,
                    name,
                    options,
                    tenant=tenant,
                    embeddings=embeddings,
                    fetch=fetch,
                    advance=bar.advance,
                    reranking=reranker,
                )
    report: dict[str, Any] = {name: result.as_dict() for name, result in results.items()}
    cv = None
    if folds is not None:
        cv = ev.cross_validate({name: r.per_query for name, r in results.items()}, folds)
        report["cross_validation"] = cv.as_dict()
    if as_json:
        echo_json(report)
        return
    click.echo(f"{dataset.name}: {len(dataset.corpus)} documents, {len(dataset.queries)} queries")
    header = f"{'mode':<24}" + "".join(f"{m:>11}" for m in ev.METRIC_NAMES) + "   p50 ms   p95 ms"
    click.echo(header)
    for name in results:
        row = report[name]
        figures = "".join(f"{row[m]:>11.4f}" for m in ev.METRIC_NAMES)
        click.echo(f"{name:<24}{figures}{row['latency_p50_ms']:>9.1f}{row['latency_p95_ms']:>9.1f}")
    if cv is not None:
        _echo_cross_validation(cv)


def _echo_cross_validation(cv: CrossValidation) -> None:
    """Per-fold nDCG@10 of each candidate, each fold's choice and the out-of-fold figures."""
    from pgrag.eval import METRIC_NAMES

    n = len(cv.folds)
    sizes = ", ".join(str(len(f)) for f in cv.folds)
    click.echo(f"\ncross-validation: {n} folds of {sizes} queries (split by sha256 of query id)")
    folds = "".join(f"{'fold ' + str(k + 1):>10} " for k in range(n))
    click.echo(f"{'nDCG@10 per fold':<24}{folds}".rstrip())
    single = len(cv.fold_means) == 1  # nothing to choose: the per-fold means alone
    for name, means in cv.fold_means.items():
        marks = ("*" if cv.chosen[k] == name and not single else " " for k in range(n))
        cells = "".join(f"{v:>10.4f}{m}" for v, m in zip(means, marks, strict=True))
        click.echo(f"{name:<24}{cells}".rstrip())
    if single:
        return
    click.echo("* the fold's choice: the candidate with the best nDCG@10 on the other folds")
    click.echo(f"{'':<24}" + "".join(f"{m:>11}" for m in METRIC_NAMES))
    figures = "".join(f"{cv.out_of_fold[m]:>11.4f}" for m in METRIC_NAMES)
    click.echo(f"{'out-of-fold choice':<24}{figures}")
    name, full = cv.best_full_test
    click.echo(
        f"best full-test nDCG@10 {full:.4f} ({name}); out-of-fold {cv.out_of_fold['ndcg@10']:.4f}; "
        f"optimism {cv.optimism:+.4f}"
    )


def _golden(
    state: CliState,
    path: Path,
    modes: tuple[str, ...],
    k: int,
    fetch: int,
    minimums: tuple[str, ...],
    max_errors: int,
    context: ContextOptions,
    no_answers: bool,
    chat_model: str | None,
    judge_model: str | None,
    rerank_spec: str | None,
    rerank_top: int,
    tenant: str | None,
    progress: ProgressMode,
    as_json: bool,
) -> None:
    """``pgrag eval --golden``: the options checked before any work, then the run."""
    from pgrag.cli.eval_golden import GoldenRequest, emit, run_golden
    from pgrag.db import DEFAULT_TENANT
    from pgrag.errors import ConfigError
    from pgrag.eval import DEFAULT_EVAL_MODES, parse_mode
    from pgrag.eval.golden_report import parse_threshold

    try:
        thresholds = dict(parse_threshold(spec) for spec in minimums)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--min") from exc
    request = GoldenRequest(
        path=path,
        modes=[parse_mode(spec) for spec in (modes or DEFAULT_EVAL_MODES)],
        k=k,
        fetch=max(fetch, k),
        tenant=tenant or DEFAULT_TENANT,
        thresholds=thresholds,
        max_errors=max_errors,
        context=context,
        answers=not no_answers,
        chat_model=chat_model,
        judge_model=judge_model,
        reranking=rerank_settings(rerank_spec, rerank_top),
    )
    emit(run_golden(state, request, progress), as_json)
