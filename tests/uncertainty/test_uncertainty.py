"""Intervals, paired tests and the noise floor: mechanics checked against direct computation.

Their calibration (how often they cover or reject over simulated studies) is in
tests/uncertainty/test_calibration.py.
"""

import itertools
import math

import numpy as np
import pytest

from zerogap.metrics import METRIC_NAMES, restoration_gaps
from zerogap.uncertainty import (
    MIN_QUESTIONS,
    choose_bins,
    compare,
    difference_interval,
    gap_intervals,
    noise_floor,
    stratum_weights,
)
from zerogap.uncertainty.intervals import _part_covariances, _part_variances
from zerogap.uncertainty.solve_prior import SolvePrior, fit_solve_prior


def synthetic_runs(n=300, m=50, k=3, seed=0):
    rng = np.random.default_rng(seed)
    p_clean = np.where(rng.random(n) < 0.4, 0.0, rng.random(n))
    clean = rng.binomial(m, p_clean)
    shifts = np.array([0.0, 0.2, -0.3])[:k, None]
    mitigated = rng.binomial(m, np.clip(p_clean + shifts, 0, 1))
    return clean, np.full(n, m), mitigated, np.full((k, n), m)


def brute_force_variance(p_a, m_a, p_c, m_c, f):
    """Var f(X / m_a - Y / m_c) by summing over every outcome pair."""
    moments = [0.0, 0.0]
    for x, y in itertools.product(range(m_a + 1), range(m_c + 1)):
        prob = (math.comb(m_a, x) * p_a**x * (1 - p_a) ** (m_a - x)
                * math.comb(m_c, y) * p_c**y * (1 - p_c) ** (m_c - y))
        value = f(x / m_a - y / m_c)
        moments[0] += prob * value
        moments[1] += prob * value * value
    return moments[1] - moments[0] ** 2


def point_masses(p, m):
    """A SolvePrior whose posteriors sit on ``p`` (values on the 0.01 grid) exactly."""
    grid = np.linspace(0, 1, 101)
    posterior = np.zeros((p.size, grid.size))
    posterior[np.arange(p.size), np.round(p * 100).astype(int)] = 1.0
    counts = np.stack([np.zeros(p.size, int), m], axis=1)
    return SolvePrior(grid, posterior.mean(axis=0), counts, posterior, np.arange(p.size))


def test_per_question_variances_match_brute_force_sums():
    p_a, p_c = np.array([0.0, 0.3, 0.9, 0.3]), np.array([0.5, 0.3, 1.0, 0.7])
    m_a, m_c = np.array([4, 4, 7, 3]), np.array([5, 5, 2, 3])
    got = _part_variances(point_masses(p_a, m_a), point_masses(p_c, m_c))
    parts = {"abs": abs, "plus": lambda d: max(d, 0.0), "minus": lambda d: max(-d, 0.0),
             "delta": lambda d: d}
    for key, f in parts.items():
        for q in range(4):
            want = brute_force_variance(p_a[q], m_a[q], p_c[q], m_c[q], f)
            assert got[key][q] == pytest.approx(want, abs=1e-12)


def brute_force_difference_variance(p, m, f):
    """Var [f(X_a / m_a - Y / m_c) - f(X_b / m_b - Y / m_c)] over every outcome triple; p and
    m are (p_a, p_b, p_c) and (m_a, m_b, m_c)."""
    moments = [0.0, 0.0]
    for outcome in itertools.product(*(range(k + 1) for k in m)):
        prob = math.prod(math.comb(k, x) * q**x * (1 - q) ** (k - x)
                         for q, k, x in zip(p, m, outcome, strict=True))
        y = outcome[2] / m[2]
        value = f(outcome[0] / m[0] - y) - f(outcome[1] / m[1] - y)
        moments[0] += prob * value
        moments[1] += prob * value * value
    return moments[1] - moments[0] ** 2


