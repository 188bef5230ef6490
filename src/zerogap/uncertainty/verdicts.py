"""Restoration verdicts: restored / not restored / inconclusive, by one equivalence rule on
SA-PPG's excess over the noise floor (see :mod:`zerogap.uncertainty`).

Pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from zerogap.uncertainty.floor import noise_floor
from zerogap.uncertainty.intervals import MIN_QUESTIONS, GapIntervals, too_few

VERDICT_OUTCOMES = ("restored", "not restored", "inconclusive")


@dataclass(frozen=True)
class Verdict:
    """Whether a strategy restored the clean model, as an equivalence test (beyond the paper).

    The tested quantity is the *excess* ``SA-PPG - floor``: how far the strategy's SA-PPG sits
    above what two independent batches of the clean model read (:func:`noise_floor`, mean).
    ``low`` and ``high`` are one-sided bounds of the excess at ``level`` each, the excess minus
    and plus a normal quantile times SA-PPG's standard error ``se``
    (:func:`~zerogap.uncertainty.intervals.gap_intervals`):

    * ``restored``: ``high < margin``, the excess is significantly below the margin (the
      one-sided test of a TOST; an excess below zero is sampling noise, never a failure);
    * ``not restored``: ``low > margin``, the excess is significantly above the margin;
    * ``inconclusive`` otherwise. ``needed_questions`` is how many questions (same m) would
      bring the bound to the margin's side the estimate is on, by ``se ∝ 1/sqrt(questions)``;
      ``needed_samples`` the m per question that would do it on the same questions, by
      ``se ∝ 1/sqrt(m)``. With fewer than :data:`MIN_QUESTIONS` questions the verdict is
      inconclusive and ``reason`` says so.

    Error rates (checked by simulation in tests/uncertainty/test_calibration.py): a strategy
    equal in distribution to the clean model is called "not restored" at most at
    ``1 - level``; one whose true excess is twice the margin is called "restored" at most at
    ``1 - level``.
    """

    name: str
    outcome: str
    sa_ppg: float
    floor: float
    margin: float
    excess: float
    low: float
    high: float
    level: float
    se: float
    n_questions: int
    samples: int
    needed_questions: int | None = None
    needed_samples: int | None = None
    reason: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def sentence(self) -> str:
        """One line a reader can act on, with the test's meaning."""
        if self.reason is not None:
            return f"inconclusive: {self.reason}; SA-PPG {self.sa_ppg:.4f}"
        head = (
            f"SA-PPG {self.sa_ppg:.4f} = noise floor {self.floor:.4f} + excess {self.excess:+.4f} "
            f"(one-sided {self.level:.0%} bounds [{self.low:+.4f}, {self.high:+.4f}]; "
            f"margin {self.margin:.4f})"
        )
        if self.outcome == "restored":
            return f"restored: excess significantly below the margin; {head}"
        if self.outcome == "not restored":
            return f"not restored: excess significantly above the margin; {head}"
        more = [f"about {self.needed_questions} questions at m = {self.samples}"]
        if self.needed_samples is not None:
            more.append(f"m = {self.needed_samples} on these {self.n_questions} questions")
        return f"inconclusive: needs more questions or samples ({' or '.join(more)}); {head}"


def restoration_verdicts(
    gaps: GapIntervals,
    clean_correct,
    clean_samples,
    mitigated_samples,
    *,
    margin: float = 0.05,
    n_sim: int = 2000,
) -> list[Verdict]:
    """Equivalence verdicts of every strategy in ``gaps`` against the clean run.

    The floor is :func:`noise_floor` of the clean counts with each strategy's own m per
    question (one simulation per distinct set of them; an allocated study's strategies share
    one), at the strata ``gaps`` was computed with; the standard error is SA-PPG's from
    ``gaps``. See :class:`Verdict` for the rule; its ``samples`` is the strategy's median m.

    Parameters
    ----------
    gaps : GapIntervals
    clean_correct, clean_samples : array-like of int, shape (n_questions,)
    mitigated_samples : array-like of int, shape (n_strategies, n_questions)
    margin : float, default=0.05
        Largest excess of SA-PPG over the noise floor still called restored.

    Returns
    -------
    list of Verdict, one per strategy, in ``gaps.names`` order.

    Examples
    --------
    >>> from zerogap.uncertainty import gap_intervals
    >>> rng = np.random.default_rng(0)
    >>> p = rng.random(400)
    >>> clean, same = rng.binomial(50, p), rng.binomial(50, p)
    >>> far = rng.binomial(50, np.clip(p + 0.4, 0, 1))
    >>> gaps = gap_intervals(clean, [50] * 400, [same, far], [[50] * 400] * 2,
    ...                      names=["same", "far"], bins=15)
    >>> v = restoration_verdicts(gaps, clean, [50] * 400, [[50] * 400] * 2, n_sim=300)
    >>> [x.outcome for x in v]
    ['restored', 'not restored']
    """
    if isinstance(margin, bool) or not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    mit_m = np.atleast_2d(np.asarray(mitigated_samples, np.int64))
    bins = gaps.estimates[0].bins
    z = NormalDist().inv_cdf(gaps.level)
    floors: dict[bytes, float] = {}
    out = []
    for k, name in enumerate(gaps.names):
        m = int(np.median(mit_m[k]))
        sa = float(gaps.estimates[k].sa_ppg)
        se = float(gaps.se["sa_ppg"][k])
        if gaps.n_questions < MIN_QUESTIONS:
            out.append(Verdict(name, "inconclusive", sa, math.nan, float(margin), math.nan,
                               math.nan, math.nan, gaps.level, se, gaps.n_questions, m,
                               reason=too_few(gaps.n_questions)))
            continue
        key = mit_m[k].tobytes()
        if key not in floors:
            floors[key] = noise_floor(clean_correct, clean_samples, other_samples=mit_m[k],
                                      bins=bins, n_sim=n_sim, seed=gaps.seed).sa_ppg
        floor = floors[key]
        excess = sa - floor
        low, high = excess - z * se, excess + z * se
        outcome = ("restored" if high < margin
                   else "not restored" if low > margin else "inconclusive")
        needed_q = needed_m = None
        if outcome == "inconclusive":
            needed_q, needed_m = _needed(excess - margin, z, se, gaps.n_questions, m)
        out.append(Verdict(name, outcome, sa, floor, float(margin), excess, low, high,
                           gaps.level, se, gaps.n_questions, m, needed_q, needed_m))
    return out


def _needed(distance: float, z: float, se: float, n: int, m: int):
    """Questions (same m) and samples per question (same questions) that resolve a verdict.

    ``distance`` is excess - margin; the bound resolves once ``z * se' < |distance|``, with
    ``se'² = se² n / n'`` or ``se² m / m'``.
    """
    target = (abs(distance) / z) ** 2
    if target == 0:
        return None, None
    return max(n + 1, math.ceil(n * se**2 / target)), max(m + 1, math.ceil(m * se**2 / target))
