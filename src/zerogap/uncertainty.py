"""Uncertainty for the restoration metrics: bootstrap CIs, paired comparisons, the noise floor.

The paper reports point estimates only. Three questions a user needs answered beside them:

* How precise is a strategy's SA-PPG? -> :func:`bootstrap_gaps` resamples questions (and, with
  ``within_questions=True``, also the samples within each question) and gives percentile CIs.
* Is strategy A really better than strategy B? -> :func:`compare` reads the difference off the
  *same* bootstrap replicates (both strategies share the resampled questions, so the comparison
  is paired) and gives its CI and a two-sided p-value.
* Would a perfectly restored model read zero? No: two independent m-sample batches of the *same*
  model already differ. -> :func:`noise_floor` estimates what they would read, so a strategy
  whose SA-PPG sits inside the floor is "restored up to sampling noise".
* What would a rerun on the same questions read? -> :func:`rerun_interval`, a prediction
  interval that a rerun falls inside about ``level`` of the time (a simulation in the tests
  checks it). The two-level bootstrap is *not* that (see :func:`bootstrap_gaps`).
* Is a strategy restored? -> :func:`restoration_verdicts` tests whether its SA-PPG's excess
  over that floor is significantly below (restored) or above (not restored) a stated margin,
  and otherwise says how many more questions or samples would decide it.

Pure numpy, vectorised over replicates; replicates are processed in chunks to bound memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from statistics import NormalDist
from typing import Any

import numpy as np

from zerogap.metrics import DEFAULT_BINS, restoration_gaps, solve_probability, strata

# Replicates per chunk: a (chunk, n_questions) float64 weight matrix stays near 10 MB for GSM8K.
_CHUNK = 1000


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval ``[low, high]`` at ``level``."""

    estimate: float
    low: float
    high: float
    level: float

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "level": self.level}


@dataclass(frozen=True)
class BootstrapGaps:
    """Bootstrap distribution of every metric for several strategies scored on one clean run.

    ``replicates[metric]`` has shape ``(n_strategies, n_boot)`` (``g_ap`` only when single draws
    were given); ``estimates[k]`` is the strategy's :class:`~zerogap.metrics.RestorationGaps` on
    the observed data.
    """

    names: tuple[str, ...]
    estimates: tuple
    replicates: dict = field(repr=False)
    level: float
    n_boot: int
    seed: int
    within_questions: bool

    def interval(self, name: str, metric: str) -> Interval:
        """Percentile interval of ``metric`` for the strategy called ``name``."""
        k = self._index(name)
        if metric not in self.replicates:
            raise ValueError(f"no bootstrap replicates for metric {metric!r}")
        low, high = _percentile_interval(self.replicates[metric][k], self.level)
        return Interval(getattr(self.estimates[k], metric), low, high, self.level)

    def _index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"unknown strategy {name!r}; have {', '.join(self.names)}") from None


@dataclass(frozen=True)
class PairedComparison:
    """``difference = metric(a) - metric(b)`` with its bootstrap CI and two-sided p-value.

    A negative difference means ``a`` restores better (reads a smaller gap) than ``b``.
    """

    a: str
    b: str
    metric: str
    difference: float
    low: float
    high: float
    p_value: float
    level: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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


def _percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return float(low), float(high)


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


def _multiplicity(idx: np.ndarray) -> np.ndarray:
    """(C, N) float: how often each question occurs in each row of resampled indices (C, N)."""
    size, n = idx.shape
    flat = (np.arange(size)[:, None] * n + idx).ravel()
    return np.bincount(flat, minlength=size * n).reshape(size, n).astype(float)


def _stratum_layout(stratum: np.ndarray):
    """Questions grouped by stratum: order (N,), each sorted position's stratum start and size."""
    order = np.argsort(stratum, kind="stable")  # (N,)
    _, starts, sizes = np.unique(stratum[order], return_index=True, return_counts=True)
    group = np.repeat(np.arange(starts.size), sizes)  # (N,) stratum number of each position
    return order, starts, sizes, group


def _resample_within_strata(rng, layout, size: int) -> np.ndarray:
    """(C, N) question indices: position j of a replicate draws uniformly within j's stratum."""
    order, starts, sizes, group = layout
    u = rng.random((size, order.size))  # (C, N)
    return order[starts[group] + (u * sizes[group]).astype(np.int64)]


