"""Every number a study reports, computed once per setting from per-question counts.

A setting is one clean model, one contaminated model and one task (paper arXiv 2608.07341 §5.1:
"model x contamination domain"). Its scores hold, for all questions and separately for the
leaked and the unleaked ones, each strategy's restoration metrics with bootstrap CIs
(:func:`zerogap.uncertainty.bootstrap_gaps`), the second clean batch scored like a strategy
(the measured batch-to-batch noise floor), the simulated noise floor, and one verdict per
strategy (:func:`zerogap.uncertainty.restoration_verdicts`). Tables, figures and the report only
read these. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from zerogap.errors import DataError, UserError
from zerogap.io.counts import QuestionCounts
from zerogap.uncertainty import (
    BootstrapGaps,
    NoiseFloor,
    Verdict,
    bootstrap_gaps,
    noise_floor,
    restoration_verdicts,
)

REPEAT = "clean, 2nd batch"
"""Row label of the clean model's second, independent batch: the measured noise floor."""

ALL_ZERO = "all-zero"


@dataclass(frozen=True)
class ScoreSettings:
    """How scores are computed; recorded with every report.

    ``within_questions`` switches the CIs to the two-level bootstrap (questions, then samples);
    ``margin`` and ``level`` define the verdict's equivalence test.
    """

    bins: int = 50
    n_boot: int = 2000
    level: float = 0.95
    margin: float = 0.05
    noise_sims: int = 2000
    seed: int = 0
    within_questions: bool = False

    def __post_init__(self):
        if self.bins < 1 or self.n_boot < 1 or self.noise_sims < 1:
            raise UserError("bins, n_boot and noise_sims must be positive")
        if not 0 < self.level < 1:
            raise UserError(f"level must lie in (0, 1), got {self.level}")
        if not self.margin >= 0:
            raise UserError(f"margin must be >= 0, got {self.margin}")


@dataclass(frozen=True)
class SettingCounts:
    """What one setting's runs read, every file aligned to the clean run's question order.

    ``strategies`` maps a strategy label to its counts (insertion order is the table order);
    ``repeat`` is the clean model's second batch (None if not sampled); ``leaked`` the leaked
    question ids (None when no split was given).
    """

    name: str
    clean: QuestionCounts
    strategies: dict[str, QuestionCounts]
    repeat: QuestionCounts | None = None
    leaked: frozenset[str] | None = None

    def __post_init__(self):
        for label, counts in self.strategies.items():
            if counts.ids != self.clean.ids:
                raise ValueError(f"setting {self.name}: {label} is not aligned to the clean run")
        if self.repeat is not None and self.repeat.ids != self.clean.ids:
            raise ValueError(f"setting {self.name}: the 2nd clean batch is not aligned")

    def with_all_zero(self) -> SettingCounts:
        """The same setting with the synthetic All-Zero row (paper Table 2) when it is absent."""
        if ALL_ZERO in self.strategies:
            return self
        n = len(self.clean)
        zero = QuestionCounts(path="(synthetic)", ids=self.clean.ids,
                              correct=np.zeros(n, np.int64), samples=self.clean.samples.copy(),
                              first=np.zeros(n, np.int64))
        return SettingCounts(self.name, self.clean, {**self.strategies, ALL_ZERO: zero},
                             self.repeat, self.leaked)


@dataclass(frozen=True)
class SubsetScores:
    """Scores on one subset of questions (all, leaked or unleaked).

    ``boot`` holds every strategy and, last, the :data:`REPEAT` row when a second clean batch
    exists; ``floor`` is the simulated noise floor of this subset's clean counts.
    """

    label: str
    n_questions: int
    boot: BootstrapGaps
    floor: NoiseFloor
    g_ap: bool

    def interval(self, row: str, metric: str):
        return self.boot.interval(row, metric)


@dataclass(frozen=True)
class SettingScores:
    name: str
    strategies: tuple[str, ...]
    subsets: tuple[SubsetScores, ...]
    verdicts: tuple[Verdict, ...]
    settings: ScoreSettings
    clean_m: int
    strata_sizes: tuple[int, ...] = field(default=())

    @property
    def overall(self) -> SubsetScores:
        return self.subsets[0]

    def verdict(self, name: str) -> Verdict:
        return next(v for v in self.verdicts if v.name == name)


def _subset(counts: QuestionCounts, mask: np.ndarray) -> QuestionCounts:
    return QuestionCounts(counts.path, tuple(np.asarray(counts.ids)[mask]), counts.correct[mask],
                          counts.samples[mask], None if counts.first is None else
                          counts.first[mask])


def _score_subset(label: str, clean: QuestionCounts, rows: dict[str, QuestionCounts],
                  settings: ScoreSettings) -> SubsetScores:
    names = list(rows)
    runs = [rows[n] for n in names]
    draws = [r.first for r in runs if r.first is not None]
    with_draws = clean.first is not None and len(draws) == len(runs)
    boot = bootstrap_gaps(
        clean.correct, clean.samples, np.stack([r.correct for r in runs]),
        np.stack([r.samples for r in runs]), names=names, bins=settings.bins,
        n_boot=settings.n_boot, level=settings.level, seed=settings.seed,
        within_questions=settings.within_questions,
        draw_clean=clean.first if with_draws else None,
        draw_mitigated=np.stack(draws) if with_draws else None,
    )
    other = int(np.median(np.concatenate([r.samples for r in runs])))
    floor = noise_floor(clean.correct, clean.samples, other_samples=other, bins=settings.bins,
                        n_sim=settings.noise_sims, seed=settings.seed)
    return SubsetScores(label, len(clean), boot, floor, with_draws)


def score_setting(setting: SettingCounts, settings: ScoreSettings) -> SettingScores:
    """Score one setting: all questions, then leaked and unleaked ones (when a split is known).

    Raises ``ValueError`` when a split leaves the leaked or the unleaked subset empty.
    """
    setting = setting.with_all_zero()
    rows = dict(setting.strategies)
    if setting.repeat is not None:
        rows[REPEAT] = setting.repeat
    subsets = [_score_subset("all questions", setting.clean, rows, settings)]
    if setting.leaked is not None:
        leaked = np.array([q in setting.leaked for q in setting.clean.ids])
        for label, mask in (("leaked", leaked), ("unleaked", ~leaked)):
            if not mask.any():
                raise DataError(f"setting {setting.name}: no {label} questions among the "
                                 f"{len(setting.clean)} evaluated")
            subsets.append(_score_subset(
                label, _subset(setting.clean, mask),
                {k: _subset(v, mask) for k, v in rows.items()}, settings))
    names = list(setting.strategies)
    verdicts = restoration_verdicts(
        setting.clean.correct, setting.clean.samples,
        np.stack([setting.strategies[n].correct for n in names]),
        np.stack([setting.strategies[n].samples for n in names]), names=names,
        margin=settings.margin, level=settings.level, bins=settings.bins,
        n_boot=settings.n_boot, n_sim=settings.noise_sims, seed=settings.seed,
    )
    return SettingScores(setting.name, tuple(names), tuple(subsets), tuple(verdicts), settings,
                         int(np.median(setting.clean.samples)),
                         subsets[0].boot.estimates[0].strata_sizes)


def strategies_in(scores: Sequence[SettingScores]) -> list[str]:
    """Strategy labels across settings, first-seen order."""
    return list(dict.fromkeys(name for s in scores for name in s.strategies))
