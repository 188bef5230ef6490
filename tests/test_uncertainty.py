from math import comb

import numpy as np
import pytest

from zerogap.metrics import METRIC_NAMES, restoration_gaps, strata
from zerogap.uncertainty import (
    _linear_metrics,
    _multiplicity,
    _resample_within_strata,
    _stratum_layout,
    bootstrap_gaps,
    compare,
    noise_floor,
)

STRATIFIED = ("sa_ppg", "s_delta_plus", "s_delta_minus")


def synthetic_runs(n=300, m=50, k=3, seed=0):
    rng = np.random.default_rng(seed)
    p_clean = np.where(rng.random(n) < 0.4, 0.0, rng.random(n))
    clean = rng.binomial(m, p_clean)
    shifts = np.array([0.0, 0.2, -0.3])[:k, None]
    mitigated = rng.binomial(m, np.clip(p_clean + shifts, 0, 1))
    return clean, np.full(n, m), mitigated, np.full((k, n), m)


def test_vectorised_replicates_match_metrics_recomputed_per_replicate():
    clean, m, mit, mit_m = synthetic_runs(n=120)
    r_clean, r_mit = clean / m, mit / mit_m
    delta = r_mit - r_clean
    over, under = np.maximum(delta, 0), np.maximum(-delta, 0)
    layout = _stratum_layout(strata(r_clean))
    order, _, sizes, group = layout
    share = np.empty(r_clean.size)
    share[order] = 1.0 / (sizes.size * sizes[group])
    rng = np.random.default_rng(3)
    idx_plain = rng.integers(0, r_clean.size, size=(25, r_clean.size))
    idx_strata = _resample_within_strata(rng, layout, 25)
    plain = _linear_metrics(_multiplicity(idx_plain), over, under, None, None)
    stratified = _linear_metrics(_multiplicity(idx_strata), over, under, None, share)
    for c in range(25):
        for k in range(r_mit.shape[0]):
            a = restoration_gaps(r_clean[idx_plain[c]], r_mit[k, idx_plain[c]])
            b = restoration_gaps(r_clean[idx_strata[c]], r_mit[k, idx_strata[c]])
            # Within-stratum resampling keeps every stratum and its size.
            assert b.strata_sizes == restoration_gaps(r_clean, r_mit[k]).strata_sizes
            for metric in ("g_app", "a_ppg", "delta_plus", "delta_minus"):
                assert plain[metric][k, c] == pytest.approx(getattr(a, metric), abs=1e-12)
            for metric in STRATIFIED:
                assert stratified[metric][k, c] == pytest.approx(getattr(b, metric), abs=1e-12)


@pytest.mark.parametrize("within", [False, True])
def test_bootstrap_is_seeded_and_covers_every_metric(within):
    clean, m, mit, mit_m = synthetic_runs()
    draws = (clean > 25).astype(int), (mit > 25).astype(int)
    kwargs = dict(n_boot=300, within_questions=within, draw_clean=draws[0], draw_mitigated=draws[1])
    a = bootstrap_gaps(clean, m, mit, mit_m, seed=7, **kwargs)
    b = bootstrap_gaps(clean, m, mit, mit_m, seed=7, **kwargs)
    c = bootstrap_gaps(clean, m, mit, mit_m, seed=8, **kwargs)
    assert set(a.replicates) == set(METRIC_NAMES)
    for metric in METRIC_NAMES:
        assert a.replicates[metric].shape == (3, 300)
        np.testing.assert_array_equal(a.replicates[metric], b.replicates[metric])
        assert not np.array_equal(a.replicates["a_ppg"], c.replicates["a_ppg"])
        ci = a.interval("s1", metric)
        assert ci.low <= ci.high


def test_two_level_intervals_are_wider_than_question_level_ones():
    clean, m, mit, mit_m = synthetic_runs(m=10)
    one = bootstrap_gaps(clean, m, mit, mit_m, n_boot=1000, seed=1)
    two = bootstrap_gaps(clean, m, mit, mit_m, n_boot=1000, seed=1, within_questions=True)
    for metric in ("sa_ppg", "a_ppg"):
        w1 = one.interval("s0", metric)
        w2 = two.interval("s0", metric)
        assert w2.high - w2.low > w1.high - w1.low


