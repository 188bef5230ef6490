"""Paired comparisons of two strategies on the same questions (see :mod:`zerogap.uncertainty`).

:func:`compare` tests ``metric(a) - metric(b)``: by default a randomisation test that swaps a's
and b's outcomes question by question, exact under "a and b are equal in distribution on every
question"; with ``null="mean"`` a stratified t under "a and b are equal on average over
questions". Each returns the interval the same test does not reject.

Pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from zerogap.uncertainty.intervals import (
    LINEAR_METRICS,
    MIN_QUESTIONS,
    STRATIFIED,
    GapIntervals,
    _signed_deltas,
    _terms,
    too_few,
)
from zerogap.uncertainty.student_t import t_cdf, t_quantile

ALTERNATIVES = ("two-sided", "less", "greater")
NULLS = ("sharp", "mean")
"""What a paired comparison tests: ``"sharp"``, the two strategies equal in distribution on every
question (the exact swap test); ``"mean"``, equal on average over questions (the weak null)."""


@dataclass(frozen=True)
class PairedComparison:
    """``difference = metric(a) - metric(b)`` with the randomisation test's interval and p-value.

    A negative difference means ``a`` restores better (reads a smaller gap) than ``b``. For
    ``alternative="less"`` the interval is ``(-inf, high]`` and the p-value tests "a is not
    better"; for ``"greater"`` it is ``[low, inf)``. ``method`` names the test (exact
    enumeration or Monte Carlo over ``patterns`` swap patterns, or the weak null's stratified t
    on ``df`` degrees of freedom); ``reason`` is set when no calibrated test is possible (then
    ``low``, ``high`` and ``p_value`` are NaN).
    """

    a: str
    b: str
    metric: str
    difference: float
    low: float
    high: float
    p_value: float
    level: float
    alternative: str = "two-sided"
    method: str = ""
    patterns: int = 0
    differing: int = 0
    df: float = math.nan
    reason: str | None = None

    @property
    def significant(self) -> bool:
        """Whether the test rejects "no difference" at ``1 - level``."""
        return self.reason is None and self.p_value <= 1 - self.level + 1e-12

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        for key in ("low", "high", "p_value", "df"):
            if not math.isfinite(out[key]):
                out[key] = None
        return out


def compare(gaps: GapIntervals, a: str, b: str, *, metric: str = "sa_ppg",
            alternative: str = "two-sided", null: str = "sharp") -> PairedComparison:
    """Paired test of ``metric(a) - metric(b)`` on the same questions, with its interval.

    ``null="sharp"`` (the default) is the randomisation test described below, exact under
    "a and b are equal in distribution on every question". ``null="mean"`` tests the weaker
    "a and b are equal on average over questions" (Neyman's null), for the weighted-sum metrics
    only: the difference is a stratified mean of per-question differences ``d_q`` (SA-PPG's
    strata for SA-PPG and S-Δ±, one stratum for A-PPG and Δ±), its standard error
    ``sqrt(Σ_s s_s² / n_s) / S`` from the spread of ``d_q`` inside each of the S non-empty
    strata (a stratum of one question takes the spread of it and its neighbour together), and
    the reference is Student's t with Welch-Satterthwaite degrees of freedom. Its interval is
    for the expected difference over new questions and new samples. When a strategy helps some
    questions and harms others, the sharp null's interval follows the root mean square of
    ``d_q`` and is conservative for the mean; this one follows their spread within strata and
    is about half as wide on the demo's models (``docs/uncertainty.md``, where its level and
    coverage are measured).

    **The sharp null.**

    Under the null hypothesis a's and b's outcomes are exchangeable on every question (the two
    strategies are equal in distribution question by question, each run drawn independently
    given the clean run), so swapping them on any set of questions leaves the data's
    distribution unchanged. The p-value is the share of swap patterns (all 2^N when few, else
    the identity and ``gaps.n_resamples`` random ones) whose difference is at least as extreme
    as the observed one.

    For the weighted-sum metrics (SA-PPG, S-Δ±, A-PPG, Δ±) the difference is ``D = Σ w_q d_q``
    and a swap flips the sign of ``d_q``; the interval collects every δ that the same test of
    the shifted terms ``d_q - δ`` does not reject, which has a closed form: with ``u = Σ w ε d``
    and ``v = Σ w ε`` per pattern ε, δ is rejected from below exactly when few patterns have
    ``(D - u) / (1 - v) <= δ``, so the bounds are order statistics of those ratios. For G-APP
    and G-AP (|mean Δ|, not a weighted sum) a swap exchanges the two runs' Δ on the swapped
    questions and the interval is the difference plus or minus the test's critical value. In
    both cases the interval excludes 0 exactly when ``p_value <= 1 - level``.

    When fewer than ``log2(2 / (1 - level))`` questions differ between a and b, no swap pattern
    can reach significance and the comparison says so (``reason``) instead.

    Parameters
    ----------
    gaps : GapIntervals
    a, b : str
        Strategy names.
    metric : str, default="sa_ppg"
    alternative : {"two-sided", "less", "greater"}, default="two-sided"
        ``"less"``: a restores better than b (a's gap is smaller).
    null : {"sharp", "mean"}, default="sharp"
        What "no difference" means (see above).

    Examples
    --------
    >>> from zerogap.uncertainty import gap_intervals
    >>> gaps = gap_intervals([5, 0, 9, 2] * 20, [10] * 80,
    ...                      [[5, 0, 9, 2] * 20, [9, 9, 0, 9] * 20], [[10] * 80] * 2,
    ...                      names=["good", "bad"], n_resamples=500)
    >>> c = compare(gaps, "good", "bad")
    >>> c.difference < 0 and c.high < 0 and c.p_value < 0.01
    True

    Under the weak null, on a benchmark where "bad" inflates every question by 0.4:

    >>> rng = np.random.default_rng(0)
    >>> p = rng.random(60)
    >>> counts = [rng.binomial(10, x) for x in (p, p, np.minimum(p + 0.4, 1))]
    >>> gaps = gap_intervals(counts[0], [10] * 60, counts[1:], [[10] * 60] * 2,
    ...                      names=["good", "bad"], bins=5)
    >>> c = compare(gaps, "good", "bad", null="mean")
    >>> c.high < 0 and c.p_value < 0.01, c.method.startswith("stratified t, weak null")
    (True, True)
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}, "
                         f"got {alternative!r}")
    if null not in NULLS:
        raise ValueError(f"null must be one of {', '.join(NULLS)}, got {null!r}")
    if null == "mean" and metric not in LINEAR_METRICS:
        raise ValueError(f"null='mean' needs a weighted-sum metric "
                         f"({', '.join(LINEAR_METRICS)}), got {metric!r}")
    ia, ib = gaps.index(a), gaps.index(b)
    est_a, est_b = getattr(gaps.estimates[ia], metric), getattr(gaps.estimates[ib], metric)
    if est_a is None or est_b is None:
        raise ValueError(f"no {metric} for {a!r} and {b!r}: it needs single draws")
    observed = float(est_a - est_b)
    if abs(observed) <= 1e-12:  # equal up to rounding: a tie, tested as one
        observed = 0.0
    alpha = 1.0 - gaps.level
    if metric in LINEAR_METRICS:
        term_a, w = _terms(gaps, ia, metric)
        term_b, _ = _terms(gaps, ib, metric)
        differing = int(np.count_nonzero(~np.isclose(term_a, term_b, rtol=0, atol=1e-12)))
    else:
        delta_a, delta_b = _signed_deltas(gaps, ia)[metric], _signed_deltas(gaps, ib)[metric]
        differing = int(np.count_nonzero(~np.isclose(delta_a, delta_b, rtol=0, atol=1e-12)))
    sides = 2 if alternative == "two-sided" else 1
    reason = None
    if gaps.n_questions < MIN_QUESTIONS:
        reason = too_few(gaps.n_questions)
    elif sides * 2.0**-differing > alpha + 1e-12:
        reason = (f"too few questions that differ ({differing}) for a paired test at level "
                  f"{gaps.level:g}")
    if null == "mean":
        stratum = gaps.stratum if metric in STRATIFIED else np.zeros(gaps.n_questions, int)
        return _mean_null_test(a, b, metric, term_a - term_b, stratum, observed, alpha,
                               reason, dict(level=gaps.level, alternative=alternative,
                                            differing=differing))
    method = ("exact (all 2^N swap patterns)" if gaps.exact
              else f"Monte Carlo ({gaps.n_resamples} random swap patterns)")
    rows = 2**gaps.n_questions if gaps.exact else gaps.n_resamples + 1
    common: dict[str, Any] = dict(level=gaps.level, alternative=alternative, method=method,
                                  patterns=rows, differing=differing)
    if reason is None and math.floor(alpha / sides * rows) < 1:
        reason = f"too few swap patterns ({rows}) for level {gaps.level:g}"
    if reason is not None:
        return PairedComparison(a, b, metric, observed, math.nan, math.nan, math.nan,
                                reason=reason, **common)
    keys, sums = gaps.swap_table
    moved = sums[:, keys[(ia, metric)]] - sums[:, keys[(ib, metric)]]  # (R,)
    if metric in LINEAR_METRICS:
        weights = sums[:, keys["stratified" if metric in STRATIFIED else "plain"]]
        low, high, p_value = _shift_inverted(moved, weights, observed, alpha, alternative)
    else:
        base = float((delta_a + delta_b).sum()) / (2 * gaps.n_questions)
        low, high, p_value = _swap_test(base, moved / 2, observed, alpha, alternative)
    return PairedComparison(a, b, metric, observed, float(low), float(high), float(p_value),
                            **common)