def _from_parts(plus, minus, stratified: bool) -> dict:
    """Metric dict from the mean positive and negative parts of Δ (plain or stratified)."""
    if stratified:
        return {"sa_ppg": plus + minus, "s_delta_plus": plus, "s_delta_minus": minus}
    return {
        "g_app": np.abs(plus - minus),
        "a_ppg": plus + minus,
        "delta_plus": plus,
        "delta_minus": minus,
    }


def _linear_metrics(weights, over, under, draws_delta, share):
    """Metrics of a chunk of question-resampling replicates, as one matrix product.

    weights: (C, N) multiplicity of each question per replicate; over, under: (K, N) positive and
    negative parts of Δ. With ``share`` None the plain metrics come out (plus G-AP when
    ``draws_delta`` (K, N) is given). With ``share`` (N,) = 1 / (n_strata * n_stratum(q)) the
    stratified ones do: resampling within strata keeps every stratum's size, so SA-PPG is also a
    weighted sum of per-question terms. Returns dict metric -> (K, C).
    """
    n, k = weights.shape[1], over.shape[0]
    scale = 1.0 / n if share is None else share
    terms = [over * scale, under * scale]
    if share is None and draws_delta is not None:
        terms.append(draws_delta / n)
    sums = (weights @ np.concatenate(terms).T).T  # (T*K, C)
    out = _from_parts(sums[:k], sums[k : 2 * k], stratified=share is not None)
    if len(terms) == 3:
        out["g_ap"] = np.abs(sums[2 * k :])
    return out


def _two_level_metrics(rng, idx, clean_c, clean_m, mit_c, mit_m, layout, with_draws):
    """Metrics of a chunk of two-level replicates: questions, then samples within questions.

    idx: (C, N) resampled question indices; each drawn question's counts are redrawn as
    binomials around its observed solve probability. With ``layout`` None the plain metrics come
    out (plus G-AP if ``with_draws``); with a layout, idx must come from
    :func:`_resample_within_strata` and the stratified metrics come out, over the observed
    clean strata. Returns dict metric -> (K, C).
    """

    def redraw(c, m):
        m_drawn = m[idx]
        return rng.binomial(m_drawn, c[idx] / m_drawn) / m_drawn  # (C, N)

    if layout is None:
        mean = partial(np.mean, axis=1)
    else:
        _, starts, sizes, _ = layout
        mean = lambda v: (np.add.reduceat(v, starts, axis=1) / sizes).mean(axis=1)  # noqa: E731

    r_cl = redraw(clean_c, clean_m)
    parts = []
    for k in range(mit_c.shape[0]):
        r_mi = redraw(mit_c[k], mit_m[k])
        delta = r_mi - r_cl  # (C, N)
        part = [mean(np.maximum(delta, 0)), mean(np.maximum(-delta, 0))]
        if layout is None and with_draws:
            part.append(np.abs(mean(rng.binomial(1, r_mi) - rng.binomial(1, r_cl))))
        parts.append(part)
    plus, minus = np.array([p[0] for p in parts]), np.array([p[1] for p in parts])
    out = _from_parts(plus, minus, stratified=layout is not None)
    if layout is None and with_draws:
        out["g_ap"] = np.array([p[2] for p in parts])
    return out