def test_question_level_interval_covers_the_population_value():
    # Questions drawn from a fixed population with a known mean |Δ|; m is huge so the
    # solve probabilities are exact and only question sampling varies.
    rng = np.random.default_rng(11)
    true_a_ppg = 0.1  # |Δ| = 0.2 on half of the population, 0 on the rest
    hits, trials = 0, 120
    for _ in range(trials):
        clean = rng.integers(0, 6, 150)
        mitigated = clean + 2 * (rng.random(150) < 0.5)
        ten = np.full(150, 10)
        boot = bootstrap_gaps(clean, ten, mitigated, ten, n_boot=400, seed=0)
        ci = boot.interval("s0", "a_ppg")
        hits += ci.low <= true_a_ppg <= ci.high
    coverage = hits / trials
    assert 0.85 <= coverage <= 0.995, coverage


def test_paired_comparison():
    clean, m, mit, mit_m = synthetic_runs()
    same = np.stack([mit[1], mit[1], mit[0]])
    boot = bootstrap_gaps(clean, m, same, np.stack([mit_m[0]] * 3), n_boot=500, names="abc")
    tie = compare(boot, "a", "b")
    assert tie.difference == 0 and tie.low == 0 and tie.high == 0 and tie.p_value == 1.0
    better = compare(boot, "c", "a")
    assert better.difference < 0 and better.high < 0 and better.p_value < 0.01
    worse = compare(boot, "a", "c")
    assert worse.difference == pytest.approx(-better.difference)
    assert compare(boot, "c", "a", metric="a_ppg").difference < 0
    with pytest.raises(ValueError, match="unknown strategy 'z'"):
        compare(boot, "z", "a")


def exact_mean_abs_gap(p, m):
    """E|X - Y| / m for independent X, Y ~ Bin(m, p)."""
    k = np.arange(m + 1)
    pmf = np.array([comb(m, i) * p**i * (1 - p) ** (m - i) for i in k])
    return float(pmf @ np.abs(k[:, None] - k[None, :]) @ pmf) / m


@pytest.mark.parametrize("m", [10, 50])
def test_noise_floor_matches_binomial_arithmetic(m):
    p = np.linspace(0.0, 1.0, 41)
    correct = np.round(p * m).astype(int)
    floor = noise_floor(correct, np.full(p.size, m), n_sim=3000, prior="plugin", seed=2)
    expected = np.mean([exact_mean_abs_gap(c / m, m) for c in correct])
    assert floor.a_ppg == pytest.approx(expected, rel=0.03)
    assert floor.a_ppg_upper >= floor.a_ppg and floor.sa_ppg_upper >= floor.sa_ppg


def test_noise_floor_shrinks_with_more_samples_and_jeffreys_adds_noise_at_zero():
    correct_10, correct_50 = np.full(200, 3), np.full(200, 15)
    small = noise_floor(correct_10, np.full(200, 10), n_sim=500)
    large = noise_floor(correct_50, np.full(200, 50), n_sim=500)
    assert large.sa_ppg < small.sa_ppg and large.a_ppg < small.a_ppg
    zeros = np.zeros(100, int), np.full(100, 50)
    assert noise_floor(*zeros, prior="plugin", n_sim=200).a_ppg == 0
    assert noise_floor(*zeros, prior="jeffreys", n_sim=200).a_ppg > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": 1.0}, "level"),
        ({"n_boot": 0}, "n_boot"),
        ({"names": ["only-one"]}, "1 names for 3 strategies"),
        ({"draw_clean": np.zeros(300)}, "both draw_clean and draw_mitigated"),
    ],
)
def test_bootstrap_rejects_bad_parameters(kwargs, message):
    clean, m, mit, mit_m = synthetic_runs()
    with pytest.raises(ValueError, match=message):
        bootstrap_gaps(clean, m, mit, mit_m, **kwargs)


def test_bootstrap_rejects_mismatched_question_counts():
    clean, m, mit, mit_m = synthetic_runs()
    with pytest.raises(ValueError, match="cover 299 questions but the clean run covers 300"):
        bootstrap_gaps(clean, m, mit[:, 1:], mit_m[:, 1:])
