"""``pgrag ask --check``: the options, and the check run and shown after the answer.

The checking itself is :mod:`pgrag.check`; this module turns options into
:class:`pgrag.check.CheckOptions`, calls :func:`pgrag.check.check_for_tenant` and renders the
result (docs/cli.md, "Checked answers").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from pgrag.check import (
    CHECKERS,
    DEFAULT_MIN_CONFIDENCE,
    DEFAULT_MIN_SUPPORT,
    Checker,
    CheckOptions,
    CheckResult,
    SupportScorer,
    check_for_tenant,
)
from pgrag.cli.common import F
from pgrag.errors import AnswerWithheld, ConfigError

if TYPE_CHECKING:
    from pgrag.answer import ChatConfig

AUTO = "auto"


@dataclass(frozen=True)
class CheckRequest:
    """What ``ask``'s check options asked for; ``checker`` ``auto`` = ``llm`` when a chat
    endpoint is configured, else ``local``."""

    checker: str
    min_confidence: float
    min_support: float
    judge_model: str | None
    answer: str | None

    def options(self, chat: ChatConfig | None) -> CheckOptions:
        chosen = self.checker if self.checker != AUTO else ("llm" if chat else "local")
        checker: Checker = "llm" if chosen == "llm" else "local"
        return CheckOptions(checker, self.min_confidence, self.min_support, self.judge_model)


def _a_number(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """Refuse NaN, which no similarity is at least."""
    if math.isnan(value):
        raise click.BadParameter("must be a number, not NaN.")
    return value


def _not_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an empty answer: it would pass any check, claiming nothing."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty.")
    return value


def check_options(func: F) -> F:
    """``ask``'s check options, handed to the command as one ``check`` argument (a
    :class:`CheckRequest`, or None without ``--check`` and ``--answer``)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        checker = kwargs.pop("checker")
        request = CheckRequest(
            checker or AUTO,
            kwargs.pop("min_confidence"),
            kwargs.pop("min_support"),
            kwargs.pop("check_model"),
            kwargs.pop("given_answer"),
        )
        wanted = checker is not None or request.answer is not None
        return func(*args, check=request if wanted else None, **kwargs)

    decorators = [
        click.option(
            "--check",
            "checker",
            type=click.Choice([AUTO, *CHECKERS]),
            is_flag=False,
            flag_value=AUTO,
            default=None,
            help="Check that each sentence of the answer is supported by the [Source N] it "
            "cites: llm (the chat endpoint judges), local (the local embedding model, "
            "offline); --check alone: llm when a chat endpoint is configured, else local. "
            "An answer below --min-confidence is withheld (exit status 4).",
        ),
        click.option(
            "--min-confidence",
            type=click.FloatRange(0, 1),
            default=DEFAULT_MIN_CONFIDENCE,
            show_default=True,
            help="Withhold a checked answer whose confidence is below this.",
        ),
        click.option(
            "--min-support",
            type=float,
            callback=_a_number,
            default=DEFAULT_MIN_SUPPORT,
            show_default=True,
            help="--check local: the similarity of a sentence to its cited source at which "
            "the source supports it.",
        ),
        click.option(
            "--check-model",
            envvar="PGRAG_CHECK_MODEL",
            help="--check llm: the judge's model (env PGRAG_CHECK_MODEL; default the chat model).",
        ),
        click.option(
            "--answer",
            "given_answer",
            metavar="TEXT",
            callback=_not_blank,
            help="Check this answer (e.g. from your own LLM) instead of asking the chat "
            "endpoint for one; implies --check.",
        ),
    ]
    for decorator in reversed(decorators):
        wrapper = decorator(wrapper)
    return wrapper  # type: ignore[return-value]


def refuse_context_only(check: CheckRequest | None, context_only: bool) -> None:
    if check is not None and context_only:
        raise click.UsageError("--check and --answer check an answer; --context-only has none.")


def answer_to_check(check: CheckRequest | None, chat: ChatConfig | None) -> str | None:
    """The answer given with ``--answer``; a :class:`ConfigError` when a check was asked for and
    there is no answer to check (neither ``--answer`` nor a chat endpoint)."""
    if check is None:
        return None
    if check.answer is None and chat is None:
        raise ConfigError(
            "--check checks an answer, and no chat endpoint is configured: set "
            "OPENAI_API_KEY (or OPENAI_BASE_URL), or pass the answer with --answer."
        )
    return check.answer


def run_check(
    check: CheckRequest,
    question: str,
    answer: str,
    context: str,
    chat: ChatConfig | None,
    *,
    tenant: str,
    dsn: str,
    scorer: SupportScorer | None = None,
) -> CheckResult:
    """The check ``check`` asks for (usage recorded as ``tenant``'s); ``scorer``: a
    cross-encoder for the local checker instead of the embedding model's similarity."""
    return check_for_tenant(
        question,
        answer,
        context,
        check.options(chat),
        tenant=tenant,
        dsn=dsn,
        chat=chat,
        scorer=scorer,
    )


def print_check(result: CheckResult) -> None:
    """``Check: 3 of 3 sentences supported, ...`` and a line per unsupported sentence."""
    click.echo(f"Check: {result.summary()}.")
    for verdict in result.unsupported:
        click.echo(f"  unsupported: {verdict.sentence!r}: {verdict.reason}")
    if result.faithful is False and not result.unsupported:
        claims = "; ".join(repr(c) for c in result.unsupported_claims) or "(no claim named)"
        click.echo(f"  the judge found the answer unfaithful: {claims}")


def withheld(result: CheckResult) -> AnswerWithheld:
    """The error that ends ``ask`` when ``result`` withholds its answer (exit status 4)."""
    return AnswerWithheld(f"answer withheld: {result.reason()}")
