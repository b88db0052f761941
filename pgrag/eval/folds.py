"""Choosing among candidate modes by cross-validation, from per-query metric values.

Folds: the queries are sorted by the SHA-256 of their id (ties by id) and dealt round-robin
into N folds, so the split depends only on the query ids (the same on every run and machine)
and every fold holds at least one query when N is at most the number of queries. For each
fold, the candidate with the best mean nDCG@10 on the other folds is chosen (ties: the first
given) and scored on that fold; the out-of-fold figures average those held-out scores over
every query. Nothing here runs a search: it only re-weighs per-query values computed once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pgrag.errors import ConfigError
from pgrag.eval.metrics import METRIC_NAMES, mean_metrics

SELECTION_METRIC = "ndcg@10"

PerQuery = Mapping[str, Mapping[str, float]]
"""Query id -> metric name -> value (see :func:`pgrag.eval.metrics.per_query_metrics`)."""


def assign_folds(qids: Iterable[str], folds: int) -> list[list[str]]:
    """The query ids split into ``folds`` lists: sorted by SHA-256 of the id, dealt round-robin."""
    ids = list(qids)
    if folds < 2:
        raise ConfigError(f"--folds {folds}: use at least 2 folds.")
    if folds > len(ids):
        raise ConfigError(
            f"--folds {folds}: only {len(ids)} queries; use at most {len(ids)} folds."
        )
    ordered = sorted(ids, key=lambda q: (hashlib.sha256(q.encode()).hexdigest(), q))
    return [ordered[k::folds] for k in range(folds)]


@dataclass(frozen=True)
class CrossValidation:
    """Per-fold means of each candidate, each fold's choice and the out-of-fold figures."""

    folds: list[list[str]]
    fold_means: dict[str, list[float]]  # candidate -> its nDCG@10 on each fold
    chosen: list[str]  # fold k -> the candidate best on the other folds
    out_of_fold: dict[str, float]  # metric -> mean over held-out queries of each fold's choice
    best_full_test: tuple[str, float]  # the candidate best on every query, and its nDCG@10

    @property
    def optimism(self) -> float:
        """How much picking on the test set overstates nDCG@10: best full-test minus OOF (the
        two means sum the same queries in another order: a difference below 1e-9 is 0)."""
        difference = self.best_full_test[1] - self.out_of_fold[SELECTION_METRIC]
        return difference if abs(difference) >= 1e-9 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The figures for ``--json``; with a single candidate only its per-fold means."""
        folds = {
            "folds": len(self.folds),
            "split": "queries sorted by sha256 of their id, dealt round-robin",
            "fold_sizes": [len(f) for f in self.folds],
            "fold_ndcg@10": {m: [round(v, 4) for v in vs] for m, vs in self.fold_means.items()},
        }
        if len(self.fold_means) == 1:
            return folds
        return {
            **folds,
            "selection_metric": SELECTION_METRIC,
            "chosen": self.chosen,
            "out_of_fold": {k: round(v, 4) for k, v in self.out_of_fold.items()},
            "best_full_test": {
                "mode": self.best_full_test[0],
                SELECTION_METRIC: round(self.best_full_test[1], 4),
            },
            "optimism_ndcg@10": round(self.optimism, 4),
        }


def best(scores: Mapping[str, float]) -> str:
    """The candidate with the highest score; ties go to the first given."""
    top = max(scores.values())
    return next(name for name, score in scores.items() if score == top)


def cross_validate(per_query: Mapping[str, PerQuery], folds: int) -> CrossValidation:
    """Cross-validated choice among ``per_query``'s candidates (in the order given).

    Every candidate must carry the same query ids."""
    names = list(per_query)
    qids = list(per_query[names[0]])
    split = assign_folds(qids, folds)
    fold_means = {
        name: [mean_metrics(per_query[name], f)[SELECTION_METRIC] for f in split] for name in names
    }
    chosen: list[str] = []
    held_out: dict[str, dict[str, float]] = {}
    for k, fold in enumerate(split):
        rest = [q for j, f in enumerate(split) if j != k for q in f]
        pick = best({name: mean_metrics(per_query[name], rest)[SELECTION_METRIC] for name in names})
        chosen.append(pick)
        held_out.update({q: dict(per_query[pick][q]) for q in fold})
    full = {name: mean_metrics(per_query[name])[SELECTION_METRIC] for name in names}
    top = best(full)
    return CrossValidation(
        folds=split,
        fold_means=fold_means,
        chosen=chosen,
        out_of_fold={m: mean_metrics(held_out)[m] for m in METRIC_NAMES},
        best_full_test=(top, full[top]),
    )
