"""Invariants every restoration metric must satisfy (paper §3), checked over all of them at once."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerogap.metrics import (
    METRIC_NAMES,
    a_ppg,
    g_ap,
    g_app,
    outcome_counts,
    restoration_gaps,
    sa_ppg,
    single_draw,
    solve_probability,
    strata,
)

PROBABILITY_METRICS = [m for m in METRIC_NAMES if m != "g_ap"]


@st.composite
def paired_runs(draw, max_questions=60):
    """A clean and a mitigated run as counts on the same questions (m may differ by question)."""
    n = draw(st.integers(1, max_questions))
    m = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    c_clean = [draw(st.integers(0, mi)) for mi in m]
    c_mit = [draw(st.integers(0, mi)) for mi in m]
    return solve_probability(c_clean, m), solve_probability(c_mit, m)


def reference_sa_ppg(r_clean, r_mitigated, bins):
    """The paper's eq. 13 written as plainly as possible, with exact rational strata."""
    from fractions import Fraction

    groups = {}
    for rc, rm in zip(r_clean, r_mitigated, strict=True):
        b = min(int(Fraction(rc).limit_denominator(10_000) * bins), bins - 1)
        groups.setdefault(b, []).append(abs(rm - rc))
    return sum(sum(g) / len(g) for g in groups.values()) / len(groups)


@settings(max_examples=150, deadline=None)
@given(paired_runs(), st.integers(1, 60))
def test_component_identities(runs, bins):
    gaps = restoration_gaps(*runs, bins=bins)
    assert gaps.a_ppg == pytest.approx(gaps.delta_plus + gaps.delta_minus, abs=1e-12)
    assert gaps.g_app == pytest.approx(abs(gaps.delta_plus - gaps.delta_minus), abs=1e-12)
    assert gaps.sa_ppg == pytest.approx(gaps.s_delta_plus + gaps.s_delta_minus, abs=1e-12)
    assert gaps.g_app <= gaps.a_ppg + 1e-12
    assert sum(gaps.strata_sizes) == gaps.n_questions
    assert list(gaps.strata_used) == sorted(set(gaps.strata_used))
    # The per-stratum parts are what the stratified metrics average.
    assert len(gaps.stratum_delta_plus) == len(gaps.stratum_delta_minus) == len(gaps.strata_used)
    assert gaps.s_delta_plus == pytest.approx(np.mean(gaps.stratum_delta_plus), abs=1e-12)
    assert gaps.s_delta_minus == pytest.approx(np.mean(gaps.stratum_delta_minus), abs=1e-12)
    assert gaps.sa_ppg == pytest.approx(reference_sa_ppg(*runs, bins), abs=1e-9)
    assert gaps.a_ppg == pytest.approx(a_ppg(*runs)) and gaps.g_app == pytest.approx(g_app(*runs))


@settings(max_examples=100, deadline=None)
@given(paired_runs(), st.integers(1, 60))
def test_zero_iff_every_question_restored(runs, bins):
    r_clean, r_mit = runs
    restored = restoration_gaps(r_clean, r_clean, bins=bins)
    assert all(getattr(restored, m) == 0 for m in PROBABILITY_METRICS)
    gaps = restoration_gaps(r_clean, r_mit, bins=bins)
    any_gap = bool(np.any(r_clean != r_mit))
    assert (gaps.a_ppg > 0) == any_gap
    assert (gaps.sa_ppg > 0) == any_gap


@settings(max_examples=100, deadline=None)
@given(paired_runs(), st.randoms(use_true_random=False))
def test_question_permutation_invariance(runs, random):
    r_clean, r_mit = runs
    order = list(range(r_clean.size))
    random.shuffle(order)
    draws = (r_clean > 0.5).astype(int), (r_mit > 0.5).astype(int)
    a = restoration_gaps(r_clean, r_mit, draw_clean=draws[0], draw_mitigated=draws[1])
    b = restoration_gaps(
        r_clean[order], r_mit[order], draw_clean=draws[0][order], draw_mitigated=draws[1][order]
    )
    for metric in METRIC_NAMES:
        assert getattr(a, metric) == pytest.approx(getattr(b, metric), abs=1e-12)
    assert a.strata_sizes == b.strata_sizes


@settings(max_examples=100, deadline=None)
@given(paired_runs())
def test_swapping_models_swaps_the_components(runs):
    r_clean, r_mit = runs
    ab, ba = restoration_gaps(r_clean, r_mit), restoration_gaps(r_mit, r_clean)
    assert ab.delta_plus == pytest.approx(ba.delta_minus)
    assert ab.a_ppg == pytest.approx(ba.a_ppg) and ab.g_app == pytest.approx(ba.g_app)


@settings(max_examples=50, deadline=None)
@given(paired_runs())
def test_one_stratum_reduces_sa_ppg_to_a_ppg(runs):
    gaps = restoration_gaps(*runs, bins=1)
    assert gaps.sa_ppg == pytest.approx(gaps.a_ppg)
    assert gaps.s_delta_plus == pytest.approx(gaps.delta_plus)


