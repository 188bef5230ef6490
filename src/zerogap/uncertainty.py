"""Uncertainty for the restoration metrics: intervals, paired tests, the noise floor, verdicts.

The paper (arXiv 2608.07341) reports point estimates only. What a user needs beside them, and
what each number here means:

* **A strategy's interval** (:func:`gap_intervals`, :meth:`GapIntervals.interval`): where the
  metric's expectation lies *for these questions*, over new samples of the clean and the
  mitigated model at the same m. Sampling noise is the only randomness: the benchmark is taken
  as given, as GSM8K's 1,319 questions are. Method: the metric is a weighted sum of per-question
  terms (SA-PPG's weights are ``1 / (n_strata * n_stratum(q))``), so its variance is the
  weighted sum of the terms' variances, each computed exactly from two binomials and averaged
  over the question's empirical-Bayes posteriors of its two solve probabilities
  (:mod:`zerogap.solve_prior`). The interval is the estimate plus or minus a normal quantile
  times that standard error.
  Plug-in ``c / m`` would give questions seen at 0/m or m/m no variance at all, which is what
  made the old question bootstrap state intervals such as [0.611, 0.611].
* **A paired comparison** (:func:`compare`): is strategy a's metric different from b's? A
  randomisation test that swaps a's and b's outcomes question by question (a sign flip of the
  per-question difference for the metrics that are weighted sums; a swap of the two runs for
  G-APP and G-AP), exact by enumeration when there are few questions. When a and b are equal in
  distribution on every question, the swap changes nothing in distribution, so the test holds its
  level exactly, whatever N, m, B and the clean model are, and for either reading (these
  questions re-sampled, or a new draw of questions). Its interval is the set of differences the
  same test does not reject (for weighted sums: the test of a shifted difference, inverted in
  closed form), so the interval excludes 0 exactly when the p-value is at most ``1 - level``.
* **The noise floor** (:func:`noise_floor`): what two independent batches of the *same* model
  read, simulated from the empirical-Bayes posteriors; its mean matches a measured second batch
  in expectation (checked in the tests and the README's simulation).
* **A verdict** (:func:`restoration_verdicts`): restored / not restored / inconclusive by one
  rule, an equivalence test of SA-PPG's excess over the noise floor against a margin.

Below :data:`MIN_QUESTIONS` questions no interval, comparison or verdict is calibrated (the
calibration suite starts there), and each says so instead of printing a number.

Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from statistics import NormalDist
from typing import Any

import numpy as np

from zerogap.metrics import DEFAULT_BINS, restoration_gaps, solve_probability, strata
from zerogap.solve_prior import SolvePrior, binomial_likelihood, fit_solve_prior
from zerogap.student_t import t_cdf, t_quantile

MIN_QUESTIONS = 12
"""Fewest questions for which intervals and verdicts are stated (the smallest N the calibration
suite checks); below it they read "too few questions"."""

QUESTIONS_PER_BIN = 26
"""The paper's B = 50 on GSM8K's 1,319 questions is about 26 questions per stratum; the default
B keeps that ratio (see :func:`choose_bins`)."""

ALTERNATIVES = ("two-sided", "less", "greater")
NULLS = ("sharp", "mean")
"""What a paired comparison tests: ``"sharp"``, the two strategies equal in distribution on every
question (the exact swap test); ``"mean"``, equal on average over questions (the weak null)."""

# Replicates per chunk of the noise-floor simulation, and sign patterns per matrix product.
_CHUNK = 1000
# Per-question joint outcome grids are built for at most this many cells at once.
_CELLS = 4_000_000

LINEAR_METRICS = ("a_ppg", "delta_plus", "delta_minus", "sa_ppg", "s_delta_plus",
                  "s_delta_minus")
"""Metrics that are weighted sums of per-question terms (the others are |mean Δ|)."""
STRATIFIED = ("sa_ppg", "s_delta_plus", "s_delta_minus")
_PART = {"a_ppg": "abs", "delta_plus": "plus", "delta_minus": "minus",
         "sa_ppg": "abs", "s_delta_plus": "plus", "s_delta_minus": "minus"}


def too_few(n_questions: int) -> str:
    return (f"too few questions ({n_questions} < {MIN_QUESTIONS}) for a calibrated "
            "statement")


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval ``[low, high]`` at ``level``.

    When ``reason`` is set no calibrated interval exists (``low`` and ``high`` are NaN) and it
    says why.
    """

    estimate: float
    low: float
    high: float
    level: float
    reason: str | None = None

    def to_dict(self) -> dict:
        if self.reason is not None:
            return {"estimate": self.estimate, "low": None, "high": None, "level": self.level,
                    "reason": self.reason}
        return {"estimate": self.estimate, "low": self.low, "high": self.high,
                "level": self.level}


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