def bootstrap_gaps(
    clean_correct,
    clean_samples,
    mitigated_correct,
    mitigated_samples,
    *,
    names: Sequence[str] | None = None,
    bins: int = DEFAULT_BINS,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    within_questions: bool = False,
    draw_clean=None,
    draw_mitigated=None,
) -> BootstrapGaps:
    """Bootstrap every restoration metric for one or more strategies against one clean run.

    Each replicate redraws questions with replacement, the same questions for every strategy (so
    replicates can be compared across strategies, see :func:`compare`). The unstratified metrics
    (G-AP, G-APP, A-PPG, Δ+, Δ-) resample across the whole benchmark. The stratified ones
    (SA-PPG, S-Δ+, S-Δ-) resample *within each clean stratum*: keeping every stratum and its size
    matches the estimator, which takes the strata as given, while resampling across strata
    would empty small strata in some replicates and bias SA-PPG's intervals downwards. A stratum
    of one question then varies only through its samples: with ``within_questions=True`` each
    drawn question's counts are also redrawn as binomials around its observed solve probability
    (a two-level bootstrap that adds the sampling noise of the m samples, clean and mitigated),
    advisable when many strata are tiny. Those redraws add sampling noise to solve
    probabilities that already carry it, and noise inflates every |Δ|-based metric (see
    :func:`noise_floor`): two-level intervals of A-PPG and SA-PPG describe the spread of the
    estimate but sit above it by about the noise floor, and above where a rerun lands. They
    are not prediction intervals for a rerun (simulated with N = 600, m = 20, B = 10, a
    rerun's SA-PPG fell inside them 52 and 0 times in 100 for two populations); use
    :func:`rerun_interval` for that.

    Parameters
    ----------
    clean_correct, clean_samples : array-like of int, shape (n_questions,)
    mitigated_correct, mitigated_samples : array-like of int, shape (n_strategies, n_questions)
        One row per strategy (a 1-D array is one strategy), same question order as the clean run.
    names : sequence of str, optional
        Strategy names; default ``"s0", "s1", ...``.
    bins : int, default=50
    n_boot : int, default=10000
    level : float, default=0.95
    seed : int, default=0
    within_questions : bool, default=False
    draw_clean : array-like of 0/1, shape (n_questions,), optional
    draw_mitigated : array-like of 0/1, shape (n_strategies, n_questions), optional
        Single-draw readouts; when given, G-AP is bootstrapped too.

    Returns
    -------
    BootstrapGaps

    Examples
    --------
    >>> boot = bootstrap_gaps([5, 0, 9, 2], [10, 10, 10, 10], [[5, 3, 9, 0]], [[10, 10, 10, 10]],
    ...                       names=["railcap"], n_boot=200, seed=1)
    >>> ci = boot.interval("railcap", "sa_ppg")
    >>> round(ci.estimate, 4), ci.low <= ci.estimate <= ci.high
    (0.125, True)
    """
    _check_level(level)
    if not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
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
    draws_m = np.atleast_2d(np.asarray(draw_mitigated, float)) if with_draws else None
    estimates = tuple(
        restoration_gaps(
            r_clean,
            r_mit[k],
            bins=bins,
            draw_clean=draw_clean,
            draw_mitigated=None if draws_m is None else draws_m[k],
        )
        for k in range(n_strategies)
    )

    rng = np.random.default_rng(seed)
    delta = r_mit - r_clean  # (K, N)
    over, under = np.maximum(delta, 0), np.maximum(-delta, 0)
    draws_delta = draws_m - np.asarray(draw_clean, float) if with_draws else None
    layout = _stratum_layout(strata(r_clean, bins=bins))
    order, _, sizes, group = layout
    share = np.empty(n)
    share[order] = 1.0 / (sizes.size * sizes[group])  # (N,) SA-PPG weight of each question

    chunks = []
    for start in range(0, n_boot, _CHUNK):
        size = min(_CHUNK, n_boot - start)
        idx_plain = rng.integers(0, n, size=(size, n))  # (C, N)
        idx_strata = _resample_within_strata(rng, layout, size)  # (C, N)
        if within_questions:
            chunk = _two_level_metrics(
                rng, idx_plain, clean_c, clean_m, mit_c, mit_m, None, with_draws
            )
            chunk |= _two_level_metrics(
                rng, idx_strata, clean_c, clean_m, mit_c, mit_m, layout, with_draws
            )
        else:
            chunk = _linear_metrics(_multiplicity(idx_plain), over, under, draws_delta, None)
            chunk |= _linear_metrics(_multiplicity(idx_strata), over, under, None, share)
        chunks.append(chunk)
    replicates = {key: np.concatenate([c[key] for c in chunks], axis=1) for key in chunks[0]}
    return BootstrapGaps(
        names=names,
        estimates=estimates,
        replicates=replicates,
        level=level,
        n_boot=int(n_boot),
        seed=int(seed),
        within_questions=bool(within_questions),
    )


