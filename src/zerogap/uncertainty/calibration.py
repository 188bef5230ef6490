"""Simulated studies whose truth is known, to check that intervals, tests and verdicts hold
their stated error rates (issue 19's calibration suite and ``bench/calibrate_uncertainty.py``).

A study is a clean model and strategies, each a vector of true per-question solve probabilities;
a replicate draws m samples per question from each. Benchmarks are shaped like real ones: some
questions never solved, some always, the rest spread (:func:`benchmark`). Every function returns
rates over replicates; the callers state the criterion.

Pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

from zerogap.metrics import strata
from zerogap.uncertainty.allocation import allocate_samples
from zerogap.uncertainty.floor import noise_floor
from zerogap.uncertainty.intervals import choose_bins, difference_interval, gap_intervals
from zerogap.uncertainty.paired import compare
from zerogap.uncertainty.solve_prior import fit_solve_prior
from zerogap.uncertainty.stratification import _stratified_means
from zerogap.uncertainty.verdicts import restoration_verdicts


def benchmark(n: int, rng: np.random.Generator, *, at_zero: float = 0.25,
              at_one: float = 0.15, shape: tuple[float, float] = (0.7, 0.7)) -> np.ndarray:
    """(n,) true clean solve probabilities: ``at_zero`` of them 0, ``at_one`` 1, the rest
    Beta(``shape``); by default Beta(0.7, 0.7), U-shaped, as instruction-tuned models' solve
    probabilities are."""
    u = rng.random(n)
    p = rng.beta(*shape, n)
    p[u < at_zero] = 0.0
    p[(u >= at_zero) & (u < at_zero + at_one)] = 1.0
    return p


def moved(p: np.ndarray, shift: float, rng: np.random.Generator) -> np.ndarray:
    """``p`` with ``shift`` added on a random half of the questions, clipped to [0, 1]."""
    return np.clip(p + shift * (rng.random(p.size) < 0.5), 0.0, 1.0)


def expected_sa_ppg(p_clean, p_mit, m: int, bins: int, rng, sims: int = 4000) -> float:
    """E[SA-PPG] over new samples of both models at m, by simulation (the intervals' target)."""
    return float(expected_sa_ppgs(p_clean, m, p_mit[None], m, bins, rng, sims)[0])


def expected_sa_ppgs(p_clean, m_clean, p_mit, m_mit, bins: int, rng,
                     sims: int = 4000) -> np.ndarray:
    """(K,) E[SA-PPG] of each strategy in ``p_mit`` (K, N), the clean model sampled ``m_clean``
    and the strategies ``m_mit`` times per question (one number or (N,) each), by simulation.
    Each simulated study draws the clean batch once, for all strategies."""
    n = p_clean.size
    c = rng.binomial(m_clean, p_clean, size=(sims, n)) / m_clean
    stratum = strata(c.ravel(), bins=bins).reshape(c.shape)
    return np.array([_stratified_means(stratum, np.abs(rng.binomial(m_mit, p, size=(sims, n))
                                                       / m_mit - c), bins).mean()
                     for p in p_mit])


def wilson(hits: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson interval of a rate observed as ``hits`` of ``trials``."""
    rate = hits / trials
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials**2)) \
        / (1 + z * z / trials)
    return centre - half, centre + half


@dataclass(frozen=True)
class Rate:
    """``hits`` of ``trials`` replicates, and how many could not be tested (``untestable``)."""

    hits: int
    trials: int
    untestable: int = 0

    @property
    def rate(self) -> float:
        return self.hits / max(self.trials, 1)

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.hits, max(self.trials, 1))


def paired_null(n: int, m: int, bins: int, reps: int, *, metric: str = "sa_ppg",
                shift: float = 0.0, uneven: bool = False, null: str = "sharp",
                resamples: int = 2000, seed: int = 0) -> Rate:
    """How often the paired test rejects "a equals b" when it is true.

    Each replicate draws a new benchmark and a random half of its questions. By default both
    strategies move that half by ``shift`` (equal in distribution on every question: the sharp
    null holds). With ``uneven`` a moves that half and b the other one: they differ on every
    question yet, the halves being random, their expected difference over new benchmarks is 0
    by symmetry (only the weak null, ``null="mean"``, holds). Clean, a and b are sampled
    independently. ``trials`` counts replicates where a test was possible; ``untestable`` the
    others (too few differing questions).
    """
    rng = np.random.default_rng(seed)
    hits = trials = 0
    for r in range(reps):
        p = benchmark(n, rng)
        half = rng.random(n) < 0.5
        qa = np.clip(p + shift * half, 0.0, 1.0)
        qb = np.clip(p + shift * (~half if uneven else half), 0.0, 1.0)
        c, a, b = rng.binomial(m, p), rng.binomial(m, qa), rng.binomial(m, qb)
        gaps = gap_intervals(c, np.full(n, m), [a, b], np.full((2, n), m), bins=bins,
                             n_resamples=resamples, seed=r, draw_clean=rng.binomial(1, p),
                             draw_mitigated=rng.binomial(1, [qa, qb]))
        test = compare(gaps, "s0", "s1", metric=metric, null=null)
        if test.reason is None:
            trials += 1
            hits += test.significant
    return Rate(hits, trials, reps - trials)


def interval_coverage(n: int, m: int, bins: int, reps: int, *, shift: float = 0.0,
                      seed: int = 0) -> Rate:
    """How often a strategy's SA-PPG interval covers its expectation over new samples of the
    same questions (one benchmark, fixed; ``reps`` studies of it)."""
    rng = np.random.default_rng(seed)
    p = benchmark(n, rng)
    q = moved(p, shift, rng)
    truth = expected_sa_ppg(p, q, m, bins, rng)
    hits = 0
    for _ in range(reps):
        c, a = rng.binomial(m, p), rng.binomial(m, q)
        ci = gap_intervals(c, np.full(n, m), a, np.full(n, m), bins=bins).interval("s0", "sa_ppg")
        hits += ci.low <= truth <= ci.high
    return Rate(hits, reps)


def verdict_errors(n: int, m: int, reps: int, *, shift: float, margin: float | None = None,
                   seed: int = 0) -> tuple[Rate, float]:
    """Wrong verdicts over ``reps`` studies of one benchmark whose strategy moves half the
    questions by ``shift``. With ``shift = 0`` (equal in distribution to the clean model) the
    error is "not restored"; otherwise the margin is half the true excess and the error is
    "restored". Returns the rate and the margin used."""
    rng = np.random.default_rng(seed)
    bins = choose_bins(n)
    p = benchmark(n, rng)
    q = moved(p, shift, rng)
    if margin is None:
        excess = expected_sa_ppg(p, q, m, bins, rng) - expected_sa_ppg(p, p, m, bins, rng)
        margin = excess / 2 if shift > 0 else 0.05
    wrong = "not restored" if shift == 0 else "restored"
    hits = 0
    for r in range(reps):
        c, a = rng.binomial(m, p), rng.binomial(m, q)
        gaps = gap_intervals(c, np.full(n, m), a, np.full(n, m), bins=bins, seed=r)
        (verdict,) = restoration_verdicts(gaps, c, np.full(n, m), np.full((1, n), m),
                                          margin=margin, n_sim=300)
        hits += verdict.outcome == wrong
    return Rate(hits, reps), margin


def floor_agreement(n: int, m: int, reps: int, *, prior: str = "empirical",
                    seed: int = 0) -> tuple[float, float, float]:
    """Mean simulated floor, mean measured second-batch SA-PPG and the standard error of their
    difference, over ``reps`` studies (a new benchmark each)."""
    rng = np.random.default_rng(seed)
    bins = choose_bins(n)
    simulated, measured = [], []
    for r in range(reps):
        p = benchmark(n, rng)
        c, second = rng.binomial(m, p), rng.binomial(m, p)
        gaps = gap_intervals(c, np.full(n, m), second, np.full(n, m), bins=bins)
        measured.append(gaps.estimates[0].sa_ppg)
        simulated.append(noise_floor(c, np.full(n, m), bins=bins, n_sim=300, prior=prior,
                                     seed=r).sa_ppg)
    diff = np.asarray(simulated) - np.asarray(measured)
    return (float(np.mean(simulated)), float(np.mean(measured)),
            float(diff.std(ddof=1) / math.sqrt(reps)))


def planned_pair(p: np.ndarray, leaked: np.ndarray, effect: float, m: int, bins: int,
                 rng: np.random.Generator, *, memorised: float = 0.97) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
    """The two strategies of a power calculation, as true solve probabilities on ``p``'s questions.

    ``b`` is a contaminated model left alone (Identity): ``max(p, memorised)`` on the leaked
    questions, ``p`` elsewhere. ``a`` is a mitigation that undoes a share λ of the inflation,
    ``p + (1 - λ) (b - p)``, with λ chosen (by bisection) so that the expected SA-PPG at m
    samples falls by ``effect``, the paper's RailCap-vs-Identity difference being 0.135
    (arXiv 2608.07341, Table 1). A :class:`ValueError` when even λ = 1 falls short.
    """
    b = np.where(leaked, np.maximum(p, memorised), p)
    target = expected_sa_ppg(p, b, m, bins, rng) - effect
    if expected_sa_ppg(p, p, m, bins, rng) > target:
        raise ValueError(f"an effect of {effect} exceeds what removing all inflation gives")
    low, high = 0.0, 1.0
    for _ in range(12):
        share = (low + high) / 2
        if expected_sa_ppg(p, p + (1 - share) * (b - p), m, bins, rng) > target:
            low = share
        else:
            high = share
    return p + (1 - high) * (b - p), b


def paired_power(n: int, m: int, reps: int, *, effect: float = 0.135, alpha: float = 0.05,
                 resamples: int = 2000, seed: int = 0) -> tuple[Rate, float]:
    """Power of the one-sided paired SA-PPG test ("a below b") for :func:`planned_pair`'s
    strategies on one benchmark of ``n`` questions, half of them leaked, at ``m`` samples, and
    the mean half-width of the two-sided interval at level ``1 - alpha``."""
    rng = np.random.default_rng(seed)
    bins = choose_bins(n)
    p = benchmark(n, rng)
    leaked = np.arange(n) < (n + 1) // 2
    a_true, b_true = planned_pair(p, leaked, effect, m, bins, rng)
    hits, widths = 0, []
    for r in range(reps):
        c, a, b = (rng.binomial(m, x) for x in (p, a_true, b_true))
        gaps = gap_intervals(c, np.full(n, m), [a, b], np.full((2, n), m), bins=bins,
                             level=1 - alpha, n_resamples=resamples, seed=r)
        hits += compare(gaps, "s0", "s1", alternative="less").significant
        both = compare(gaps, "s0", "s1")
        widths.append((both.high - both.low) / 2)
    return Rate(hits, reps), float(np.nanmean(widths))


@dataclass(frozen=True)
class MeasuredPower:
    """The paired SA-PPG test of two measured strategies in simulated studies of ``n`` questions
    at ``m`` samples (:func:`measured_power`).

    ``rejected``: replicates whose one-sided test found ``a`` below ``b``; ``half_width``: the
    mean half-width of the two-sided interval; ``critical``: the mean distance from the estimate
    to its one-sided bound (the test rejects when the estimate lies further below 0 than that);
    ``difference`` and ``sd``: the mean and the standard deviation of the estimated difference
    over replicates (its real sampling spread, new questions included); ``covered``: replicates
    whose two-sided interval holds ``difference``, the expectation it is for.
    """

    n: int
    m: int
    rejected: Rate
    half_width: float
    critical: float
    difference: float
    sd: float
    covered: Rate

    def power_for(self, effect: float) -> float:
        """Power of the one-sided test for a true difference of ``effect`` (a below b by that
        much), if the estimate spreads as here and the test's critical distance stays the same:
        P(estimate < -critical), by the normal approximation."""
        return NormalDist().cdf((effect - self.critical) / self.sd)


def measured_power(clean, a, b, leaked, n: int, m: int, reps: int, *, alpha: float = 0.05,
                   null: str = "sharp", resamples: int = 2000, seed: int = 0) -> MeasuredPower:
    """The power calculation of :func:`paired_power`, with the strategies a study measured.

    :func:`planned_pair`'s mitigation removes the same share of every leaked question's
    inflation, so every question's term moves alike; a real one (RailCap on templated answers)
    helps some questions, leaves others and damages some the clean model solves, and that spread
    between questions widens the interval at any m. Here each replicate draws a new benchmark
    from the measured one: ``n`` questions with replacement, half from the leaked ones and half
    from the others, each with true solve probabilities for the clean model, ``a`` and ``b``
    drawn from its empirical-Bayes posteriors
    (:func:`~zerogap.uncertainty.solve_prior.fit_solve_prior`, one prior per model), then ``m``
    new samples of each; the study's own tests score it.

    Parameters
    ----------
    clean, a, b : tuple of array-like of int, each (correct, samples), shape (n_measured,)
        A study's counts on the same questions: the clean reference batch and two strategies.
    leaked : array-like of bool, shape (n_measured,)
    n, m : int
        The simulated study's questions (half leaked) and samples per question.
    reps : int
        Simulated studies.
    null : {"sharp", "mean"}, default="sharp"
        The paired test scored (:func:`zerogap.uncertainty.compare`). The simulated studies
        depend on ``seed`` alone, so two calls that differ only here score the same studies.
    """
    rng = np.random.default_rng(seed)
    priors = [fit_solve_prior(*counts) for counts in (clean, a, b)]
    leaked = np.asarray(leaked, bool)
    pools = (np.flatnonzero(leaked), np.flatnonzero(~leaked))
    if min(pool.size for pool in pools) == 0:
        raise ValueError("measured_power needs leaked and unleaked questions")
    bins = choose_bins(n)
    hits, widths, critical, estimates, bounds = 0, [], [], [], []
    for r in range(reps):
        chosen = np.concatenate([rng.choice(pools[0], (n + 1) // 2),
                                 rng.choice(pools[1], n // 2)])
        # Each drawn question, repeats included, gets its own posterior-predictive count.
        c, x, y = (replace(prior, group=prior.group[chosen]).draw_second_batch(rng, 1, m)[0]
                   for prior in priors)
        gaps = gap_intervals(c, np.full(n, m), [x, y], np.full((2, n), m), bins=bins,
                             level=1 - alpha, n_resamples=resamples, seed=r)
        less = compare(gaps, "s0", "s1", alternative="less", null=null)
        hits += less.significant
        critical.append(less.high - less.difference)
        both = compare(gaps, "s0", "s1", null=null)
        widths.append((both.high - both.low) / 2)
        estimates.append(both.difference)
        bounds.append((both.low, both.high))
    mean = float(np.mean(estimates))
    covered = sum(low <= mean <= high for low, high in bounds)
    return MeasuredPower(n, m, Rate(hits, reps), float(np.nanmean(widths)),
                         float(np.nanmean(critical)), mean, float(np.std(estimates, ddof=1)),
                         Rate(covered, reps))


@dataclass(frozen=True)
class Profile:
    """The shape of a study for the allocation's calibration and benchmark.

    The clean model's solve probabilities come from :func:`benchmark` (``at_zero``, ``at_one``,
    ``shape``); half the questions are leaked. Identity (the contaminated model left alone)
    gains the share ``memorised`` of each leaked question's headroom, ``p + memorised (1 - p)``.
    RailCap-like keeps a uniform random share, up to ``kept``, of that gain on each leaked
    question and damages ``damaged`` of the unleaked ones, which lose a uniform random share,
    up to 0.6, of their solve probability: it helps some questions more than others and harms
    some, as RailCap does on the demo's models.
    """

    name: str
    n: int
    m: int
    bins: int
    at_zero: float
    at_one: float
    shape: tuple[float, float]
    memorised: float
    kept: float
    damaged: float

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(N,) true solve probabilities of the clean model, RailCap-like and Identity."""
        p = benchmark(self.n, rng, at_zero=self.at_zero, at_one=self.at_one, shape=self.shape)
        leaked = np.zeros(self.n, bool)
        leaked[rng.permutation(self.n)[: self.n // 2]] = True
        identity = np.where(leaked, p + self.memorised * (1 - p), p)
        helped = p + rng.uniform(0, self.kept, self.n) * (identity - p)
        harmed = p * (1 - rng.uniform(0, 0.6, self.n) * (rng.random(self.n) < self.damaged))
        return p, np.where(leaked, helped, harmed), identity


PAPER = Profile("paper", n=1319, m=50, bins=50, at_zero=0.15, at_one=0.0, shape=(0.7, 2.0),
                memorised=0.82, kept=0.34, damaged=0.4)
"""Llama-2 x GSM8K as the paper describes it (arXiv 2608.07341 §3.3, §5): 1,319 questions at
m = 50, B = 50; the clean model reads 0/50 on nearly a quarter of the questions (23%), its mean
solve probability is 0.22 (All-Zero's A-PPG, Table 2: 0.219) and All-Zero's SA-PPG 0.49 (Table
2: 0.490). Identity's mean inflation is 0.32 (Table 1's G-AP reads 0.319) and RailCap-like's
expected SA-PPG lies below Identity's (Table 1: 0.191 - 0.326 = -0.135)."""

PAPER_MATCHED = (
    Profile("paper-beta", n=1319, m=50, bins=50, at_zero=0.0, at_one=0.0, shape=(0.4, 1.4),
            memorised=0.82, kept=0.34, damaged=0.4),
    Profile("paper-mixed", n=1319, m=50, bins=50, at_zero=0.05, at_one=0.0,
            shape=(0.45, 1.5), memorised=0.82, kept=0.34, damaged=0.4),
    Profile("paper-point", n=1319, m=50, bins=50, at_zero=0.20, at_one=0.0, shape=(1.0, 2.6),
            memorised=0.82, kept=0.34, damaged=0.4),
)
"""Other clean models that match the same published figures (0/50 on 22-24% of questions, mean
solve probability 0.22, All-Zero's SA-PPG 0.49) with more or fewer questions truly never
solved: the paper's figures do not pin the profile, and the allocation's savings vary with it."""

DEMO = Profile("demo", n=128, m=8, bins=5, at_zero=0.20, at_one=0.15, shape=(0.7, 0.7),
               memorised=0.97, kept=0.3, damaged=0.4)
"""The embedded demo's size (128 questions, m = 8, B = 5) and its clean batch (a fifth of the
questions never solved); Identity memorises its leaked half (docs/demo-design.md)."""


def sample_noise(rng: np.random.Generator, n: int, width: int) -> np.ndarray:
    """(n, width) uniforms laid out by sample index: column j (sample j of every question) is
    the same whatever the width, so a design that gives a question more samples keeps its
    first ones (common random numbers across designs, for :func:`shared_outcomes`'s ``noise``).

    >>> a = sample_noise(np.random.default_rng(0), 3, 2)
    >>> b = sample_noise(np.random.default_rng(0), 3, 5)
    >>> bool(np.array_equal(a, b[:, :2]))
    True
    """
    return rng.random((width, n)).T


def shared_outcomes(rng: np.random.Generator | None, p: np.ndarray, samples: np.ndarray, *,
                    joint: bool = True, noise: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray | None]:
    """Counts (K, N) and paired joint counts (K, K, N) of strategies ``p`` (K, N) sampled
    ``samples`` (K, N) times on shared noise: sample j of question q is solved by strategy k
    when ``u[q, j] < p[k, q]``, one uniform for every strategy, as the engine keys its noise
    by (seed, question, sample index) so that two strategies' j-th samples agree until one of
    them intervenes (here: as far as their solve probabilities allow). Without ``joint`` the
    joint counts are not counted (None). ``u`` is drawn from ``rng``, laid out (N,
    ``samples.max()``), or is ``noise`` (N, at least ``samples.max()``; ``rng`` unused):
    :func:`sample_noise`'s keeps each question's first outcomes whatever the plan."""
    top = int(samples.max())
    if noise is None:
        if rng is None:
            raise ValueError("shared_outcomes needs rng or noise")
        u = rng.random((p.shape[1], top))
    elif noise.shape[0] != p.shape[1] or noise.shape[1] < top:
        raise ValueError(f"noise must have shape ({p.shape[1]}, at least {top}), got "
                         f"{noise.shape}")
    else:
        u = noise[:, :top]
    solved = (u[None] < p[:, :, None]) & (np.arange(top) < samples[:, :, None])  # (K, N, M)
    if not joint:
        return solved.sum(axis=2), None
    as_int = solved.astype(np.int32)
    return as_int.sum(axis=2), np.einsum("anj,bnj->abn", as_int, as_int)


@dataclass(frozen=True)
class AllocationCheck:
    """Simulated allocated studies of one profile, against their truth (:func:`allocation_check`).

    ``bias[q]``: mean and standard error of (estimate - its expectation at the allocated m) for
    ``q`` in ``"railcap"``, ``"identity"`` (SA-PPG) and ``"railcap - identity"``; ``shift[q]``
    that expectation's mean distance from the uniform study's at ``profile.m`` (what the
    allocation changes in what SA-PPG measures, not an error of the estimate);
    ``half_width[q]`` the mean half-width the studies stated. ``coverage``: each interval
    holding that expectation. ``false_positive``: tests and difference intervals of two
    strategies equal in distribution that moved questions (``"moved"``: two copies of
    RailCap-like) or did not (``"unmoved"``: two copies of the clean model), rejecting.
    """

    profile: str
    budget: float
    pilot: int
    reused: bool
    mean_samples: float
    bias: dict[str, tuple[float, float]]
    shift: dict[str, float]
    coverage: dict[str, Rate]
    false_positive: dict[str, Rate]
    half_width: dict[str, float]

    def failures(self, *, bias: float = 0.25, coverage: float = 0.93,
                 false_positive: float = 0.05) -> list[str]:
        """What fails the design's criteria, one line each (empty: it holds).

        Bias: ``|bias|`` less two standard errors above ``bias`` half-widths (an error of a
        quarter of the stated half-width moves the coverage of a 95% interval by about one
        point); coverage: the 99.9% Wilson interval's upper bound below ``coverage``; false
        positives: that interval's lower bound above ``false_positive``.
        """
        out = []
        for key, (mean, se) in self.bias.items():
            if abs(mean) - 2 * se > bias * self.half_width[key]:
                out.append(f"{key}: bias {mean:+.4f} ± {se:.4f} is more than {bias} of the "
                           f"half-width {self.half_width[key]:.4f}")
        for key, rate in self.coverage.items():
            if wilson(rate.hits, rate.trials, z=3.29)[1] < coverage:
                out.append(f"{key}: coverage {rate.rate:.3f} of {rate.trials} is below "
                           f"{coverage}")
        for key, rate in self.false_positive.items():
            if wilson(rate.hits, rate.trials, z=3.29)[0] > false_positive:
                out.append(f"false positives, {key}: {rate.rate:.3f} of {rate.trials} is above "
                           f"{false_positive}")
        return out


def allocation_check(profile: Profile, reps: int, *, budget: float, pilot: int = 0,
                     reuse_pilot: bool = False, reference_strategies: int | None = None,
                     twin_share: float = 1.0, resamples: int = 999, truth_sims: int = 200,
                     seed: int = 0) -> AllocationCheck:
    """Run ``reps`` allocated studies of one benchmark drawn from ``profile``.

    Each replicate samples the clean model twice at ``profile.m`` (the reference batch, scored,
    and the second batch, which places questions in strata for the allocation), optionally a
    ``pilot`` of every strategy, allocates ``budget`` mean samples per question
    (:func:`~zerogap.uncertainty.allocation.allocate_samples`; with ``reference_strategies``
    the reference batch is allocated upward too), samples five strategies at the allocation
    on shared noise (:func:`shared_outcomes`: RailCap-like, Identity, a copy of RailCap-like,
    two copies of the clean model) and scores them as a study would, their paired outcomes
    included. With ``reuse_pilot`` the pilot's samples are the first of each question's and
    count in the estimate (the pooled two-stage design, whose allocation depends on the samples
    it scores). ``twin_share`` below 1 breaks the design on purpose: the copies (RailCap-like's
    and the second of the clean model) get that share of the plan's m, so each pair of copies
    is no longer equal in distribution and its tests must reject. Each replicate's truth is the
    expected SA-PPG at its allocation, from ``truth_sims`` simulated studies at it.
    """
    rng = np.random.default_rng(seed)
    clean, railcap, identity = profile.draw(rng)
    truth_p = np.stack([railcap, identity])
    strategies = np.stack([railcap, identity, railcap, clean, clean])
    names = ["railcap", "identity", "railcap twin", "clean twin", "clean twin 2"]
    n, m, bins = profile.n, profile.m, profile.bins
    uniform = expected_sa_ppgs(clean, m, truth_p, m, bins, rng, sims=4 * truth_sims)
    errors, shifts, spent, widths = [], [], [], []
    covered = {key: 0 for key in ("railcap", "identity", "railcap - identity")}
    rejected = {f"{pair} {test}": 0 for pair in ("moved", "unmoved")
                for test in ("sharp", "mean", "difference")}
    for r in range(reps):
        second = rng.binomial(m, clean)
        first = rng.binomial(pilot, strategies) if pilot else None
        plan = allocate_samples(
            second, np.full(n, m), first, None if first is None else np.full(first.shape, pilot),
            budget=budget, bins=bins, min_samples=pilot if reuse_pilot else 1,
            reference_strategies=reference_strategies, reference_samples=m)
        reference = rng.binomial(plan.reference, clean)
        alloc = np.broadcast_to(plan.samples, strategies.shape).copy()
        alloc[[2, 4]] = np.maximum(np.floor(alloc[[2, 4]] * twin_share),
                                   max(pilot if reuse_pilot else 0, 1)).astype(np.int64)
        counts, joint = shared_outcomes(rng, strategies,
                                        alloc - (pilot if reuse_pilot else 0))
        if reuse_pilot and first is not None:
            counts = counts + first
        gaps = gap_intervals(reference, plan.reference, counts, alloc, names=names, bins=bins,
                             n_resamples=resamples, seed=r,
                             joint_correct=None if reuse_pilot else joint)
        truth = expected_sa_ppgs(clean, plan.reference, truth_p, plan.samples, bins, rng,
                                 sims=truth_sims)
        targets = {"railcap": gaps.interval("railcap", "sa_ppg"),
                   "identity": gaps.interval("identity", "sa_ppg"),
                   "railcap - identity": difference_interval(gaps, "railcap", "identity")}
        expected = {"railcap": truth[0], "identity": truth[1],
                    "railcap - identity": truth[0] - truth[1]}
        for key, ci in targets.items():
            covered[key] += ci.low <= expected[key] <= ci.high
        errors.append([targets[key].estimate - expected[key] for key in targets])
        widths.append([(ci.high - ci.estimate) for ci in targets.values()])
        shifts.append([truth[0] - uniform[0], truth[1] - uniform[1],
                       truth[0] - truth[1] - uniform[0] + uniform[1]])
        spent.append(plan.mean_samples)
        for pair, (a, b) in (("moved", ("railcap", "railcap twin")),
                             ("unmoved", ("clean twin", "clean twin 2"))):
            rejected[f"{pair} sharp"] += compare(gaps, a, b).significant
            rejected[f"{pair} mean"] += compare(gaps, a, b, null="mean").significant
            ci = difference_interval(gaps, a, b)
            rejected[f"{pair} difference"] += not ci.low <= 0 <= ci.high
    err = np.asarray(errors)
    keys = list(covered)
    return AllocationCheck(
        profile.name, float(budget), int(pilot), bool(reuse_pilot), float(np.mean(spent)),
        bias={key: (float(err[:, i].mean()), float(err[:, i].std(ddof=1) / math.sqrt(reps)))
              for i, key in enumerate(keys)},
        shift={key: float(np.mean(shifts, axis=0)[i]) for i, key in enumerate(keys)},
        coverage={key: Rate(hits, reps) for key, hits in covered.items()},
        false_positive={key: Rate(hits, reps) for key, hits in rejected.items()},
        half_width={key: float(np.mean(widths, axis=0)[i]) for i, key in enumerate(keys)},
    )
