"""A strategy's intervals: every restoration metric against one clean run, with its standard
error over new samples of the same questions (see :mod:`zerogap.uncertainty`).

SA-PPG and the other weighted-sum metrics are ``Σ_q w_q term_q``; with the questions fixed the
terms are independent, so the variance is ``Σ_q w_q² Var(term_q)``, each variance computed
exactly from two binomials (m may differ by question and by run) and averaged over the
question's empirical-Bayes posteriors (:mod:`zerogap.uncertainty.solve_prior`). The
:class:`GapIntervals` it returns also carries what the paired tests
(:mod:`zerogap.uncertainty.paired`) need: the per-question terms, the weights, the strata and
the swap patterns.

Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from statistics import NormalDist

import numpy as np

from zerogap.metrics import DEFAULT_BINS, restoration_gaps, solve_probability, strata
from zerogap.uncertainty.solve_prior import SolvePrior, binomial_likelihood, fit_solve_prior
from zerogap.uncertainty.stratification import strata_variances

MIN_QUESTIONS = 12
"""Fewest questions for which intervals and verdicts are stated (the smallest N the calibration
suite checks); below it they read "too few questions"."""

QUESTIONS_PER_BIN = 26
"""The paper's B = 50 on GSM8K's 1,319 questions is about 26 questions per stratum; the default
B keeps that ratio (see :func:`choose_bins`)."""

# Replicates per chunk of the noise-floor simulation, and sign patterns per matrix product.
_CHUNK = 1000

LINEAR_METRICS = ("a_ppg", "delta_plus", "delta_minus", "sa_ppg", "s_delta_plus",
                  "s_delta_minus")
"""Metrics that are weighted sums of per-question terms (the others are |mean Δ|)."""
STRATIFIED = ("sa_ppg", "s_delta_plus", "s_delta_minus")
_PART = {"a_ppg": "abs", "delta_plus": "plus", "delta_minus": "minus",
         "sa_ppg": "abs", "s_delta_plus": "plus", "s_delta_minus": "minus"}
# Each linear metric's per-question term as a function of Δ (paper eq. 5, 9, 10, 13).
_PART_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs, "plus": lambda d: np.maximum(d, 0.0), "minus": lambda d: np.maximum(-d, 0.0)}
# And its slope in Δ, for the part of a pair's covariance that their shared noise adds.
_PART_SLOPES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.sign, "plus": lambda d: (d > 0).astype(float),
    "minus": lambda d: -(d < 0).astype(float)}


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

    def bounds(self) -> str:
        """``[low, high]`` to three decimals, or ``(reason)`` where no interval exists: a
        report says why, never ``[nan, nan]``.

        >>> Interval(0.1, 0.05, 0.2, 0.95).bounds(), Interval(0.1, math.nan, math.nan, 0.95,
        ...                                                    too_few(5)).bounds()
        ('[0.050, 0.200]', '(too few questions (5 < 12) for a calibrated statement)')
        """
        if self.reason is not None:
            return f"({self.reason})"
        return f"[{self.low:.3f}, {self.high:.3f}]"

    def to_dict(self) -> dict:
        if self.reason is not None:
            return {"estimate": self.estimate, "low": None, "high": None, "level": self.level,
                    "reason": self.reason}
        return {"estimate": self.estimate, "low": self.low, "high": self.high,
                "level": self.level}


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


def _per_question(values, n: int, name: str) -> np.ndarray:
    """(N,) positive whole numbers from one number or one per question."""
    arr = np.asarray(values)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.size != n):
        raise ValueError(f"{name} must be one number or one per question ({n}), "
                         f"got shape {arr.shape}")
    if arr.dtype.kind not in "iu" or np.any(arr < 1):
        raise ValueError(f"{name} must be positive whole numbers, got {values!r}")
    return np.broadcast_to(arr, (n,)).astype(np.int64)


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
        for key, part in _PART_FUNCTIONS.items():
            f = part(delta)
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


def _part_covariances(a: SolvePrior, b: SolvePrior, clean: SolvePrior, part: str,
                      shared: np.ndarray | None = None) -> np.ndarray:
    """(N,) each question's expected covariance of strategy a's and b's terms ``f(Δ)``.

    The two terms share the clean count ``Y``; given the three solve probabilities and apart
    from ``shared``, a's and b's counts are independent, so the covariance is that of
    ``g_a(Y)`` and ``g_b(Y)``, with ``g_k(y) = E f(X_k / m_k - y / m_clean)``. Averaged over the
    three (independent) posteriors it is ``E_p'[Cov_Y(ḡ_a(Y), ḡ_b(Y))]``, with ``ḡ_k`` the
    posterior average of ``g_k``: one (m_clean + 1)-vector per question and strategy, for every
    question with the same three m.

    ``shared`` (N,) is ``Cov(X_a / m, X_b / m)`` where the strategies share noise
    (:func:`shared_noise`); given Y it adds :func:`_shared_part`'s covariance of the terms.
    """
    grid, f = clean.grid, _PART_FUNCTIONS[part]
    m_a, m_b = a.counts[a.group, 1], b.counts[b.group, 1]
    m_c = clean.counts[clean.group, 1]
    posteriors = a.posterior, b.posterior, clean.posterior  # (N, G) each
    out = np.zeros(m_c.size)
    for ma, mb, mc in np.unique(np.stack([m_a, m_b, m_c], axis=1), axis=0):
        members = np.flatnonzero((m_a == ma) & (m_b == mb) & (m_c == mc))
        y = np.arange(mc + 1) / mc
        pmf_c = binomial_likelihood(np.arange(mc + 1), np.full(mc + 1, mc), grid)  # (C, G)
        predictive, mean_terms = [], []
        for m, posterior in ((ma, posteriors[0]), (mb, posteriors[1])):
            pmf = binomial_likelihood(np.arange(m + 1), np.full(m + 1, m), grid)  # (M, G)
            predictive.append(posterior[members] @ pmf.T)  # (n, M) X_k's predictive pmf
            mean_terms.append(predictive[-1] @ f(np.arange(m + 1)[:, None] / m - y[None, :]))
        both = (mean_terms[0] * mean_terms[1]) @ pmf_c  # (n, G) E_Y[ḡ_a ḡ_b | p']
        apart = (mean_terms[0] @ pmf_c) * (mean_terms[1] @ pmf_c)
        given_y = both - apart
        if shared is not None and ma == mb:  # noise is paired by index only at one m
            given_y = given_y + _shared_part(part, predictive, y, shared[members],
                                             (a.posterior[members], b.posterior[members]),
                                             grid) @ pmf_c
        out[members] = (given_y * posteriors[2][members]).sum(axis=1)
    return out


def _shared_part(part: str, predictive: list[np.ndarray], y: np.ndarray, shared: np.ndarray,
                 posteriors: tuple[np.ndarray, np.ndarray], grid: np.ndarray) -> np.ndarray:
    """(n, C) ``Cov(f(X_a / m - y), f(X_b / m - y))`` from the noise a and b share, for each
    clean readout y, given ``shared = Cov(X_a / m, X_b / m)`` (n,) and the counts' predictive
    pmfs (n, M + 1) each.

    For a smooth f the covariance is ``E[f'_a f'_b] · shared``; f has a kink at Δ = 0, and for
    a Gaussian pair of correlation ρ ``Cov(f(U), f(V)) = sd_U sd_V ∫_0^ρ E_t[f'(U) f'(V)] dt``,
    the slopes' product moving from its value when independent (``E_0``, the product of the
    expected slopes) towards its value when comonotone (``E_1``, the pmfs coupled by their
    quantiles). The integral is read by the trapezoid rule with ``E_ρ ≈ E_0 + ρ (E_1 - E_0)``,
    and kept within ``ρ sd(f_a) sd(f_b)``, which no function of a Gaussian pair passes
    (Gebelein's maximal correlation): at ρ = 1 and one distribution that is the covariance of a
    term with itself, its variance, which the trapezoid alone overstates where Δ straddles 0.
    A negative ``shared`` (noise, since shared noise correlates the samples positively) keeps
    the plain ``E_0 · shared``.
    """
    f, slope = _PART_FUNCTIONS[part], _PART_SLOPES[part]
    m = predictive[0].shape[1] - 1
    delta = np.arange(m + 1)[:, None] / m - y[None, :]  # (M, C)
    values, slopes = f(delta), slope(delta)
    e0 = (predictive[0] @ slopes) * (predictive[1] @ slopes)  # (n, C)
    sd = [np.sqrt(np.maximum(p @ (values * values) - (p @ values) ** 2, 0.0))
          for p in predictive]
    v = [post @ (grid * (1 - grid)) for post in posteriors]
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.clip(np.nan_to_num(shared * m / np.sqrt(v[0] * v[1])), 0.0, 1.0)[:, None]
    # The quantile coupling: the segments of [0, 1] between both CDFs' steps, each mapping to
    # one pair (x_a, x_b).
    cdfs = [np.cumsum(p, axis=1) for p in predictive]  # (n, M)
    steps = np.sort(np.concatenate(cdfs, axis=1), axis=1)  # (n, 2M)
    lengths = np.diff(steps, axis=1, prepend=0.0)
    middle = steps - lengths / 2
    xa, xb = ((cdf[:, None, :] < middle[:, :, None]).sum(axis=2).clip(max=m) for cdf in cdfs)
    e1 = np.einsum("ns,nsc->nc", lengths, slopes[xa] * slopes[xb])
    trapezoid = (e0 + (e0 + rho * (e1 - e0))) / 2 * shared[:, None]
    capped = np.minimum(trapezoid, rho * sd[0] * sd[1])
    return np.where(shared[:, None] < 0, e0 * shared[:, None], capped)


def shared_noise(joint, correct_a, correct_b, samples_a, samples_b,
                 prior_a: SolvePrior, prior_b: SolvePrior) -> np.ndarray:
    """(N,) ``Cov(X_a / m_a, X_b / m_b)`` of two strategies' readouts, read from their samples
    paired by index.

    Every strategy samples on the study's seed and the engine keys its noise by (seed,
    question, sample index), so a's and b's j-th samples agree until one of them intervenes:
    their 0/1 outcomes are correlated, the more so the later and the rarer the intervention.
    ``joint`` (N,) counts the indices j < m at which both solved the question; where both were
    sampled m times, one sample's covariance is estimated without bias by
    ``(joint - X_a X_b / m) / (m - 1)`` and the readouts' covariance is that over m. It is kept
    within ± ``sqrt(v_a v_b)`` (each strategy's posterior E[p (1 - p)]), which a covariance
    cannot leave; questions sampled once, or at different m, count as independent (0).
    """
    joint, xa, xb = (np.asarray(v, float) for v in (joint, correct_a, correct_b))
    ma, mb = np.asarray(samples_a, float), np.asarray(samples_b, float)
    paired = _check_joint(joint, xa, xb, ma, mb)
    m = np.where(paired, ma, 2.0)
    one = np.where(paired, (joint - xa * xb / m) / (m - 1), 0.0)
    bound = np.sqrt(_bernoulli_mean(prior_a) * _bernoulli_mean(prior_b))
    return np.clip(one, -bound, bound) / m


def _check_joint(joint, xa, xb, ma, mb) -> np.ndarray:
    """(N,) bool: the questions both strategies sampled m > 1 times, whose paired counts
    ``joint`` are then held to what samples can give: between max(0, X_a + X_b - m) and
    min(X_a, X_b) (ValueError otherwise). Arguments (N,) float."""
    paired = (ma == mb) & (ma > 1)
    if np.any(paired & ((joint < xa + xb - ma) | (joint > np.minimum(xa, xb)) | (joint < 0))):
        raise ValueError("joint counts must lie between max(0, X_a + X_b - m) and "
                         "min(X_a, X_b) on every question both strategies sampled m times")
    return paired


def _bernoulli_mean(prior: SolvePrior) -> np.ndarray:
    """(N,) each question's expected one-sample variance E[p (1 - p)] under its posterior."""
    return prior.posterior @ (prior.grid * (1 - prior.grid))


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
    single draws are kept for :func:`~zerogap.uncertainty.paired.compare`; the empirical-Bayes
    priors of the clean and each mitigated run, and each strategy's per-question variances
    (:func:`_part_variances`), and ``shared`` (K, K, N), the covariance of each pair's
    readouts from noise they share (:func:`shared_noise`; None: independent), for
    :func:`difference_interval`; ``strata_extra`` ``{part: (K, K)}`` the variance the strata
    add to the stratified metrics and their differences
    (:func:`~zerogap.uncertainty.stratification.strata_variances`).
    """

    names: tuple[str, ...]
    estimates: tuple
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
    # The counts behind r_clean (N,) and r_mitigated (K, N): (correct, samples) each.
    clean_counts: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    mitigated_counts: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    bins: int = DEFAULT_BINS
    # (K, K, N): the questions' counts of sample indices both strategies of a pair solved, or
    # None where the runs were not paired by sample index (then independent).
    joint_correct: np.ndarray | None = field(default=None, repr=False)

    # The priors, variances, the strata's and the shared noise's terms and the standard errors
    # are computed when first asked for: the paired tests under the weak null need none of them,
    # and the findings' simulations (tests/analysis/test_findings_simulated.py) run thousands
    # of those tests.
    @cached_property
    def prior_clean(self) -> SolvePrior:
        if self.clean_counts is None:
            raise ValueError("these intervals carry no counts: build them with gap_intervals")
        return fit_solve_prior(*self.clean_counts)

    @cached_property
    def prior_mitigated(self) -> tuple[SolvePrior, ...]:
        if self.mitigated_counts is None:
            raise ValueError("these intervals carry no counts: build them with gap_intervals")
        correct, samples = self.mitigated_counts
        return tuple(fit_solve_prior(c, m) for c, m in zip(correct, samples, strict=True))

    @cached_property
    def variances(self) -> tuple[dict[str, np.ndarray], ...]:
        """Each strategy's per-question variances (:func:`_part_variances`)."""
        return tuple(_part_variances(prior, self.prior_clean) for prior in self.prior_mitigated)

    @cached_property
    def strata_extra(self) -> dict[str, np.ndarray]:
        """``{part: (K, K)}``: the variance the strata add to the stratified metrics and their
        differences (:func:`~zerogap.uncertainty.stratification.strata_variances`)."""
        if self.clean_counts is None or self.mitigated_counts is None:
            raise ValueError("these intervals carry no counts: build them with gap_intervals")
        return strata_variances(self.r_clean, self.clean_counts[1], self.r_mitigated,
                                self.mitigated_counts[1], self.weights, self.bins,
                                _PART_FUNCTIONS, self.seed)

    @cached_property
    def shared(self) -> np.ndarray | None:
        """(K, K, N): the covariance of each pair's readouts from the noise they share
        (:func:`shared_noise`); None where the runs are taken as independent."""
        if self.joint_correct is None or self.mitigated_counts is None:
            return None
        correct, samples = self.mitigated_counts
        priors = self.prior_mitigated
        out = np.zeros(self.joint_correct.shape)
        for a in range(len(self.names)):
            for b in range(a + 1, len(self.names)):
                out[a, b] = out[b, a] = shared_noise(
                    self.joint_correct[a, b], correct[a], correct[b], samples[a], samples[b],
                    priors[a], priors[b])
        return out

    @cached_property
    def se(self) -> dict[str, np.ndarray]:
        """``se[metric]`` (K,): the standard errors of the linear metrics and of the signed
        mean Δ behind G-APP (``"mean_delta"``) and G-AP (``"mean_draw"``)."""
        n, k_count = self.n_questions, len(self.names)
        out = {key: np.zeros(k_count) for key in (*LINEAR_METRICS, "mean_delta", "mean_draw")}
        for k, var in enumerate(self.variances):
            for metric in LINEAR_METRICS:
                w = self.weights if metric in STRATIFIED else np.full(n, 1.0 / n)
                extra = self.strata_extra[_PART[metric]][k, k] if metric in STRATIFIED else 0.0
                out[metric][k] = math.sqrt(float(w**2 @ var[_PART[metric]]) + extra)
            out["mean_delta"][k] = math.sqrt(float(var["delta"].sum())) / n
            if self.draw_mitigated is not None:
                out["mean_draw"][k] = math.sqrt(float(var["draw"].sum())) / n
        return out

    @property
    def n_questions(self) -> int:
        return int(self.r_clean.size)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"unknown strategy {name!r}; have {', '.join(self.names)}") from None

    def interval(self, name: str, metric: str) -> Interval:
        """``metric`` of strategy ``name`` with its interval (see :mod:`zerogap.uncertainty`)."""
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
    joint_correct=None,
) -> GapIntervals:
    """Every restoration metric of one or more strategies against one clean run, with intervals.

    Intervals are for the metric's expectation over new samples of these questions (see
    :mod:`zerogap.uncertainty`): estimate ± z · se, where se² sums each question's squared
    weight times the exact variance of its term under binomials, averaged over its
    empirical-Bayes posteriors (clean and mitigated priors fitted separately), and for the
    stratified metrics adds the variance of the strata themselves, which a new clean batch
    redraws (:mod:`~zerogap.uncertainty.stratification`, simulated on ``seed``). For
    G-APP = |mean Δ| and G-AP the interval of the signed mean is folded onto |·|.
    ``n_resamples`` is the number of swap patterns :func:`~zerogap.uncertainty.paired.compare`
    uses (all of them, when 2^N is fewer).

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
    joint_correct : array-like of int, shape (n_strategies, n_strategies, n_questions), optional
        ``[a, b, q]``: the sample indices at which strategies a and b both solved question q
        (samples paired by index, as the engine's noise is keyed). When given, the difference
        intervals count the noise the strategies share (:func:`shared_noise`); without it
        their samples are taken as independent, which overstates a difference's variance
        when they share a seed.

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
    signed = {"mean_delta": (r_mit - r_clean).mean(axis=1), "mean_draw": np.zeros(n_strategies)}
    joint = None
    if joint_correct is not None:
        joint = np.asarray(joint_correct)
        if joint.shape != (n_strategies, n_strategies, n):
            raise ValueError(f"joint_correct must have shape {(n_strategies, n_strategies, n)}, "
                             f"got {joint.shape}")
        counts, samples = np.asarray(mit_c, float), np.asarray(mit_m, float)
        for a in range(n_strategies):
            for b in range(a + 1, n_strategies):
                _check_joint(joint[a, b].astype(float), counts[a], counts[b], samples[a],
                             samples[b])
    if draws_m is not None and draws_c is not None:
        signed["mean_draw"] = (draws_m - draws_c).mean(axis=1)
    gaps = GapIntervals(
        names=names, estimates=estimates, level=float(level), n_resamples=int(n_resamples),
        seed=int(seed), r_clean=r_clean, r_mitigated=r_mit, weights=weights, stratum=stratum,
        draw_clean=draws_c, draw_mitigated=draws_m, signed=signed,
        clean_counts=(clean_c, clean_m), mitigated_counts=(mit_c, mit_m), bins=bins,
        joint_correct=joint,
    )
    return gaps


def difference_interval(gaps: GapIntervals, a: str, b: str, *,
                        metric: str = "sa_ppg") -> Interval:
    """``metric(a) - metric(b)`` on these questions, with its interval over new samples.

    The reading of :meth:`GapIntervals.interval`, for a difference: the benchmark is taken as
    given and the interval is for the difference's expectation over new samples of the clean
    model and both strategies, each question at the m it was sampled with (which may differ by
    question, as an allocated study's do, :mod:`zerogap.uncertainty.allocation`). For a
    weighted-sum metric ``Σ_q w_q (t_a(q) - t_b(q))`` the variance is
    ``Σ_q w_q² (Var t_a + Var t_b - 2 Cov(t_a, t_b))``, each term exact under binomials and
    averaged over the empirical-Bayes posteriors; the covariance comes from the clean count the
    two terms share and, where ``gap_intervals`` was given the paired outcomes, from the noise
    the strategies share (:func:`shared_noise`). The interval is the difference ± z · se.

    :func:`~zerogap.uncertainty.paired.compare` answers another question (are a and b equal
    question by question, or on average over a new draw of questions), and its intervals are
    for that one.

    Parameters
    ----------
    gaps : GapIntervals
    a, b : str
        Strategy names.
    metric : str, default="sa_ppg"
        One of the weighted-sum metrics (``LINEAR_METRICS``).

    Returns
    -------
    Interval

    Examples
    --------
    >>> gaps = gap_intervals([5, 0, 9, 2] * 5, [10] * 20,
    ...                      [[5, 3, 9, 0] * 5, [9, 9, 9, 9] * 5], [[10] * 20] * 2,
    ...                      names=["railcap", "identity"])
    >>> ci = difference_interval(gaps, "railcap", "identity")
    >>> round(ci.estimate, 4), ci.low < ci.estimate < ci.high < 0
    (-0.375, True)
    """
    if metric not in LINEAR_METRICS:
        raise ValueError(f"metric must be one of {', '.join(LINEAR_METRICS)}, got {metric!r}")
    ia, ib = gaps.index(a), gaps.index(b)
    estimate = float(getattr(gaps.estimates[ia], metric) - getattr(gaps.estimates[ib], metric))
    if gaps.n_questions < MIN_QUESTIONS:
        return Interval(estimate, math.nan, math.nan, gaps.level, too_few(gaps.n_questions))
    if ia == ib:  # the same samples: no difference to vary
        return Interval(0.0, 0.0, 0.0, gaps.level)
    part = _PART[metric]
    variance = (gaps.variances[ia][part] + gaps.variances[ib][part]
                - 2 * _part_covariances(gaps.prior_mitigated[ia], gaps.prior_mitigated[ib],
                                        gaps.prior_clean, part,
                                        None if gaps.shared is None else gaps.shared[ia, ib]))
    n = gaps.n_questions
    w = gaps.weights if metric in STRATIFIED else np.full(n, 1.0 / n)
    extra = gaps.strata_extra[part][ia, ib] if metric in STRATIFIED and gaps.strata_extra \
        else 0.0
    se = math.sqrt(max(float(w**2 @ variance), 0.0) + extra)
    z = NormalDist().inv_cdf(0.5 + gaps.level / 2)
    return Interval(estimate, estimate - z * se, estimate + z * se, gaps.level)


def _terms(gaps: GapIntervals, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(N,) strategy k's per-question term of a linear metric, and (N,) the metric's weights."""
    delta = gaps.r_mitigated[k] - gaps.r_clean
    part = _PART[metric]
    term = (np.abs(delta) if part == "abs" else np.maximum(delta, 0) if part == "plus"
            else np.maximum(-delta, 0))
    n = gaps.n_questions
    return term, gaps.weights if metric in STRATIFIED else np.full(n, 1.0 / n)


def _signed_deltas(gaps: GapIntervals, k: int) -> dict[str, np.ndarray]:
    """(N,) strategy k's signed per-question Δ behind G-APP, and behind G-AP when drawn."""
    out = {"g_app": gaps.r_mitigated[k] - gaps.r_clean}
    if gaps.draw_mitigated is not None and gaps.draw_clean is not None:
        out["g_ap"] = gaps.draw_mitigated[k] - gaps.draw_clean
    return out