def test_strata_are_exact_on_boundaries():
    # Every c/m with m <= 120 must land in floor(c * B / m), computed in integers.
    for bins in (7, 10, 50):
        c, m = np.array([(c, m) for m in range(1, 121) for c in range(m + 1)]).T
        expected = np.minimum(c * bins // m, bins - 1)
        np.testing.assert_array_equal(strata(c / m, bins=bins), expected)


def test_last_stratum_is_closed_and_empty_strata_are_skipped():
    gaps = restoration_gaps([0.0, 1.0, 1.0], [0.0, 0.5, 0.7], bins=4)
    assert gaps.strata_used == (0, 3) and gaps.strata_sizes == (1, 2)
    assert gaps.sa_ppg == pytest.approx((0.0 + 0.4) / 2)


def test_cancellation_example_section_3_2_2():
    delta = 0.3
    r_clean = np.full(100, 0.5)
    r_mit = r_clean + np.where(np.arange(100) % 2 == 0, delta, -delta)
    gaps = restoration_gaps(r_clean, r_mit)
    assert gaps.g_app == pytest.approx(0.0, abs=1e-12)
    assert gaps.a_ppg == pytest.approx(delta)
    assert gaps.delta_plus == pytest.approx(delta / 2) == gaps.delta_minus


def test_all_zero_reads_better_under_a_ppg_and_worse_under_sa_ppg():
    # A weak clean model: most questions never solved, a minority spread over (0, 1].
    rng = np.random.default_rng(0)
    r_clean = np.concatenate([np.zeros(900), rng.uniform(0.05, 1.0, 100)])
    noisy = np.clip(r_clean + rng.normal(0, 0.15, r_clean.size), 0, 1)
    all_zero = np.zeros_like(r_clean)
    assert a_ppg(r_clean, all_zero) < a_ppg(r_clean, noisy)
    assert sa_ppg(r_clean, all_zero) > sa_ppg(r_clean, noisy)


def test_table_2_arithmetic():
    # The paper's LNE-blocking row: Δ- = 0.0836, A-PPG = 0.1879, so Δ+ = 0.1043, G-APP = 0.0207.
    n = 10_000
    r_clean = np.full(n, 0.5)
    delta = np.zeros(n)
    delta[: n // 2] = 2 * 0.1043
    delta[n // 2 :] = -2 * 0.0836
    gaps = restoration_gaps(r_clean, r_clean + delta)
    assert gaps.delta_minus == pytest.approx(0.0836)
    assert gaps.a_ppg == pytest.approx(0.1879)
    assert round(gaps.g_app, 4) == 0.0207


def test_g_ap_reads_single_draws():
    assert g_ap([1, 1, 0, 0], [0, 0, 1, 1]) == 0.0
    assert g_ap([0, 0, 0, 0], [1, 1, 1, 0]) == 0.75
    with pytest.raises(ValueError, match="0/1"):
        g_ap([0.5, 0], [1, 0])


def test_readouts_from_outcomes_and_counts_agree():
    outcomes = [[1, 0, 1, 1], [0, 0], [1]]
    correct, samples = outcome_counts(outcomes)
    np.testing.assert_allclose(solve_probability(correct, samples), [0.75, 0.0, 1.0])
    matrix = np.array([[1, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(outcome_counts(matrix)[0], [2, 0])


def test_single_draw_has_the_right_mean_and_is_seeded():
    correct, samples = np.full(20_000, 3), np.full(20_000, 10)
    draws = single_draw(correct, samples, seed=5)
    assert set(np.unique(draws)) <= {0, 1}
    assert draws.mean() == pytest.approx(0.3, abs=0.015)
    np.testing.assert_array_equal(draws, single_draw(correct, samples, seed=5))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([0.1, 0.2], [0.1]), "different numbers of questions"),
        (([], []), "no questions"),
        (([0.1, 1.2], [0.1, 0.2]), r"\[0, 1\]"),
        (([0.1, np.nan], [0.1, 0.2]), "NaN"),
        (([[0.1]], [[0.2]]), "1-D"),
    ],
)
def test_bad_readouts_are_rejected(args, message):
    with pytest.raises(ValueError, match=message):
        restoration_gaps(*args)


@pytest.mark.parametrize(
    ("correct", "samples", "message"),
    [
        ([3], [0], "at least one sample"),
        ([4], [3], "between 0 and samples"),
        ([-1], [3], "between 0 and samples"),
        ([1.5], [3], "whole numbers"),
    ],
)
def test_bad_counts_are_rejected(correct, samples, message):
    with pytest.raises(ValueError, match=message):
        solve_probability(correct, samples)


def test_bins_must_be_positive():
    with pytest.raises(ValueError, match="bins"):
        strata([0.5], bins=0)