def test_difference_variances_match_brute_force_sums():
    # The two strategies share the clean count: its covariance is what the sum of their own
    # variances misses. Different m for a, b and the clean run on every question.
    p = np.array([[0.2, 0.5, 0.9, 0.3], [0.7, 0.5, 0.1, 0.0], [0.4, 0.5, 1.0, 0.6]])
    m = np.array([[3, 4, 5, 2], [3, 6, 5, 2], [4, 4, 2, 3]])
    a, b, c = (point_masses(p[i], m[i]) for i in range(3))
    for part, f in {"abs": abs, "plus": lambda d: max(d, 0.0),
                    "minus": lambda d: max(-d, 0.0)}.items():
        got = (_part_variances(a, c)[part] + _part_variances(b, c)[part]
               - 2 * _part_covariances(a, b, c, part))
        for q in range(4):
            want = brute_force_difference_variance(p[:, q], m[:, q], f)
            assert got[q] == pytest.approx(want, abs=1e-12)


def test_the_difference_interval_is_the_weighted_sum_of_those_variances():
    clean, m, mit, mit_m = synthetic_runs(n=120, m=12, k=2)
    mit_m = mit_m.copy()
    mit_m[:, ::3] = 30  # an allocated study: more samples on a third of the questions
    mit = np.minimum(mit, mit_m)
    gaps = gap_intervals(clean, m, mit, mit_m, bins=10)
    ci = difference_interval(gaps, "s0", "s1")
    assert ci.estimate == pytest.approx(gaps.estimates[0].sa_ppg - gaps.estimates[1].sa_ppg)
    a, b = (fit_solve_prior(mit[k], mit_m[k]) for k in range(2))
    c = fit_solve_prior(clean, m)
    variance = (_part_variances(a, c)["abs"] + _part_variances(b, c)["abs"]
                - 2 * _part_covariances(a, b, c, "abs"))
    half = 1.959964 * math.sqrt(gaps.weights**2 @ variance + gaps.strata_extra["abs"][0, 1])
    assert (ci.high - ci.low) / 2 == pytest.approx(half, rel=1e-5) and half > 0


def test_a_strategy_against_itself_differs_by_nothing():
    clean, m, mit, mit_m = synthetic_runs(n=60, m=10, k=2)
    gaps = gap_intervals(clean, m, [mit[1], mit[1]], mit_m, bins=5)
    same = difference_interval(gaps, "s0", "s0", metric="a_ppg")
    assert same.estimate == 0 and same.high - same.low == pytest.approx(0, abs=1e-9)
    # Two runs that read the same counts still differ in new samples, symmetrically.
    twins = difference_interval(gaps, "s0", "s1")
    assert twins.estimate == 0 and twins.low == pytest.approx(-twins.high) and twins.high > 0


def test_the_difference_interval_refuses_what_it_cannot_state():
    clean, m, mit, mit_m = synthetic_runs(n=60, m=10, k=2)
    gaps = gap_intervals(clean, m, mit, mit_m, bins=5)
    with pytest.raises(ValueError, match="metric must be one of"):
        difference_interval(gaps, "s0", "s1", metric="g_app")
    with pytest.raises(ValueError, match="unknown strategy 'railcap'"):
        difference_interval(gaps, "railcap", "s1")
    n = MIN_QUESTIONS - 1
    few = gap_intervals(clean[:n], m[:n], mit[:, :n], mit_m[:, :n], bins=5)
    ci = difference_interval(few, "s0", "s1")
    assert ci.reason is not None and math.isnan(ci.low)


def test_uncertain_solve_probabilities_average_the_variance_not_the_probability():
    # A question seen once at 1/1: its posterior spreads, and the expected Bernoulli variance
    # E[p(1 - p)] sits below p̄(1 - p̄) at the posterior mean.
    prior = fit_solve_prior([0, 1] * 20, [1] * 40)
    sure = point_masses(np.zeros(40), np.ones(40, int))
    got = _part_variances(prior, sure)["abs"]
    mean = prior.posterior_mean
    assert np.all(got < mean * (1 - mean) + 1e-12)