def _mean_null_test(a, b, metric, d, stratum, observed, alpha, reason, common):
    """The weak-null comparison of :func:`compare`: a stratified mean of ``d`` (N,) per-question
    differences over ``stratum`` (N,) labels, with a Welch-Satterthwaite t reference."""
    common = dict(common, method="stratified t, weak null (Welch-Satterthwaite df)")
    if reason is not None:
        return PairedComparison(a, b, metric, observed, math.nan, math.nan, math.nan,
                                reason=reason, **common)
    labels, inverse, sizes = np.unique(stratum, return_inverse=True, return_counts=True)
    residual = d - (np.bincount(inverse, d) / sizes)[inverse]
    within = np.bincount(inverse, residual**2) / np.maximum(sizes - 1, 1)  # (S,)
    part_df = (sizes - 1).astype(float)
    for k in np.flatnonzero(sizes == 1):
        # A stratum of one question has no spread of its own: take that of it and its
        # neighbour together (collapsed strata), which also holds the gap between the two
        # strata's means and so errs wide. A pooled variance errs narrow: a lone question
        # sits mid-range, where the differences spread most.
        merged = d[(inverse == k) | (inverse == (k - 1 if k > 0 else k + 1))]
        within[k], part_df[k] = merged.var(ddof=1), merged.size - 1
    parts = within / sizes  # (S,) each stratum's variance of its mean
    se = math.sqrt(float(parts.sum())) / labels.size
    if se <= 1e-12:
        return PairedComparison(a, b, metric, observed, math.nan, math.nan, math.nan,
                                reason="the per-question differences do not vary within "
                                "strata", **common)
    # Welch-Satterthwaite: strata whose spread differs (questions the clean model always
    # solves barely move) carry fewer effective degrees of freedom than N - S.
    df = float(parts.sum() ** 2 / (parts**2 / part_df).sum())
    below = t_cdf(observed / se, df)  # small when the difference lies clearly below 0
    alternative = common["alternative"]
    p_value = {"two-sided": min(1.0, 2 * min(below, 1 - below)), "less": below,
               "greater": 1 - below}[alternative]
    critical = t_quantile(1 - alpha / (2 if alternative == "two-sided" else 1), df) * se
    low = observed - critical if alternative != "less" else -math.inf
    high = observed + critical if alternative != "greater" else math.inf
    return PairedComparison(a, b, metric, observed, low, high, p_value, df=df, **common)