def rerun_interval(
    clean_correct,
    clean_samples,
    mitigated_correct,
    mitigated_samples,
    *,
    bins: int = DEFAULT_BINS,
    n_sim: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """Prediction intervals for what a rerun on the same questions would read (SA-PPG, A-PPG).

    The observed runs and a rerun (new samples for the same questions, clean and mitigated)
    are two independent draws of one experiment, so the rerun's metric differs from the
    observed one by a difference of two such draws, with twice the variance of one. Each
    simulation redraws every question's counts, clean and mitigated, as binomials around the
    observed solve probabilities and recomputes the metric (SA-PPG with strata from the
    redrawn clean run, as a rerun's would be); the interval is the observed estimate plus
    sqrt(2) times the simulated deviations from their mean at the ``(1 ± level) / 2``
    quantiles. Assumes samples independent given the question, as :func:`noise_floor` does.

    Parameters
    ----------
    clean_correct, clean_samples : array-like of int, shape (n_questions,)
    mitigated_correct, mitigated_samples : array-like of int, shape (n_questions,)

    Returns
    -------
    dict
        ``{"sa_ppg": Interval, "a_ppg": Interval}``.

    Examples
    --------
    >>> out = rerun_interval([5, 0, 9, 2] * 25, [10] * 100, [5, 3, 9, 0] * 25, [10] * 100,
    ...                      bins=10, n_sim=200)
    >>> ci = out["sa_ppg"]
    >>> ci.low < ci.estimate < ci.high
    True
    """
    _check_level(level)
    if not isinstance(n_sim, int | np.integer) or n_sim < 2:
        raise ValueError(f"n_sim must be an integer >= 2, got {n_sim!r}")
    (c,), (m,) = _check_counts(clean_correct, clean_samples, "clean")
    (k,), (mk,) = _check_counts(mitigated_correct, mitigated_samples, "mitigated")
    if k.size != c.size:
        raise ValueError(f"mitigated run covers {k.size} questions, the clean run {c.size}")
    rng = np.random.default_rng(seed)
    sims: dict[str, list] = {"sa_ppg": [], "a_ppg": []}
    for start in range(0, n_sim, _CHUNK):
        size = min(_CHUNK, n_sim - start)
        r_clean = rng.binomial(m, c / m, size=(size, c.size)) / m  # (C, N)
        gap = np.abs(rng.binomial(mk, k / mk, size=(size, k.size)) / mk - r_clean)
        stratum = strata(r_clean.ravel(), bins=bins).reshape(r_clean.shape)
        sims["sa_ppg"].append(_stratified_means(stratum, gap, bins))
        sims["a_ppg"].append(gap.mean(axis=1))
    observed = restoration_gaps(c / m, k / mk, bins=bins)
    out = {}
    for metric, chunks in sims.items():
        values = np.concatenate(chunks)
        low, high = _percentile_interval(values - values.mean(), level)
        estimate = float(getattr(observed, metric))
        out[metric] = Interval(estimate, float(estimate + np.sqrt(2) * low),
                               float(estimate + np.sqrt(2) * high), float(level))
    return out


def compare(boot: BootstrapGaps, a: str, b: str, *, metric: str = "sa_ppg") -> PairedComparison:
    """Paired comparison of strategies ``a`` and ``b`` on the same bootstrap replicates.

    The difference ``metric(a) - metric(b)`` is computed per replicate; the CI is its percentile
    interval, and the two-sided p-value tests "no difference" by how often the replicate
    differences, centred on the observed one, are at least as far from it as the observed
    difference is from zero: ``(1 + #{|d* - d| >= |d|}) / (1 + n_boot)``.

    Examples
    --------
    >>> boot = bootstrap_gaps([5, 0, 9, 2] * 20, [10] * 80,
    ...                       [[5, 0, 9, 2] * 20, [9, 9, 0, 9] * 20], [[10] * 80] * 2,
    ...                       names=["good", "bad"], n_boot=500, seed=0)
    >>> c = compare(boot, "good", "bad")
    >>> c.difference < 0 and c.high < 0 and c.p_value < 0.01
    True
    """
    ia, ib = boot._index(a), boot._index(b)
    if metric not in boot.replicates:
        raise ValueError(f"no bootstrap replicates for metric {metric!r}")
    reps = boot.replicates[metric]
    diff = reps[ia] - reps[ib]
    observed = getattr(boot.estimates[ia], metric) - getattr(boot.estimates[ib], metric)
    low, high = _percentile_interval(diff, boot.level)
    extreme = np.count_nonzero(np.abs(diff - observed) >= abs(observed) - 1e-12)
    p_value = (1 + extreme) / (1 + diff.size)
    return PairedComparison(a, b, metric, float(observed), low, high, float(p_value), boot.level)


def noise_floor(
    correct,
    samples,
    *,
    other_samples: int | None = None,
    bins: int = DEFAULT_BINS,
    n_sim: int = 2000,
    quantile: float = 0.95,
    prior: str = "jeffreys",
    seed: int = 0,
) -> NoiseFloor:
    """The gap two independent sample batches of the *same* model would read.

    Method: for each simulated pair, each question's true solve probability ``p`` is drawn
    (``prior="jeffreys"``: from the Beta(c + 1/2, m - c + 1/2) posterior given the observed
    counts; ``prior="plugin"``: ``p = c / m``), then two batches are drawn, ``c1 ~ Bin(m, p)``
    (playing the clean run, which defines the strata) and ``c2 ~ Bin(m', p)`` (playing a perfectly
    restored model, ``m' = other_samples`` or ``m``), and SA-PPG and A-PPG between them are
    computed. The result is the mean over simulations and the ``quantile`` upper point.

    Assumptions: samples are independent given the question (temperature sampling with per-row
    randomness), and the observed run is representative of the model. The plug-in prior puts
    zero noise on questions observed at 0/m or m/m, which understates the floor; the Jeffreys
    prior keeps some uncertainty there and is the default.

    Parameters
    ----------
    correct, samples : array-like of int, shape (n_questions,)
        Counts of the clean run.
    other_samples : int, optional
        Samples per question of the run to be compared (default: the clean run's own ``m``).

    Examples
    --------
    >>> floor = noise_floor([25] * 200, [50] * 200, n_sim=200, prior="plugin", seed=0)
    >>> 0.05 < floor.a_ppg < 0.13   # E|X - Y| / 50 for X, Y ~ Bin(50, 0.5) is about 0.08
    True
    """
    if prior not in ("jeffreys", "plugin"):
        raise ValueError(f"prior must be 'jeffreys' or 'plugin', got {prior!r}")
    _check_level(quantile)
    if not isinstance(n_sim, int | np.integer) or n_sim < 1:
        raise ValueError(f"n_sim must be a positive integer, got {n_sim!r}")
    if other_samples is not None and other_samples < 1:
        raise ValueError(f"other_samples must be positive, got {other_samples!r}")
    (c,), (m,) = _check_counts(correct, samples, "clean")
    m_other = m if other_samples is None else np.full_like(m, other_samples)
    rng = np.random.default_rng(seed)
    sa, aa = [], []
    for start in range(0, n_sim, _CHUNK):
        size = min(_CHUNK, n_sim - start)
        if prior == "jeffreys":
            p = rng.beta(c + 0.5, m - c + 0.5, size=(size, c.size))
        else:
            p = np.broadcast_to(c / m, (size, c.size))
        r1 = rng.binomial(m, p) / m
        r2 = rng.binomial(m_other, p) / m_other
        gap = np.abs(r2 - r1)
        stratum = strata(r1.ravel(), bins=bins).reshape(r1.shape)
        sa.append(_stratified_means(stratum, gap, bins))
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


VERDICT_OUTCOMES = ("restored", "not restored", "inconclusive")


@dataclass(frozen=True)
class Verdict:
    """Whether a strategy restored the clean model, as an equivalence test (beyond the paper).

    The tested quantity is the *excess* ``SA-PPG - floor``: how far the strategy's SA-PPG sits
    above what two independent batches of the clean model read (:func:`noise_floor`, mean).
    ``low`` and ``high`` are one-sided bounds of the excess at ``level`` each (normal
    approximation with the two-level bootstrap's standard error ``se``):

    * ``restored``: ``high < margin``, the excess is significantly below the margin (the
      one-sided test of a TOST; an excess below zero is sampling noise, never a failure);
    * ``not restored``: ``low > margin``, the excess is significantly above the margin;
    * ``inconclusive`` otherwise. ``needed_questions`` is how many questions (same m) would
      bring the bound to the margin's side the estimate is on, by ``se ∝ 1/sqrt(questions)``;
      ``needed_samples`` the m per question that would do it with the same questions, by
      shrinking only the sampling part of the variance (``se_samples² ∝ 1/m``), or None when
      the questions' own spread ``se_questions`` alone is already too wide.
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
    se_questions: float
    n_questions: int
    samples: int
    needed_questions: int | None = None
    needed_samples: int | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def sentence(self) -> str:
        """One line a reader can act on, with the test's meaning."""
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
    clean_correct,
    clean_samples,
    mitigated_correct,
    mitigated_samples,
    *,
    names: Sequence[str],
    margin: float = 0.05,
    level: float = 0.95,
    bins: int = DEFAULT_BINS,
    n_boot: int = 2000,
    n_sim: int = 2000,
    seed: int = 0,
) -> list[Verdict]:
    """Equivalence verdicts of several strategies against the clean run (see :class:`Verdict`).

    Two bootstraps over the same data give the standard errors: the question-level one
    (within strata, ``se_questions``) and the two-level one that also redraws every question's
    samples (``se``); their variances' difference is the part more samples would shrink. The
    floor is :func:`noise_floor` of the clean counts with the strategies' median m.

    Parameters
    ----------
    clean_correct, clean_samples : array-like of int, shape (n_questions,)
    mitigated_correct, mitigated_samples : array-like of int, shape (n_strategies, n_questions)
    names : sequence of str, length n_strategies
    margin : float, default=0.05
        Largest excess of SA-PPG over the noise floor still called restored.
    level : float, default=0.95
        Confidence of each one-sided bound (a TOST at ``alpha = 1 - level``).

    Returns
    -------
    list of Verdict, one per strategy, in ``names`` order.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p = rng.random(400)
    >>> clean, same = rng.binomial(50, p), rng.binomial(50, p)
    >>> far = rng.binomial(50, np.clip(p + 0.4, 0, 1))
    >>> v = restoration_verdicts(clean, [50] * 400, [same, far], [[50] * 400] * 2,
    ...                          names=["same", "far"], n_boot=300, n_sim=300)
    >>> [x.outcome for x in v]
    ['restored', 'not restored']
    """
    _check_level(level)
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    (clean_c,), (clean_m,) = _check_counts(clean_correct, clean_samples, "clean")
    mit_c, mit_m = _check_counts(mitigated_correct, mitigated_samples, "mitigated")
    common: dict[str, Any] = dict(names=names, bins=bins, n_boot=n_boot, level=level, seed=seed)
    plain = bootstrap_gaps(clean_c, clean_m, mit_c, mit_m, **common)
    two_level = bootstrap_gaps(clean_c, clean_m, mit_c, mit_m, within_questions=True, **common)
    z = NormalDist().inv_cdf(level)
    floors: dict[int, float] = {}  # by the strategies' m: one simulation serves all that share it
    out = []
    for k, name in enumerate(plain.names):
        m = int(np.median(mit_m[k]))
        if m not in floors:
            floors[m] = noise_floor(clean_c, clean_m, other_samples=m, bins=bins, n_sim=n_sim,
                                    seed=seed).sa_ppg
        floor = floors[m]
        sa = plain.estimates[k].sa_ppg
        se = float(np.std(two_level.replicates["sa_ppg"][k]))
        se_q = float(np.std(plain.replicates["sa_ppg"][k]))
        excess = sa - floor
        low, high = excess - z * se, excess + z * se
        outcome = ("restored" if high < margin
                   else "not restored" if low > margin else "inconclusive")
        needed_q = needed_m = None
        if outcome == "inconclusive":
            needed_q, needed_m = _needed(excess - margin, z, se, se_q, clean_c.size, m)
        out.append(Verdict(name, outcome, sa, floor, float(margin), excess, low, high,
                           float(level), se, se_q, int(clean_c.size), m, needed_q, needed_m))
    return out


def _needed(distance: float, z: float, se: float, se_q: float, n: int, m: int):
    """Questions (same m) and samples per question (same questions) that resolve a verdict.

    ``distance`` is excess - margin; the bound resolves once ``z * se' < |distance|``.
    """
    target = (abs(distance) / z) ** 2  # the variance that would resolve it
    if target == 0:
        return None, None
    questions = max(n + 1, math.ceil(n * se**2 / target))
    sampling = max(se**2 - se_q**2, 0.0)
    samples = None
    if se_q**2 < target and sampling > 0:
        samples = max(m + 1, math.ceil(m * sampling / (target - se_q**2)))
    return questions, samples
