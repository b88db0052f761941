"""``pgrag eval --golden FILE``: a team's own questions, retrieval and answer metrics, CI gates.

The work is :mod:`pgrag.eval.golden_retrieval` (per mode) and :mod:`pgrag.eval.golden_answers`
(per question, when a chat endpoint is configured); this module validates the options before
any work, runs them, and renders :class:`pgrag.eval.golden_report.GoldenReport`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pgrag.cli.common import echo_json
from pgrag.cli.state import CliState
from pgrag.progress import Progress, ProgressMode

if TYPE_CHECKING:
    from pgrag.answer import ChatConfig
    from pgrag.eval.golden import GoldenQuestion
    from pgrag.eval.golden_report import GoldenReport
    from pgrag.rerank import RerankSettings
    from pgrag.search import ContextOptions, SearchOptions


@dataclass(frozen=True)
class GoldenRequest:
    """What ``pgrag eval --golden`` was asked to do."""

    path: Path
    modes: list[tuple[str, SearchOptions]]
    k: int
    fetch: int
    tenant: str
    thresholds: dict[str, float]
    max_errors: int
    context: ContextOptions
    answers: bool
    chat_model: str | None
    judge_model: str | None
    reranking: RerankSettings | None


def _chat(request: GoldenRequest, questions: list[GoldenQuestion]) -> ChatConfig | None:
    """The chat endpoint answering and judging, or None; thresholds that need one (or a
    reference answer) without it are usage errors, before any work."""
    from pgrag.answer import ChatConfig
    from pgrag.eval.golden_answers import ANSWER_METRICS

    chat = ChatConfig.from_env(request.chat_model) if request.answers else None
    wanted = [m for m in request.thresholds if m in ANSWER_METRICS]
    if wanted and chat is None:
        why = (
            "--no-answers was given"
            if not request.answers
            else ("no chat endpoint is configured (OPENAI_API_KEY and/or OPENAI_BASE_URL)")
        )
        raise click.UsageError(f"--min {wanted[0]} needs answer metrics, but {why}.")
    if "context_recall" in request.thresholds and not any(q.reference_answer for q in questions):
        raise click.UsageError(
            "--min context_recall needs questions with a reference_answer; "
            f"{request.path} has none."
        )
    return chat


def run_golden(state: CliState, request: GoldenRequest, progress: ProgressMode) -> GoldenReport:
    """Load and validate the golden file, run every mode and (with an endpoint) every answer."""
    from pgrag.eval.golden import GoldenFileError, load_golden
    from pgrag.eval.golden_answers import AnswerSetup, evaluate_answer, judge_config
    from pgrag.eval.golden_report import GoldenReport
    from pgrag.eval.golden_retrieval import embed_questions, run_retrieval
    from pgrag.eval.metrics import trec_eval
    from pgrag.search import query_embedder
    from pgrag.usage import Usage, record_usage_quietly

    trec_eval()  # the eval extra: before any work
    try:
        questions = load_golden(request.path, request.tenant)
    except GoldenFileError as exc:
        for problem in exc.problems[1:]:
            click.echo(f"pgrag: {problem}", err=True)
        raise
    chat = _chat(request, questions)
    report = GoldenReport(
        str(request.path),
        questions,
        request.k,
        thresholds=request.thresholds,
        max_errors=request.max_errors,
    )
    dsn = state.dsn()

    def record(tenant: str, usage: Usage) -> None:
        record_usage_quietly(dsn, tenant, usage)

    with state.connect_read_and_write() as (conn, writer):
        embedder = query_embedder(conn)
        retrievable = [q for q in questions if q.judged_for_retrieval]
        embeddings = embed_questions(writer, retrievable, embedder)
        for name, options in request.modes:
            name = f"{name}+rerank" if request.reranking is not None else name
            with Progress(f"golden {name}", len(retrievable), progress, unit="questions") as bar:
                report.retrieval[name] = run_retrieval(
                    conn,
                    questions,
                    options,
                    embeddings=embeddings,
                    k=request.k,
                    fetch=request.fetch,
                    reranking=request.reranking,
                    advance=bar.advance,
                )
        if chat is None:
            return report
        judge = judge_config(chat, request.judge_model)
        report.answers, report.chat_model, report.judge_model = [], chat.model, judge.model
        setup = AnswerSetup(chat, judge, embedder, request.context, request.reranking)
        with Progress("golden answers", len(questions), progress, unit="questions") as bar:
            for q in questions:
                result = evaluate_answer(conn, writer, q, setup, record)
                if result.error is not None:
                    click.echo(
                        f"pgrag: {request.path}:{q.line} ({q.id}): not judged: {result.error}",
                        err=True,
                    )
                report.answers.append(result)
                bar.advance()
    return report


def _cell(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.4f}"


def print_report(report: GoldenReport) -> None:
    """The summary table: retrieval means per mode, answer means, the thresholds' outcome."""
    from pgrag.eval.golden_answers import ANSWER_METRICS
    from pgrag.eval.golden_retrieval import RETRIEVAL_METRICS

    k = report.k
    retrievable = sum(q.judged_for_retrieval for q in report.questions)
    click.echo(
        f"{report.path}: {len(report.questions)} questions, "
        f"{retrievable} with expected sources; k={k}"
    )
    names = [f"{m}@{k}" for m in RETRIEVAL_METRICS]
    click.echo(f"{'mode':<24}" + "".join(f"{n:>14}" for n in names))
    for mode, means in report.retrieval_means().items():
        click.echo(f"{mode:<24}" + "".join(_cell(means[m], 14) for m in RETRIEVAL_METRICS))
    for mode, rows in report.retrieval.items():
        missed = [r.question.id for r in rows if not r.metrics["hit_rate"]]
        if missed:
            shown = ", ".join(missed[:10]) + (
                f" and {len(missed) - 10} more" if len(missed) > 10 else ""
            )
            click.echo(f"  {mode}: no expected source in the first {k}: {shown}")
    if report.answers is None:
        click.echo("answer metrics: not measured (no chat endpoint configured, or --no-answers)")
    else:
        failed = len(report.failed)
        click.echo(
            f"\nanswers: {len(report.answers) - failed} judged, {failed} failed "
            f"(chat {report.chat_model}, judge {report.judge_model})"
        )
        click.echo("".join(f"{m:>20}" for m in ANSWER_METRICS))
        means = report.answer_means()
        click.echo("".join(_cell(means[m], 20) for m in ANSWER_METRICS))
    checks = report.checks()
    if checks:
        unmet = report.failures()
        click.echo(f"\ngates: {len(checks) - len(unmet)} of {len(checks)} met")


def emit(report: GoldenReport, as_json: bool) -> None:
    """The report (JSON or table), then the CI gate (exit status 5 naming what is unmet)."""
    if as_json:
        echo_json(report.as_dict())
    else:
        print_report(report)
    report.gate()