def _order_stat(values: np.ndarray, j: int) -> float:
    """The j-th smallest of ``values`` (1-based)."""
    return float(np.partition(values, j - 1)[j - 1])


def _shift_inverted(u, v, observed, alpha, alternative):
    """Bounds and p-value of the sign-flip test of ``D = Σ w d``, inverted over shifts, from
    ``u = Σ w ε d`` and ``v = Σ w ε`` (R,) under each pattern ε."""
    rows = u.size
    numerator = observed - u
    numerator[np.abs(numerator) <= 1e-12] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        # v = 1 only for the identity (every weight is positive): it is never rejected.
        ratio = np.where(v < 1 - 1e-12, numerator / (1 - v), -np.inf)
    upper_ratio = np.where(v < 1 - 1e-12, ratio, np.inf)
    p_up = np.count_nonzero(ratio <= 0) / rows  # evidence that the difference is above 0
    p_down = np.count_nonzero(upper_ratio >= 0) / rows
    sides = 2 if alternative == "two-sided" else 1
    j = math.floor(alpha / sides * rows) + 1
    low = _order_stat(ratio, j) if alternative != "less" else -math.inf
    high = -_order_stat(-upper_ratio, j) if alternative != "greater" else math.inf
    p_value = {"two-sided": min(1.0, 2 * min(p_up, p_down)), "less": p_down,
               "greater": p_up}[alternative]
    return low, high, p_value


def _swap_test(base, moved, observed, alpha, alternative):
    """Bounds and p-value of the swap test of ``|mean Δ_a| - |mean Δ_b|``: under a pattern the
    two means are ``base ± moved`` (R,), ``base`` being their average."""
    null = np.abs(base + moved) - np.abs(base - moved)  # (R,) the difference under each swap
    # Differences equal up to rounding are ties: snap them, so that the p-value and the bounds
    # (both read off ``null``) decide alike.
    null[np.abs(null - observed) <= 1e-12] = observed
    null[np.abs(null + observed) <= 1e-12] = -observed
    null[np.abs(null) <= 1e-12] = 0.0
    rows = null.size
    k = math.floor(alpha * rows)
    if alternative == "two-sided":
        p_value = np.count_nonzero(np.abs(null) >= abs(observed)) / rows
        critical = _order_stat(np.abs(null), rows - k)
        return observed - critical, observed + critical, p_value
    if alternative == "less":
        p_value = np.count_nonzero(null <= observed) / rows
        return -math.inf, observed - _order_stat(null, k + 1), p_value
    p_value = np.count_nonzero(null >= observed) / rows
    return observed - _order_stat(null, rows - k), math.inf, p_value