@dataclass(frozen=True)
class NoiseFloor:
    """What two independent sample batches of the same model read (mean and upper quantile)."""

    sa_ppg: float
    sa_ppg_upper: float
    a_ppg: float
    a_ppg_upper: float
    quantile: float
    n_sim: int
    samples: int | None
    prior: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level!r}")


def _check_counts(correct, samples, name: str) -> tuple[np.ndarray, np.ndarray]:
    correct = np.atleast_2d(np.asarray(correct))
    samples = np.atleast_2d(np.asarray(samples))
    if correct.shape != samples.shape:
        raise ValueError(f"{name}: correct and samples differ in shape")
    for row_c, row_m in zip(correct, samples, strict=True):
        solve_probability(row_c, row_m)  # validates
    return correct.astype(np.int64), samples.astype(np.int64)


def choose_bins(n_questions: int) -> int:
    """The default number of SA-PPG strata B for a benchmark of ``n_questions``.

    B = round(N / 26), kept within [5, 50]: the paper's B = 50 on 1,319 questions is about 26
    questions per stratum; fewer than 5 strata would no longer separate easy from hard
    questions, and more than 50 is beyond what the paper used.

    Examples
    --------
    >>> choose_bins(1319), choose_bins(12), choose_bins(400)
    (50, 5, 15)
    """
    if not isinstance(n_questions, int | np.integer) or n_questions < 1:
        raise ValueError(f"n_questions must be a positive integer, got {n_questions!r}")
    return int(min(50, max(5, round(n_questions / QUESTIONS_PER_BIN))))


def stratum_weights(r_clean: np.ndarray, bins: int) -> np.ndarray:
    """(N,) each question's weight in SA-PPG: ``1 / (n_strata * n_stratum(q))``; they sum to 1."""
    _, inverse, sizes = np.unique(strata(r_clean, bins=bins), return_inverse=True,
                                  return_counts=True)
    return 1.0 / (sizes.size * sizes[inverse])


def _part_variances(mit: SolvePrior, clean: SolvePrior) -> dict[str, np.ndarray]:
    """(N,) each question's expected variance of its |Δ|, Δ+, Δ- and Δ over new samples.

    ``Δ = X / m_mit - Y / m_clean`` with ``X ~ Bin(m_mit, p)``, ``Y ~ Bin(m_clean, p')`` given
    the question's true solve probabilities, which are unknown: the variance given them is
    averaged over their posteriors (independent for the two runs). For a part f on the grid
    of solve probabilities, ``F = E[f | p, p']`` and ``F2 = E[f² | p, p']`` are (G, G) matrices
    shared by every question with the same pair of m, and the expected variance is
    ``post_mit @ (F2 - F * F) @ post_clean``. Plugging the posterior means into the variance
    instead would overstate it (p(1 - p) is concave) and over-cover at small m.
    """
    grid = clean.grid
    pairs, inverse = np.unique(np.stack([mit.group, clean.group], axis=1), axis=0,
                               return_inverse=True)
    inverse = inverse.ravel()
    m_mit, m_clean = mit.counts[pairs[:, 0], 1], clean.counts[pairs[:, 1], 1]
    post_mit, post_clean = mit.group_posterior[pairs[:, 0]], clean.group_posterior[pairs[:, 1]]
    out = {key: np.zeros(pairs.shape[0]) for key in ("abs", "plus", "minus")}
    for ma, mc in np.unique(np.stack([m_mit, m_clean], axis=1), axis=0):
        members = np.flatnonzero((m_mit == ma) & (m_clean == mc))
        delta = np.arange(ma + 1)[:, None] / ma - np.arange(mc + 1)[None, :] / mc  # (A, C)
        pmf_a = binomial_likelihood(np.arange(ma + 1), np.full(ma + 1, ma), grid)  # (A, G)
        pmf_c = binomial_likelihood(np.arange(mc + 1), np.full(mc + 1, mc), grid)  # (C, G)
        parts = {"abs": np.abs(delta), "plus": np.maximum(delta, 0),
                 "minus": np.maximum(-delta, 0)}
        for key, f in parts.items():
            first = pmf_a.T @ f @ pmf_c  # (G, G) E[f | p, p']
            second = pmf_a.T @ (f * f) @ pmf_c
            spread = second - first * first
            out[key][members] = ((post_mit[members] @ spread) * post_clean[members]).sum(axis=1)
    result = {key: np.maximum(value[inverse], 0.0) for key, value in out.items()}
    bernoulli = grid * (1 - grid)  # (G,) p(1 - p), averaged over each posterior below
    result["draw"] = mit.posterior @ bernoulli + clean.posterior @ bernoulli
    result["delta"] = (mit.posterior @ bernoulli / mit.counts[mit.group, 1]
                       + clean.posterior @ bernoulli / clean.counts[clean.group, 1])
    return result