def test_sa_ppg_is_the_weighted_sum_its_standard_error_assumes():
    clean, m, mit, _ = synthetic_runs(n=80, m=10)
    r_clean, r_mit = clean / m, mit[1] / m
    w = stratum_weights(r_clean, 10)
    assert w.sum() == pytest.approx(1.0)
    assert w @ np.abs(r_mit - r_clean) == pytest.approx(
        restoration_gaps(r_clean, r_mit, bins=10).sa_ppg)


def test_every_metric_has_an_interval_around_its_estimate():
    clean, m, mit, mit_m = synthetic_runs()
    draws = (clean > 25).astype(int), (mit > 25).astype(int)
    gaps = gap_intervals(clean, m, mit, mit_m, draw_clean=draws[0], draw_mitigated=draws[1])
    for k, name in enumerate(gaps.names):
        for metric in METRIC_NAMES:
            ci = gaps.interval(name, metric)
            assert ci.reason is None
            assert 0 <= ci.low <= ci.estimate <= ci.high
            assert ci.estimate == getattr(gaps.estimates[k], metric)
        assert gaps.interval(name, "sa_ppg").high - gaps.interval(name, "sa_ppg").low > 0


def test_questions_seen_at_zero_and_one_still_carry_sampling_noise():
    # The old question bootstrap gave such runs a zero-width SA-PPG interval.
    n = 40
    clean = np.where(np.arange(n) < n // 2, 0, 6)
    mit = np.where(np.arange(n) % 4 == 0, 3, clean)
    gaps = gap_intervals(clean, np.full(n, 6), mit, np.full(n, 6), bins=50)
    ci = gaps.interval("s0", "sa_ppg")
    assert ci.high - ci.low > 0.01


def test_too_few_questions_get_no_interval_no_test_and_no_number_to_trust():
    n = MIN_QUESTIONS - 1
    gaps = gap_intervals(np.full(n, 3), np.full(n, 6), [np.full(n, 5), np.full(n, 1)],
                         np.full((2, n), 6))
    ci = gaps.interval("s0", "sa_ppg")
    assert ci.reason is not None and math.isnan(ci.low)
    assert ci.to_dict()["low"] is None
    c = compare(gaps, "s0", "s1")
    assert c.reason is not None and not c.significant and c.to_dict()["p_value"] is None


def exact_sign_flip_p(d, w):
    """Two-sided p-value of the sign-flip test by enumerating every pattern directly."""
    observed = w @ d
    values = [w @ (np.array(signs) * d) for signs in itertools.product((1, -1), repeat=d.size)]
    up = np.mean([v >= observed - 1e-12 for v in values])
    down = np.mean([v <= observed + 1e-12 for v in values])
    return min(1.0, 2 * min(up, down))


def test_small_benchmarks_are_tested_exactly_by_enumeration():
    rng = np.random.default_rng(3)
    n = 13
    clean = rng.binomial(8, rng.random(n))
    a, b = rng.binomial(8, rng.random(n)), rng.binomial(8, rng.random(n))
    gaps = gap_intervals(clean, np.full(n, 8), [a, b], np.full((2, n), 8), bins=5,
                         n_resamples=2**n)
    assert gaps.exact and gaps.swap_table[1].shape[0] == 2**n
    for metric in ("sa_ppg", "a_ppg", "delta_plus"):
        c = compare(gaps, "s0", "s1", metric=metric)
        part = {"sa_ppg": np.abs, "a_ppg": np.abs, "delta_plus": lambda x: np.maximum(x, 0)}
        d = part[metric](a / 8 - clean / 8) - part[metric](b / 8 - clean / 8)
        w = stratum_weights(clean / 8, 5) if metric == "sa_ppg" else np.full(n, 1 / n)
        assert c.p_value == pytest.approx(exact_sign_flip_p(d, w))
        assert "exact" in c.method


@pytest.mark.parametrize(("metric", "null"), [
    ("sa_ppg", "sharp"), ("s_delta_minus", "sharp"), ("a_ppg", "sharp"), ("g_app", "sharp"),
    ("g_ap", "sharp"), ("sa_ppg", "mean"), ("s_delta_plus", "mean"), ("a_ppg", "mean"),
])
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_the_interval_excludes_zero_exactly_when_the_test_rejects(metric, null, alternative):
    rng = np.random.default_rng(0)
    decided = set()
    for trial in range(40):
        n = 30
        p = rng.random(n)
        clean = rng.binomial(6, p)
        shifts = rng.permutation([rng.choice([0.0, 0.15, 0.4]), 0.0])  # either one moves
        p_ab = np.clip(p + shifts[:, None], 0, 1)
        a, b = rng.binomial(6, p_ab)
        draws = rng.binomial(1, p), rng.binomial(1, p_ab)
        gaps = gap_intervals(clean, np.full(n, 6), [a, b], np.full((2, n), 6), bins=5,
                             n_resamples=400, seed=trial, draw_clean=draws[0],
                             draw_mitigated=draws[1])
        c = compare(gaps, "s0", "s1", metric=metric, alternative=alternative, null=null)
        if c.reason is not None:
            continue
        excludes = c.low > 0 or c.high < 0
        assert excludes == c.significant, c
        assert c.low <= c.difference <= c.high
        decided.add(c.significant)
    assert decided == {True, False}  # both outcomes were exercised


def test_the_weak_null_on_one_stratum_is_the_paired_t_test():
    # A-PPG has no strata: the stratified t reduces to Student's paired t on n - 1 df.
    from zerogap.uncertainty.student_t import t_cdf, t_quantile

    clean, m, mit, mit_m = synthetic_runs(n=50, m=10, k=2, seed=3)
    gaps = gap_intervals(clean, m, mit, mit_m)
    c = compare(gaps, "s0", "s1", metric="a_ppg", null="mean")
    r = clean / 10
    d = np.abs(mit[0] / 10 - r) - np.abs(mit[1] / 10 - r)
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert c.difference == pytest.approx(d.mean())
    assert c.p_value == pytest.approx(2 * t_cdf(-abs(d.mean()) / se, 49), rel=1e-9)
    assert c.high - c.difference == pytest.approx(t_quantile(0.975, 49) * se, rel=1e-9)
    assert c.df == pytest.approx(49.0) and "weak null" in c.method


def test_the_weak_null_interval_follows_the_spread_within_strata():
    # a restores questions the clean model never solves (Identity gets them all) and damages
    # the ones it always solves: per-question differences near -0.85 in one stratum and +0.75
    # in the other. The swap test's interval follows their root mean square (about 0.8); the
    # weak null's follows their spread inside each stratum (about 0.05), by construction far
    # narrower, and finds the small mean difference the swap test cannot.
    n = 40
    clean = np.repeat([0, 10], n // 2)
    identity = np.full(n, 10)
    a = np.concatenate([np.resize([1, 2], n // 2), np.resize([2, 3], n // 2)])
    gaps = gap_intervals(clean, np.full(n, 10), [a, identity], np.full((2, n), 10), bins=5,
                         names=["a", "identity"])
    sharp = compare(gaps, "a", "identity")
    mean = compare(gaps, "a", "identity", null="mean")
    assert sharp.difference == mean.difference == pytest.approx(-0.05)
    assert (mean.high - mean.low) < 0.2 * (sharp.high - sharp.low)
    assert mean.significant and mean.high < 0
    assert not sharp.significant


def test_a_lone_question_in_its_stratum_borrows_its_neighbours_spread():
    # Strata of one question have no spread of their own; the weak null must still give them
    # their share of the variance (with a pooled one it would understate it).
    rng = np.random.default_rng(4)
    n = 30
    clean = np.concatenate([np.zeros(n - 1, int), [5]])  # the last question alone mid-range
    a, b = rng.binomial(10, 0.3, n), rng.binomial(10, 0.3, n)
    gaps = gap_intervals(clean, np.full(n, 10), [a, b], np.full((2, n), 10), bins=5)
    c = compare(gaps, "s0", "s1", null="mean")
    r = clean / 10
    d = np.abs(a / 10 - r) - np.abs(b / 10 - r)
    pooled_both = d.var(ddof=1)  # the lone question and its neighbour stratum together
    expected_se = math.sqrt(d[:-1].var(ddof=1) / (n - 1) + pooled_both) / 2
    from zerogap.uncertainty.student_t import t_quantile

    half = (c.high - c.low) / 2
    assert half == pytest.approx(t_quantile(0.975, c.df) * expected_se, rel=1e-3)


def test_differences_without_spread_inside_strata_are_named_not_tested():
    # Every question of a kind moves alike: nothing inside a stratum to estimate a spread from.
    gaps = gap_intervals([5, 0, 9, 2] * 20, [10] * 80,
                         [[5, 0, 9, 2] * 20, [9, 9, 0, 9] * 20], [[10] * 80] * 2)
    c = compare(gaps, "s0", "s1", null="mean")
    assert c.reason == "the per-question differences do not vary within strata"
    assert math.isnan(c.p_value) and not c.significant
    assert compare(gaps, "s0", "s1").significant  # the swap test still decides


def test_the_null_is_checked():
    clean, m, mit, mit_m = synthetic_runs(n=40, k=2)
    gaps = gap_intervals(clean, m, mit, mit_m)
    with pytest.raises(ValueError, match="null must be one of sharp, mean"):
        compare(gaps, "s0", "s1", null="weak")
    with pytest.raises(ValueError, match="null='mean' needs a weighted-sum metric"):
        compare(gaps, "s0", "s1", metric="g_app", null="mean")


def test_a_clear_difference_is_significant_and_seeded():
    clean, m, mit, mit_m = synthetic_runs()
    gaps = gap_intervals(clean, m, mit, mit_m, names=["same", "up", "down"], n_resamples=2000)
    c = compare(gaps, "same", "up", metric="sa_ppg")
    assert c.difference < 0 and c.high < 0 and c.p_value < 0.01
    assert compare(gaps, "same", "up", metric="sa_ppg", alternative="less").p_value < 0.01
    again = gap_intervals(clean, m, mit, mit_m, names=["same", "up", "down"], n_resamples=2000)
    assert compare(again, "same", "up") == c


def test_too_few_differing_questions_are_named_not_tested():
    n = 20
    clean = np.full(n, 3)
    a = clean.copy()
    b = clean.copy()
    b[:4] = 6  # four questions differ: 2 / 2^4 > 0.05 for any outcome
    gaps = gap_intervals(clean, np.full(n, 6), [a, b], np.full((2, n), 6))
    c = compare(gaps, "s0", "s1")
    assert c.differing == 4 and "too few questions that differ (4)" in c.reason
    b[:6] = 6
    gaps = gap_intervals(clean, np.full(n, 6), [a, b], np.full((2, n), 6))
    assert compare(gaps, "s0", "s1").reason is None


@pytest.mark.parametrize(("n", "bins"), [(1319, 50), (12, 5), (130, 5), (400, 15), (2000, 50)])
def test_default_bins_keep_the_papers_questions_per_stratum(n, bins):
    assert choose_bins(n) == bins


def exact_mean_abs_gap(p, m):
    """E|X / m - p| for X ~ Bin(m, p): a second batch's gap to an observed first one at p."""
    k = np.arange(m + 1)
    pmf = np.array([math.comb(m, int(x)) * p**x * (1 - p) ** (m - x) for x in k])
    return float(pmf @ np.abs(k / m - p))


@pytest.mark.parametrize("m", [10, 50])
def test_noise_floor_matches_binomial_arithmetic(m):
    p = np.linspace(0.0, 1.0, 41)
    correct = np.round(p * m).astype(int)
    floor = noise_floor(correct, np.full(p.size, m), n_sim=3000, prior="plugin", seed=2)
    expected = np.mean([exact_mean_abs_gap(c / m, m) for c in correct])
    assert floor.a_ppg == pytest.approx(expected, rel=0.03)
    assert floor.a_ppg_upper >= floor.a_ppg and floor.sa_ppg_upper >= floor.sa_ppg


def test_the_empirical_prior_keeps_a_benchmark_of_sure_questions_quiet():
    # Half the questions are never solved, half always: their posteriors stay there, where
    # Jeffreys lets every one of them move like a coin seen once.
    counts = np.r_[np.zeros(100, int), np.full(100, 8)], np.full(200, 8)
    empirical = noise_floor(*counts, n_sim=300)
    jeffreys = noise_floor(*counts, n_sim=300, prior="jeffreys")
    assert empirical.a_ppg < 0.01 < jeffreys.a_ppg
    assert noise_floor(*counts, prior="plugin", n_sim=100).a_ppg == 0


def test_a_second_batch_at_one_m_per_question_reads_as_at_that_m():
    c, m, _, _ = synthetic_runs(n=120, m=10)
    one = noise_floor(c, m, other_samples=6, n_sim=200, seed=3)
    each = noise_floor(c, m, other_samples=np.full(120, 6), n_sim=200, seed=3)
    own = noise_floor(c, m, other_samples=m, n_sim=200, seed=3)
    assert one.sa_ppg == each.sa_ppg and one.samples == each.samples == 6
    assert own.sa_ppg == noise_floor(c, m, n_sim=200, seed=3).sa_ppg
    # More samples on half the questions: a lower floor than 6 everywhere, above 30 everywhere.
    mixed = noise_floor(c, m, other_samples=np.where(np.arange(120) % 2, 6, 30), n_sim=200,
                        seed=3)
    assert noise_floor(c, m, other_samples=30, n_sim=200, seed=3).sa_ppg < mixed.sa_ppg \
        < one.sa_ppg
    assert mixed.samples is None


def test_a_second_batch_draws_each_question_at_its_own_m():
    c, m, _, _ = synthetic_runs(n=50, m=10)
    prior = fit_solve_prior(c, m)
    new_m = np.arange(1, 51)
    draws = prior.draw_second_batch(np.random.default_rng(0), 2000, new_m)
    assert draws.shape == (2000, 50) and np.all(draws <= new_m) and np.all(draws >= 0)
    np.testing.assert_allclose(draws.mean(axis=0) / new_m, prior.posterior_mean, atol=0.04)


@pytest.mark.parametrize("other", [[5, 5], np.zeros(120, int), np.full(120, 2.5)])
def test_a_second_batch_m_that_is_not_one_per_question_is_refused(other):
    c, m, _, _ = synthetic_runs(n=120, m=10)
    with pytest.raises(ValueError, match="other_samples must be"):
        noise_floor(c, m, other_samples=other)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": 1.0}, "level"),
        ({"n_resamples": 0}, "n_resamples"),
        ({"names": ["only-one"]}, "1 names for 3 strategies"),
        ({"draw_clean": np.zeros(300)}, "both draw_clean and draw_mitigated"),
    ],
)
def test_bad_parameters_are_refused(kwargs, message):
    clean, m, mit, mit_m = synthetic_runs()
    with pytest.raises(ValueError, match=message):
        gap_intervals(clean, m, mit, mit_m, **kwargs)


def test_mismatched_question_counts_are_refused():
    clean, m, mit, mit_m = synthetic_runs()
    with pytest.raises(ValueError, match="cover 299 questions but the clean run covers 300"):
        gap_intervals(clean, m, mit[:, 1:], mit_m[:, 1:])
    gaps = gap_intervals(clean, m, mit, mit_m)
    with pytest.raises(ValueError, match="alternative"):
        compare(gaps, "s0", "s1", alternative="both")
