"""Allocation by design: how many samples each question gets, so that SA-PPG and the paired
differences reach a given precision with fewer samples than a uniform m (see
docs/uncertainty.md, "Allocated studies").

SA-PPG (paper §3.3, eq. 13) weighs question q by ``w_q = 1 / (|B| |D_b|)``: a question alone in
its stratum of the clean solve probability counts as much as the whole stratum of questions the
clean model never solves. With the questions fixed, a strategy's SA-PPG has variance
``Σ_q w_q² σ_q² / m_q``, σ_q² being one sample's variance of the question's term, and a paired
difference the same with both strategies' σ² summed. For a total of ``Σ m_q`` samples this is
smallest when ``m_q ∝ w_q σ_q`` (Neyman's allocation of a stratified sample, 1934, with each
question a stratum of its own): :func:`allocate_samples` computes that rule.

What it rests on, and what a study must keep to for its estimates to stay unbiased:

* **The clean reference batch is allocated upward only.** Its c/m defines the strata; fewer
  than the study's m would change which strata a question can reach (at m = 4 only five of
  B = 50). It is shared by every strategy's term, so with ``reference_strategies`` (K, the
  strategies sharing it) it gets ``r_q = max(m, m_q √K σ_clean,q / σ_q)`` (Neyman's rule with a
  reference sample costing one and a strategy sample costing K, one for each strategy): more
  on the questions that weigh most, those alone in their stratum.
* **The strategies share one m per question.** The sampling inflation of ``|Δ|`` depends on m;
  with a common m, two strategies equal in distribution read the same expected SA-PPG, so
  paired differences compare like with like and the swap test stays exact.
* **The allocation comes from data the estimate does not reuse** (a two-stage design whose
  first stage is a pilot): the weights from an independent batch of the clean model (the
  study's second batch) and, when given, the spread from a pilot of each strategy drawn on a
  seed of its own. Given the allocation, every count the estimate uses is then Binomial(m_q, p_q)
  with m_q fixed, so ``c / m`` is unbiased for each solve probability and every interval and
  paired test holds as in any study with m differing by question. The target of inference is
  SA-PPG's expectation at the allocated m, as a uniform study's is its expectation at its m.

The weights are those the reference batch is expected to give: from the clean batch's
empirical-Bayes posteriors (:mod:`~zerogap.uncertainty.solve_prior`), each question's chance
of landing in each stratum. The spread is ``sqrt(Σ_k E[p_k (1 - p_k)])`` over the strategies'
pilot posteriors, or 1 for every question without a pilot (then every stratum gets an equal
share of the samples). A pilot also gives predicted half-widths (delta method, both strategies'
and the clean model's binomial noise, and the noise two strategies share: the pilots sample on
one seed, so their outcomes paired by sample index give it), which a target half-width needs.

Pure numpy. Shapes: ``N`` questions, ``K`` strategies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from zerogap.metrics import DEFAULT_BINS, strata
from zerogap.uncertainty.intervals import (
    _bernoulli_mean,
    _check_counts,
    _check_level,
    _per_question,
    shared_noise,
)
from zerogap.uncertainty.solve_prior import SolvePrior, binomial_likelihood, fit_solve_prior

# Bisection steps on the allocation's scale: enough halvings to pin its boundary to floats.
_STEPS = 200
# What _uniform_equivalent answers where no uniform m of the strategies reaches a variance (an
# allocated reference batch can pass what one at m allows).
_NEVER = 1 << 62


@dataclass(frozen=True)
class Allocation:
    """Every strategy's samples per question, and what the rule saw.

    ``samples`` (N,) each strategy's m for each question (the same for every strategy);
    ``reference`` (N,) the clean reference batch's m for each question (the study's m unless
    it was allocated upward); ``weights`` (N,) each question's expected SA-PPG weight;
    ``spread`` (N,) the per-sample standard deviation the rule used (1 everywhere without a
    pilot). With a pilot, ``half_widths`` holds the predicted half-width (at ``level``, the
    questions fixed) of each strategy's SA-PPG and of each pair's difference (``"a - b"``), and
    ``uniform_samples`` the uniform m of the strategies (the reference at the study's m) whose
    largest predicted half-width is the same as this allocation's (None where none does: an
    allocated reference batch can pass what one at m allows).
    """

    samples: np.ndarray = field(repr=False)
    reference: np.ndarray = field(repr=False)
    weights: np.ndarray = field(repr=False)
    spread: np.ndarray = field(repr=False)
    level: float
    half_widths: dict[str, float] = field(default_factory=dict)
    uniform_samples: int | None = None

    @property
    def mean_samples(self) -> float:
        """Mean samples per question and strategy: what ``budget`` bounds."""
        return float(self.samples.mean())

    def to_dict(self) -> dict:
        return {"samples": self.samples.tolist(), "reference": self.reference.tolist(),
                "mean_samples": self.mean_samples,
                "level": self.level, "half_widths": dict(self.half_widths),
                "uniform_samples": self.uniform_samples}


def allocate_samples(
    clean_correct,
    clean_samples,
    pilot_correct=None,
    pilot_samples=None,
    pilot_joint=None,
    *,
    budget: float | None = None,
    target_half_width: float | None = None,
    names=None,
    bins: int = DEFAULT_BINS,
    level: float = 0.95,
    min_samples: int = 1,
    max_samples: int | None = None,
    reference_samples=None,
    reference_strategies: int | None = None,
) -> Allocation:
    """Samples per question for every strategy, ``m_q ∝ w_q σ_q`` within a budget or a target.

    Parameters
    ----------
    clean_correct, clean_samples : array-like of int, shape (n_questions,)
        A batch of the clean model that the estimate will not score (the study's second batch):
        it places the questions in strata.
    pilot_correct, pilot_samples : array-like of int, shape (n_strategies, n_questions), optional
        A first stage of each strategy, drawn on a seed the estimate does not use; it gives each
        question's spread and the predicted half-widths. Without it every question has spread 1.
    pilot_joint : array-like of int, shape (n_strategies, n_strategies, n_questions), optional
        The pilots' paired outcomes (``[a, b, q]``: sample indices at which a and b both solved
        q, as :func:`~zerogap.uncertainty.gap_intervals` takes them): the pairs' predicted
        half-widths then count the noise the strategies share instead of taking it as
        independent.
    budget : float, optional
        Mean samples per question and strategy that the allocation may spend (at most).
    target_half_width : float, optional
        Instead of a budget: the fewest samples whose largest predicted half-width (each
        strategy's SA-PPG and each pair's difference) is at most this. Needs a pilot.
    names : sequence of str, optional
        Strategy names for ``half_widths``; default ``"s0", "s1", ...``.
    bins : int, default=50
    level : float, default=0.95
    min_samples, max_samples : int, optional
        Bounds on any question's samples (default 1 and none).
    reference_samples : int or array-like of int, shape (n_questions,), optional
        m of the clean batch that will be scored (default: ``clean_samples``), or, with
        ``reference_strategies``, the least it gets.
    reference_strategies : int, optional
        Allocate the clean reference batch upward as well, for this many strategies sharing
        it (see the module's notes); by default it keeps ``reference_samples``.

    Returns
    -------
    Allocation

    Examples
    --------
    A clean model that never solves 80 of 100 questions and spreads the other 20: the lone
    questions of the upper strata get the samples.

    >>> rng = np.random.default_rng(0)
    >>> p = np.r_[np.zeros(80), np.linspace(0.05, 0.95, 20)]
    >>> plan = allocate_samples(rng.binomial(20, p), [20] * 100, budget=10, bins=10)
    >>> plan.mean_samples <= 10, int(plan.samples[:80].max()), int(plan.samples[-10:].min())
    (True, 2, 45)

    With a pilot of two strategies, a target half-width and what uniform m would cost for it:

    >>> pilot = rng.binomial(4, np.stack([p, np.maximum(p, 0.5)]))
    >>> plan = allocate_samples(rng.binomial(20, p), [20] * 100, pilot, [[4] * 100] * 2,
    ...                         target_half_width=0.06, names=["a", "b"], bins=10)
    >>> max(plan.half_widths.values()) <= 0.06, plan.mean_samples < plan.uniform_samples
    (True, True)
    """
    if (budget is None) == (target_half_width is None):
        raise ValueError("give exactly one of budget and target_half_width")
    _check_level(level)
    min_samples, max_samples = _check_bounds(min_samples, max_samples)
    if budget is not None and (isinstance(budget, bool)
                               or not isinstance(budget, int | float | np.number)
                               or not min_samples <= budget):
        raise ValueError(f"budget must be a number of at least min_samples ({min_samples}), "
                         f"got {budget!r}")
    if target_half_width is not None and (isinstance(target_half_width, bool)
                                          or not isinstance(target_half_width,
                                                            int | float | np.number)
                                          or not target_half_width > 0):
        raise ValueError(f"target_half_width must be positive, got {target_half_width!r}")
    (c,), (m,) = _check_counts(clean_correct, clean_samples, "clean")
    n = c.size
    m_ref = m if reference_samples is None else _per_question(reference_samples, n,
                                                               "reference_samples")
    if reference_strategies is not None and (
            isinstance(reference_strategies, bool)
            or not isinstance(reference_strategies, int | np.integer) or reference_strategies < 1):
        raise ValueError(f"reference_strategies must be a positive integer, got "
                         f"{reference_strategies!r}")
    clean_prior = fit_solve_prior(c, m)
    weights = _expected_weights(clean_prior, m_ref, bins)
    priors: list[SolvePrior] = []
    if (pilot_correct is None) != (pilot_samples is None):
        raise ValueError("give both pilot_correct and pilot_samples, or neither")
    if pilot_correct is not None:
        pilot_c, pilot_m = _check_counts(pilot_correct, pilot_samples, "pilot")
        if pilot_c.shape[1] != n:
            raise ValueError(f"the pilot covers {pilot_c.shape[1]} questions but the clean "
                             f"batch covers {n}")
        priors = [fit_solve_prior(pilot_c[k], pilot_m[k]) for k in range(pilot_c.shape[0])]
    shared = _pilot_shared(pilot_joint, pilot_correct, pilot_samples, priors)
    names = _names(names, len(priors))
    spread = (np.sqrt(sum(_bernoulli_mean(prior) for prior in priors)) if priors
              else np.ones(n))
    score = weights * spread
    # Reference samples per strategy sample on each question: √K σ_clean / σ, where σ is one
    # strategy's sd: the pilots' mean variance, spread / √P for P pilots (P need not be K: a
    # study pilots a filter that samples nothing of its own); without a pilot, the clean
    # model's own.
    ratio = None
    if reference_strategies is not None:
        ratio = np.full(n, math.sqrt(reference_strategies))
        if priors:
            ratio = np.divide(math.sqrt(reference_strategies * len(priors))
                              * np.sqrt(_bernoulli_mean(clean_prior)),
                              spread, out=np.zeros(n), where=spread > 0)

    def reference_at(alloc: np.ndarray) -> np.ndarray:
        return m_ref if ratio is None else np.maximum(m_ref, np.floor(alloc * ratio + 0.5)
                                                      ).astype(np.int64)

    targets = _targets(weights, clean_prior, priors, names, shared)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    if budget is not None:
        samples = _scaled(score, min_samples, max_samples,
                          lambda alloc: alloc.mean() <= budget)
    else:
        samples = _to_target(score, targets, target_half_width, z, min_samples, max_samples,
                             reference_at, None if ratio is not None else m_ref)
    reference = reference_at(samples)
    half_widths, uniform = {}, None
    if targets:
        variances = _variances(targets, samples, reference)
        half_widths = {key: z * math.sqrt(v) for key, v in variances.items()}
        uniform = _uniform_equivalent(targets, max(variances.values()), m_ref)
        uniform = None if uniform == _NEVER else uniform
    return Allocation(samples, reference, weights, spread, float(level), half_widths, uniform)


def _pilot_shared(joint, correct, samples, priors: list[SolvePrior]) -> dict:
    """``{(a, b): (N,) Cov(X_a / m, X_b / m)}`` of each pair of pilots, from their outcomes
    paired by sample index, times m: one sample's covariance (empty without ``joint``)."""
    if joint is None:
        return {}
    if not priors:
        raise ValueError("pilot_joint needs the pilot's counts")
    joint = np.asarray(joint)
    k, n = len(priors), priors[0].group.size
    if joint.shape != (k, k, n):
        raise ValueError(f"pilot_joint must have shape {(k, k, n)}, got {joint.shape}")
    c, m = (np.asarray(v) for v in (correct, samples))
    return {(a, b): m[a] * shared_noise(joint[a, b], c[a], c[b], m[a], m[b], priors[a],
                                        priors[b])
            for a in range(k) for b in range(a + 1, k)}


def _to_target(score, targets, target_half_width, z, low, high, reference_at, fixed
               ) -> np.ndarray:
    """The smallest scaled allocation whose largest predicted half-width is at most the target
    (the reference batch at ``reference_at`` of it; ``fixed``: its m when not allocated)."""
    if not targets:
        raise ValueError("target_half_width needs pilot counts of the strategies: without "
                         "them their variance is unknown")
    limit = (target_half_width / z) ** 2

    def reached(alloc: np.ndarray) -> bool:
        return max(_variances(targets, alloc, reference_at(alloc)).values()) <= limit

    # However many samples the strategies get, a fixed clean batch's own noise remains.
    remains = 0.0 if fixed is None else max(float((clean / fixed).sum())
                                            for _, clean in targets.values())
    if remains >= limit:
        raise ValueError(f"target_half_width {target_half_width} is out of reach: the clean "
                         f"batch's own noise gives {z * math.sqrt(remains):.4f}")
    if high is not None:
        capped = np.where(score > 0, high, low).astype(np.int64)
        if not reached(capped):
            best = z * math.sqrt(max(_variances(targets, capped,
                                                reference_at(capped)).values()))
            raise ValueError(f"target_half_width {target_half_width} is out of reach with "
                             f"max_samples = {high}: the narrowest is {best:.4f}")
    return _scaled(score, low, high, lambda alloc: not reached(alloc), first_true=True)


def _check_bounds(min_samples, max_samples) -> tuple[int, int | None]:
    if isinstance(min_samples, bool) or not isinstance(min_samples, int | np.integer) \
            or min_samples < 1:
        raise ValueError(f"min_samples must be a positive integer, got {min_samples!r}")
    if max_samples is not None and (isinstance(max_samples, bool)
                                    or not isinstance(max_samples, int | np.integer)
                                    or max_samples < min_samples):
        raise ValueError(f"max_samples must be an integer of at least min_samples "
                         f"({min_samples}), got {max_samples!r}")
    return int(min_samples), None if max_samples is None else int(max_samples)


def _names(names, k: int) -> tuple[str, ...]:
    out = tuple(names) if names is not None else tuple(f"s{i}" for i in range(k))
    if len(out) != k:
        raise ValueError(f"{len(out)} names for {k} strategies in the pilot")
    return out


def _expected_weights(prior: SolvePrior, m_ref: np.ndarray, bins: int) -> np.ndarray:
    """(N,) each question's expected SA-PPG weight when a clean batch of ``m_ref`` is scored.

    ``P[q, b]``, the chance that question q's c/m lands in stratum b, is its posterior
    predictive count at ``m_ref`` mapped onto the strata. A question in stratum b shares it with
    ``1 + Σ_{q' ≠ q} P[q', b]`` questions on average, and ``S = Σ_b (1 - Π_q (1 - P[q, b]))``
    strata are non-empty on average; the weight ``1 / (S n_b)`` is taken at those means.
    """
    n = m_ref.size
    landing = np.zeros((n, bins))
    for mr in np.unique(m_ref):
        members = np.flatnonzero(m_ref == mr)
        counts = np.arange(mr + 1)
        predictive = prior.posterior[members] @ binomial_likelihood(
            counts, np.full(mr + 1, mr), prior.grid).T  # (n, mr + 1)
        onto = np.zeros((mr + 1, bins))
        onto[counts, strata(counts / mr, bins=bins)] = 1.0
        landing[members] = predictive @ onto
    sizes = landing.sum(axis=0)  # (B,)
    with np.errstate(divide="ignore"):
        empty = np.exp(np.log1p(-np.minimum(landing, 1.0)).sum(axis=0))  # (B,)
    nonempty = float((1.0 - empty).sum())
    return (landing / (nonempty * (1.0 + sizes - landing))).sum(axis=1)


def _targets(weights: np.ndarray, clean: SolvePrior, priors: list[SolvePrior],
             names: tuple[str, ...], shared: dict) -> dict:
    """Each reported quantity's predicted variance, as ``(a, b)`` (N,) with variance
    ``Σ a / m + Σ b / r`` for an allocation m and a reference batch of r (the questions fixed;
    empty without a pilot).

    Delta method on each term: a strategy's SA-PPG has ``a = w² v_k`` and
    ``b = w² v_clean``; a pair's difference ``a = w² (v_a + v_b - 2 s_ab c_ab)`` and
    ``b = w² κ v_clean``, where the clean count cancels when both strategies sit on the
    same side of the clean solve probability: ``κ = E(s_a - s_b)²`` with
    ``s = sign(p_k - p_clean)`` under the posteriors, and the noise the strategies share
    (``c_ab``, one sample's covariance from ``shared``; 0 without it) cancels with weight
    ``s_ab = E[s_a] E[s_b]``, as :func:`~zerogap.uncertainty.intervals._part_covariances`
    counts it where the strategies are far from the clean model.
    """
    w2 = weights**2
    v = [_bernoulli_mean(prior) for prior in priors]
    v_clean = _bernoulli_mean(clean)
    # P(p_k > g) - P(p_k < g) for every question and clean grid point g, from the posterior CDF.
    sides = []
    for prior in priors:
        cdf = np.cumsum(prior.posterior, axis=1)
        sides.append(1.0 - cdf - (cdf - prior.posterior))
    bernoulli_grid = clean.grid * (1 - clean.grid)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for k, name in enumerate(names):
        out[name] = (w2 * v[k], w2 * v_clean)
    for a in range(len(priors)):
        for b in range(a + 1, len(priors)):
            same_side = (clean.posterior * sides[a] * sides[b] * bernoulli_grid).sum(axis=1)
            common = 0.0
            if (a, b) in shared:
                agree = (clean.posterior * sides[a] * sides[b]).sum(axis=1)
                common = 2 * np.maximum(agree, 0.0) * shared[(a, b)]
            out[f"{names[a]} - {names[b]}"] = (w2 * np.maximum(v[a] + v[b] - common, 0.0),
                                               w2 * (2 * v_clean - 2 * same_side))
    return out


def _variances(targets: dict, samples: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    return {key: float((a / samples).sum() + (b / reference).sum())
            for key, (a, b) in targets.items()}


def _uniform_equivalent(targets: dict, variance: float, m_ref: np.ndarray) -> int:
    """The smallest uniform m of the strategies, the reference batch at ``m_ref``, whose
    largest predicted variance is at most ``variance`` (None where no m reaches it)."""
    return max(max(1, math.ceil(float(a.sum()) / (variance - float((b / m_ref).sum())) - 1e-9))
               if variance > float((b / m_ref).sum()) else _NEVER
               for a, b in targets.values())


def _scaled(score: np.ndarray, low: int, high: int | None, ok, *,
            first_true: bool = False) -> np.ndarray:
    """``clip(round(λ · score), low, high)`` at the largest λ where ``ok`` holds (a budget), or
    with ``first_true`` at the smallest λ where ``ok`` fails (a target reached).

    The allocation only grows with λ, so either boundary is found by bisection, and a larger
    budget never takes samples away from a question.
    """
    def at(scale: float) -> np.ndarray:
        alloc = np.floor(scale * score + 0.5)
        return np.clip(alloc, low, np.inf if high is None else high).astype(np.int64)

    top = float(score.max())
    if top <= 0:
        return at(0.0)
    hi = 1.0 / top
    limit = (high if high is not None else 1e12) / float(score[score > 0].min()) + 1.0
    while ok(at(hi)) and hi < limit:
        hi *= 2
    if ok(at(hi)):  # every question capped, or growing beyond any use
        return at(hi)
    lo = 0.0
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        if mid in (lo, hi):  # adjacent floats: no further step can move either end
            break
        if ok(at(mid)):
            lo = mid
        else:
            hi = mid
    return at(hi) if first_true else at(lo)