def _folded(estimate: float, se: float, z: float) -> tuple[float, float]:
    """Interval for |μ| from the signed estimate of μ and its standard error."""
    low, high = estimate - z * se, estimate + z * se
    if low >= 0:
        return low, high
    if high <= 0:
        return -high, -low
    return 0.0, max(-low, high)


@dataclass(frozen=True)
class GapIntervals:
    """Every metric of several strategies against one clean run, with intervals and the data
    their paired comparisons need.

    ``estimates[k]`` is strategy k's :class:`~zerogap.metrics.RestorationGaps`; ``se[metric]``
    (K,) the standard errors of the linear metrics and of the signed mean Δ behind G-APP
    (``"mean_delta"``) and G-AP (``"mean_draw"``). ``r_clean`` (N,), ``r_mitigated`` (K, N),
    ``weights`` (N,) (SA-PPG's), ``stratum`` (N,) (each question's SA-PPG stratum) and the
    single draws are kept for :func:`compare`.
    """

    names: tuple[str, ...]
    estimates: tuple
    se: dict = field(repr=False)
    level: float
    n_resamples: int
    seed: int
    r_clean: np.ndarray = field(repr=False)
    r_mitigated: np.ndarray = field(repr=False)
    weights: np.ndarray = field(repr=False)
    stratum: np.ndarray = field(repr=False)
    draw_clean: np.ndarray | None = field(default=None, repr=False)
    draw_mitigated: np.ndarray | None = field(default=None, repr=False)
    signed: dict = field(default_factory=dict, repr=False)

    @property
    def n_questions(self) -> int:
        return int(self.r_clean.size)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"unknown strategy {name!r}; have {', '.join(self.names)}") from None

    def interval(self, name: str, metric: str) -> Interval:
        """``metric`` of strategy ``name`` with its interval (see the module docstring)."""
        k = self.index(name)
        estimate = getattr(self.estimates[k], metric)
        if estimate is None:
            raise ValueError(f"no {metric} for {name!r}: it needs single draws")
        if self.n_questions < MIN_QUESTIONS:
            return Interval(estimate, math.nan, math.nan, self.level,
                            too_few(self.n_questions))
        z = NormalDist().inv_cdf(0.5 + self.level / 2)
        if metric in LINEAR_METRICS:
            se = float(self.se[metric][k])
            return Interval(estimate, max(0.0, estimate - z * se), estimate + z * se,
                            self.level)
        key = "mean_delta" if metric == "g_app" else "mean_draw"
        low, high = _folded(float(self.signed[key][k]), float(self.se[key][k]), z)
        return Interval(estimate, low, high, self.level)

    def _pattern_chunks(self):
        """The swap patterns (+1 keep, -1 swap), (rows, N) float chunks: all 2^N when that is
        at most ``n_resamples``, else the identity and ``n_resamples`` random ones (seeded).
        Chunks keep the float copies small; the (R, N) matrix never exists at once."""
        n = self.n_questions
        if self.exact:
            for start in range(0, 2**n, _CHUNK):
                codes = np.arange(start, min(start + _CHUNK, 2**n))[:, None] >> np.arange(n)
                yield 1.0 - 2.0 * (codes & 1)
            return
        yield np.ones((1, n))
        rng = np.random.default_rng([self.seed, 19])
        for start in range(0, self.n_resamples, _CHUNK):
            rows = min(_CHUNK, self.n_resamples - start)
            bits = np.unpackbits(rng.integers(0, 256, size=(rows, (n + 7) // 8),
                                              dtype=np.uint8), axis=1)[:, :n]
            yield 1.0 - 2.0 * bits

    @cached_property
    def swap_table(self) -> tuple[dict, np.ndarray]:
        """Every per-question column a paired test sums, and its sums under each swap pattern.

        Columns (N,): for each strategy k and weighted-sum metric, its weighted per-question
        term; its signed Δ and draw Δ over N (G-APP, G-AP); and the two weight vectors
        (``"stratified"``, ``"plain"``). Returns ``{key: column}`` and the (R, C) sums: one
        pass over the patterns serves every comparison of the card.
        """
        n = self.n_questions
        keys: dict = {}
        columns: list[np.ndarray] = []
        for k in range(len(self.names)):
            for metric in LINEAR_METRICS:
                term, w = _terms(self, k, metric)
                keys[(k, metric)] = len(columns)
                columns.append(w * term)
            for metric, delta in _signed_deltas(self, k).items():
                keys[(k, metric)] = len(columns)
                columns.append(delta / n)
        keys["stratified"], keys["plain"] = len(columns), len(columns) + 1
        columns += [self.weights, np.full(n, 1.0 / n)]
        values = np.stack(columns, axis=1)  # (N, C)
        return keys, np.concatenate([chunk @ values for chunk in self._pattern_chunks()])

    @property
    def exact(self) -> bool:
        return 2**self.n_questions <= self.n_resamples


def gap_intervals(
    clean_correct,
    clean_samples,
    mitigated_correct,
    mitigated_samples,
    *,
    names: Sequence[str] | None = None,
    bins: int = DEFAULT_BINS,
    level: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    draw_clean=None,
    draw_mitigated=None,
) -> GapIntervals:
    """Every restoration metric of one or more strategies against one clean run, with intervals.

    Intervals are for the metric's expectation over new samples of these questions (see the
    module docstring): estimate ± z · se, where se² sums each question's squared weight times
    the exact variance of its term under binomials, averaged over its empirical-Bayes
    posteriors (clean and mitigated priors fitted separately). For G-APP = |mean Δ| and G-AP
    the interval of the signed mean is folded onto |·|. ``n_resamples`` is the number of swap
    patterns :func:`compare` uses (all of them, when 2^N is fewer).

    Parameters
    ----------
    clean_correct, clean_samples : array-like of int, shape (n_questions,)
    mitigated_correct, mitigated_samples : array-like of int, shape (n_strategies, n_questions)
        One row per strategy (a 1-D array is one strategy), same question order as the clean run.
    names : sequence of str, optional
        Strategy names; default ``"s0", "s1", ...``.
    bins : int, default=50
    level : float, default=0.95
    n_resamples : int, default=10000
    seed : int, default=0
    draw_clean : array-like of 0/1, shape (n_questions,), optional
    draw_mitigated : array-like of 0/1, shape (n_strategies, n_questions), optional
        Single-draw readouts; when given, G-AP gets an interval and a paired test too.

    Returns
    -------
    GapIntervals

    Examples
    --------
    >>> gaps = gap_intervals([5, 0, 9, 2] * 5, [10] * 20, [[5, 3, 9, 0] * 5], [[10] * 20],
    ...                      names=["railcap"])
    >>> ci = gaps.interval("railcap", "sa_ppg")
    >>> round(ci.estimate, 4), ci.low < ci.estimate < ci.high
    (0.125, True)
    """
    _check_level(level)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer) \
            or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    (clean_c,), (clean_m,) = _check_counts(clean_correct, clean_samples, "clean")
    mit_c, mit_m = _check_counts(mitigated_correct, mitigated_samples, "mitigated")
    n_strategies, n = mit_c.shape
    if n != clean_c.size:
        raise ValueError(
            f"mitigated runs cover {n} questions but the clean run covers {clean_c.size}"
        )
    names = tuple(names) if names is not None else tuple(f"s{k}" for k in range(n_strategies))
    if len(names) != n_strategies:
        raise ValueError(f"{len(names)} names for {n_strategies} strategies")
    with_draws = draw_clean is not None
    if with_draws != (draw_mitigated is not None):
        raise ValueError("give both draw_clean and draw_mitigated for G-AP, or neither")

    r_clean = clean_c / clean_m
    r_mit = mit_c / mit_m  # (K, N)
    draws_c = np.asarray(draw_clean, float) if with_draws else None
    draws_m = np.atleast_2d(np.asarray(draw_mitigated, float)) if with_draws else None
    estimates = tuple(
        restoration_gaps(r_clean, r_mit[k], bins=bins, draw_clean=draws_c,
                         draw_mitigated=None if draws_m is None else draws_m[k])
        for k in range(n_strategies)
    )
    weights = stratum_weights(r_clean, bins)
    stratum = strata(r_clean, bins=bins)
    prior_clean = fit_solve_prior(clean_c, clean_m)
    se: dict[str, np.ndarray] = {key: np.zeros(n_strategies)
                                 for key in (*LINEAR_METRICS, "mean_delta", "mean_draw")}
    signed = {"mean_delta": (r_mit - r_clean).mean(axis=1), "mean_draw": np.zeros(n_strategies)}
    for k in range(n_strategies):
        var = _part_variances(fit_solve_prior(mit_c[k], mit_m[k]), prior_clean)
        for metric in LINEAR_METRICS:
            w = weights if metric in STRATIFIED else np.full(n, 1.0 / n)
            se[metric][k] = math.sqrt(float(w**2 @ var[_PART[metric]]))
        se["mean_delta"][k] = math.sqrt(float(var["delta"].sum())) / n
        if draws_m is not None and draws_c is not None:
            signed["mean_draw"][k] = float((draws_m[k] - draws_c).mean())
            se["mean_draw"][k] = math.sqrt(float(var["draw"].sum())) / n
    return GapIntervals(
        names=names, estimates=estimates, se=se, level=float(level),
        n_resamples=int(n_resamples), seed=int(seed), r_clean=r_clean, r_mitigated=r_mit,
        weights=weights, stratum=stratum, draw_clean=draws_c, draw_mitigated=draws_m, signed=signed,
    )


def _terms(gaps: GapIntervals, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(N,) strategy k's per-question term of a linear metric, and (N,) the metric's weights."""
    delta = gaps.r_mitigated[k] - gaps.r_clean
    part = _PART[metric]
    term = (np.abs(delta) if part == "abs" else np.maximum(delta, 0) if part == "plus"
            else np.maximum(-delta, 0))
    n = gaps.n_questions
    return term, gaps.weights if metric in STRATIFIED else np.full(n, 1.0 / n)


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


def _signed_deltas(gaps: GapIntervals, k: int) -> dict[str, np.ndarray]:
    """(N,) strategy k's signed per-question Δ behind G-APP, and behind G-AP when drawn."""
    out = {"g_app": gaps.r_mitigated[k] - gaps.r_clean}
    if gaps.draw_mitigated is not None and gaps.draw_clean is not None:
        out["g_ap"] = gaps.draw_mitigated[k] - gaps.draw_clean
    return out


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


def noise_floor(
    correct,
    samples,
    *,
    other_samples: int | None = None,
    bins: int = DEFAULT_BINS,
    n_sim: int = 2000,
    quantile: float = 0.95,
    prior: str = "empirical",
    seed: int = 0,
) -> NoiseFloor:
    """The gap two independent sample batches of the *same* model would read.

    The observed run plays the first batch (it defines the strata, as in a measurement); each
    simulation draws a second batch of ``m'`` samples per question (``other_samples`` or the
    run's own m) from the question's posterior predictive and computes SA-PPG and A-PPG
    between the two; the result is the mean over simulations and the ``quantile`` upper point:
    what a second batch of the same model would read, given this one. The posterior comes
    from ``prior``:

    * ``"empirical"`` (default): the benchmark's own spread of solve probabilities
      (:func:`zerogap.solve_prior.fit_solve_prior`). Its mean matches a measured second batch in
      expectation (simulated in tests/test_calibration.py across N and m).
    * ``"jeffreys"``: Beta(c + 1/2, m - c + 1/2) per question, which lets every question seen at
      0/m or m/m vary like a coin seen once and overstates the floor where many questions sit
      there (0.117 simulated against 0.039 measured in a demo with 40% of questions at 0 or 1).
    * ``"plugin"``: ``p = c / m``, no noise at all on questions seen at 0/m or m/m.

    Assumes samples independent given the question (temperature sampling with per-row
    randomness).

    Parameters
    ----------
    correct, samples : array-like of int, shape (n_questions,)
        Counts of the clean run.
    other_samples : int, optional
        Samples per question of the run to be compared (default: the clean run's own ``m``).

    Examples
    --------
    >>> floor = noise_floor([25] * 200, [50] * 200, n_sim=200, prior="plugin", seed=0)
    >>> 0.04 < floor.a_ppg < 0.07   # E|X / 50 - 0.5| for X ~ Bin(50, 0.5) is about 0.056
    True
    """
    if prior not in ("empirical", "jeffreys", "plugin"):
        raise ValueError(f"prior must be 'empirical', 'jeffreys' or 'plugin', got {prior!r}")
    _check_level(quantile)
    if isinstance(n_sim, bool) or not isinstance(n_sim, int | np.integer) or n_sim < 1:
        raise ValueError(f"n_sim must be a positive integer, got {n_sim!r}")
    if other_samples is not None and other_samples < 1:
        raise ValueError(f"other_samples must be positive, got {other_samples!r}")
    (c,), (m,) = _check_counts(correct, samples, "clean")
    m_other = m if other_samples is None else np.full_like(m, other_samples)
    rng = np.random.default_rng(seed)
    posterior = fit_solve_prior(c, m) if prior == "empirical" else None
    r1 = c / m
    stratum = strata(r1, bins=bins)
    sa, aa = [], []
    for start in range(0, n_sim, _CHUNK):
        size = min(_CHUNK, n_sim - start)
        if posterior is not None:
            c2 = posterior.draw_second_batch(rng, size, other_samples)
        else:
            p = (rng.beta(c + 0.5, m - c + 0.5, size=(size, c.size)) if prior == "jeffreys"
                 else np.broadcast_to(r1, (size, c.size)))
            c2 = rng.binomial(m_other, p)
        gap = np.abs(c2 / m_other - r1)  # (C, N)
        sa.append(_stratified_means(np.broadcast_to(stratum, gap.shape), gap, bins))
        aa.append(gap.mean(axis=1))
    sa_all, aa_all = np.concatenate(sa), np.concatenate(aa)
    return NoiseFloor(
        sa_ppg=float(sa_all.mean()),
        sa_ppg_upper=float(np.quantile(sa_all, quantile)),
        a_ppg=float(aa_all.mean()),
        a_ppg_upper=float(np.quantile(aa_all, quantile)),
        quantile=float(quantile),
        n_sim=int(n_sim),
        samples=None if other_samples is None else int(other_samples),
        prior=prior,
    )


def _stratified_means(stratum: np.ndarray, values: np.ndarray, bins: int) -> np.ndarray:
    """Per-replicate SA-style mean: average within non-empty strata, then over them.

    stratum: (C, N) int strata per replicate; values: (C, N). Returns (C,).
    """
    chunk, n = stratum.shape
    flat = (np.arange(chunk)[:, None] * bins + stratum).ravel()  # (C*N,)
    sizes = np.bincount(flat, minlength=chunk * bins).reshape(chunk, bins)
    sums = np.bincount(flat, weights=values.ravel(), minlength=chunk * bins).reshape(chunk, bins)
    nonempty = sizes > 0
    means = np.divide(sums, sizes, out=np.zeros_like(sums), where=nonempty)
    return means.sum(axis=1) / nonempty.sum(axis=1)


VERDICT_OUTCOMES = ("restored", "not restored", "inconclusive")


@dataclass(frozen=True)
class Verdict:
    """Whether a strategy restored the clean model, as an equivalence test (beyond the paper).

    The tested quantity is the *excess* ``SA-PPG - floor``: how far the strategy's SA-PPG sits
    above what two independent batches of the clean model read (:func:`noise_floor`, mean).
    ``low`` and ``high`` are one-sided bounds of the excess at ``level`` each, the excess minus
    and plus a normal quantile times SA-PPG's standard error ``se`` (:func:`gap_intervals`):

    * ``restored``: ``high < margin``, the excess is significantly below the margin (the
      one-sided test of a TOST; an excess below zero is sampling noise, never a failure);
    * ``not restored``: ``low > margin``, the excess is significantly above the margin;
    * ``inconclusive`` otherwise. ``needed_questions`` is how many questions (same m) would
      bring the bound to the margin's side the estimate is on, by ``se ∝ 1/sqrt(questions)``;
      ``needed_samples`` the m per question that would do it on the same questions, by
      ``se ∝ 1/sqrt(m)``. With fewer than :data:`MIN_QUESTIONS` questions the verdict is
      inconclusive and ``reason`` says so.

    Error rates (checked by simulation in tests/test_calibration.py): a strategy equal in
    distribution to the clean model is called "not restored" at most at ``1 - level``; one whose
    true excess is twice the margin is called "restored" at most at ``1 - level``.
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

    The floor is :func:`noise_floor` of the clean counts with each strategy's median m (one
    simulation per distinct m), at the strata ``gaps`` was computed with; the standard error is
    SA-PPG's from ``gaps``. See :class:`Verdict` for the rule.

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
    floors: dict[int, float] = {}
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
        if m not in floors:
            floors[m] = noise_floor(clean_correct, clean_samples, other_samples=m, bins=bins,
                                    n_sim=n_sim, seed=gaps.seed).sa_ppg
        floor = floors[m]
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
