"""The calibration suite: intervals, paired tests, verdicts and the noise floor over simulated
studies whose truth is known (:mod:`zerogap.uncertainty.calibration`).

Criteria hold by construction of the methods, not by any seed: each rate is read over at least
200 seeded replicates and judged by its 95% Wilson interval. A rate the method must keep at or
below nominal (false positives, wrong verdicts) fails only when the interval lies wholly above
it; coverage fails when the interval lies wholly below nominal (or when it is so wide that it
says nothing: at most 0.995 covered). One configuration runs in the default suite; the rest are
slow-marked (CI runs them too).
"""

import numpy as np
import pytest

from zerogap.uncertainty.calibration import (
    DEMO,
    PAPER,
    PAPER_MATCHED,
    Profile,
    allocation_check,
    floor_agreement,
    interval_coverage,
    paired_null,
    sample_noise,
    shared_outcomes,
    verdict_errors,
)

NOMINAL = 0.05
REPS = 200


def assert_at_most_nominal(rate):
    low, _ = rate.interval
    assert low <= NOMINAL, f"{rate}: rejects a true null too often"


def assert_near_nominal(rate):
    low, high = rate.interval
    assert low <= NOMINAL <= high, f"{rate}: false-positive rate away from {NOMINAL}"


def test_paired_test_holds_its_level_on_a_mid_sized_benchmark():
    rate = paired_null(40, 8, 5, REPS, metric="sa_ppg", resamples=999)
    assert rate.untestable < REPS // 4
    assert_near_nominal(rate)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m", "bins", "shift"), [
    (12, 6, 50, 0.0),     # the old demo's size: mostly untestable, never anti-conservative
    (100, 10, 10, 0.3),   # strategies that move half the questions
    (200, 1, 5, 0.0),     # one sample per question
    (400, 50, 50, 0.2),
])
@pytest.mark.parametrize("metric", ["sa_ppg", "a_ppg", "g_app"])
def test_paired_test_holds_its_level(n, m, bins, shift, metric):
    rate = paired_null(n, m, bins, REPS, metric=metric, shift=shift, resamples=999, seed=n)
    if n >= 100:
        assert rate.untestable == 0
    if n >= 100 and metric != "g_app":
        assert_near_nominal(rate)
    else:
        # Few testable replicates, or |mean Δ|'s many ties at small m: the exact test keeps
        # its level and may sit below it.
        assert_at_most_nominal(rate)


def test_the_weak_null_holds_its_level_when_strategies_differ_question_by_question():
    # a moves one random half of the questions, b the other: they differ on every question
    # and are equal on average over new benchmarks, by symmetry. The weak null's test keeps
    # its level; the swap test, whose sharp null is false here, rejects less (it is wider).
    for metric in ("sa_ppg", "a_ppg"):
        weak = paired_null(40, 8, 5, REPS, metric=metric, shift=0.3, uneven=True, null="mean",
                           resamples=9)
        assert weak.untestable == 0
        assert_near_nominal(weak)
    sharp = paired_null(40, 8, 5, REPS, shift=0.3, uneven=True, resamples=999)
    assert_at_most_nominal(sharp)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m", "bins", "shift", "uneven"), [
    (12, 6, 5, 0.3, True),     # strata of two or three questions, many of them alone
    (40, 8, 5, 0.0, False),    # lone mid-range strata: where a pooled variance failed
    (100, 10, 10, 0.3, True),  # ten strata
    (128, 8, 5, 0.3, False),   # the demo's size
    (128, 8, 5, 0.3, True),
    (200, 4, 5, 0.3, True),    # few samples per question
])
def test_the_weak_null_holds_its_level(n, m, bins, shift, uneven):
    rate = paired_null(n, m, bins, 400, shift=shift, uneven=uneven, null="mean", resamples=9,
                       seed=n + m)
    if n >= 24:
        assert rate.untestable < 40
        assert_near_nominal(rate)
    else:
        assert_at_most_nominal(rate)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m", "bins", "shift"), [
    (12, 6, 50, 0.0),
    (100, 10, 10, 0.3),
    (200, 1, 5, 0.0),
    (400, 50, 50, 0.2),
])
def test_strategy_intervals_cover_the_expected_sa_ppg(n, m, bins, shift):
    rate = interval_coverage(n, m, bins, REPS, shift=shift, seed=n)
    low, high = rate.interval
    assert high >= 1 - NOMINAL, f"{rate}: under-covers"
    if m >= 2:
        # From one sample per question only the mean solve probability is identifiable, not
        # its spread, so at m = 1 the sampling variance (and the interval) stays conservative.
        assert rate.rate <= 0.995, f"{rate}: too wide to say anything"


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(40, 8), (200, 20)])
def test_a_restored_strategy_is_rarely_called_not_restored(n, m):
    rate, _ = verdict_errors(n, m, REPS, shift=0.0, seed=n)
    assert_at_most_nominal(rate)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(40, 8), (200, 20)])
def test_an_excess_of_twice_the_margin_is_rarely_called_restored(n, m):
    rate, margin = verdict_errors(n, m, REPS, shift=0.4, seed=n)
    assert margin > 0
    assert_at_most_nominal(rate)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(40, 8), (200, 6), (400, 20)])
def test_the_simulated_floor_matches_a_measured_second_batch(n, m):
    simulated, measured, se = floor_agreement(n, m, 60, seed=n)
    # Within 10% of the measured floor, or within three standard errors of it.
    assert abs(simulated - measured) <= max(0.10 * measured, 3 * se), (simulated, measured, se)


def test_the_power_calculation_builds_the_effect_it_is_asked_for():
    import numpy as np

    from zerogap.uncertainty import choose_bins
    from zerogap.uncertainty.calibration import benchmark, expected_sa_ppg, planned_pair

    rng = np.random.default_rng(0)
    p = benchmark(48, rng)
    leaked = np.arange(48) < 24
    a, b = planned_pair(p, leaked, 0.135, 12, choose_bins(48), rng)
    # the strategies move only the leaked questions, a between the clean model and b
    assert np.array_equal(a[~leaked], p[~leaked]) and np.array_equal(b[~leaked], p[~leaked])
    assert np.all((a >= p - 1e-12) & (a <= b + 1e-12))
    difference = (expected_sa_ppg(p, b, 12, choose_bins(48), rng, sims=20000)
                  - expected_sa_ppg(p, a, 12, choose_bins(48), rng, sims=20000))
    assert difference == pytest.approx(0.135, abs=0.01)
    with pytest.raises(ValueError, match="exceeds"):
        planned_pair(p, leaked, 0.9, 12, choose_bins(48), rng)


@pytest.mark.slow
def test_power_grows_with_the_questions():
    from zerogap.uncertainty.calibration import paired_power

    few, half_few = paired_power(16, 8, REPS, seed=1)
    many, half_many = paired_power(96, 8, REPS, seed=1)
    # a true difference of 0.135 is found more often, and the interval narrows, with 6x the
    # questions (the half-width by about sqrt(6))
    assert many.interval[0] > few.interval[1]
    assert half_many < half_few / 1.8


def _measured(leaked_mitigated, m=12, n=48, seed=0):
    """Counts of a measured study: the clean model never solves any question, Identity solves
    the leaked half always, and the mitigation solves each leaked question at
    ``leaked_mitigated`` (an array over the leaked questions); nobody solves the other half, so
    every question shares one stratum and only the leaked terms vary."""
    import numpy as np

    rng = np.random.default_rng(seed)
    leaked = np.arange(n) < n // 2
    clean = np.zeros(n)
    identity = np.where(leaked, 1.0, 0.0)
    mitigated = np.where(leaked, np.resize(leaked_mitigated, n), 0.0)
    counts = [(rng.binomial(m, p), np.full(n, m)) for p in (clean, mitigated, identity)]
    return (*counts, leaked)


def test_a_mitigation_that_moves_questions_unevenly_needs_more_questions():
    import numpy as np

    from zerogap.uncertainty.calibration import measured_power

    # Both mitigations halve Identity's inflation on average; one by solving every leaked
    # question half the time, the other by restoring half of them fully and leaving the rest.
    # Only the second varies between questions, so its estimate spreads more at any m: by
    # construction about sqrt(m) times more (the terms' variances are 1/4 and 1/(4 m)), here
    # at least twice; the swap test's interval follows the terms' root mean square, sqrt(2)
    # times larger. The study is measured at m = 40 so that the posteriors are sharp.
    even = measured_power(*_measured(np.array([0.5]), m=40), 48, 12, 30, resamples=200)
    uneven = measured_power(*_measured(np.array([0.0, 1.0]), m=40), 48, 12, 30, resamples=200)
    assert even.difference == pytest.approx(uneven.difference, abs=0.08)
    assert uneven.sd > 2 * even.sd
    assert uneven.half_width > 1.2 * even.half_width
    # the normal-approximation power falls as the spread grows, for the same effect
    assert uneven.power_for(0.135) < even.power_for(0.135)


def test_measured_power_refuses_a_study_without_both_kinds_of_question():
    import numpy as np

    from zerogap.uncertainty.calibration import measured_power

    clean, a, b, leaked = _measured(np.array([0.5]))
    with pytest.raises(ValueError, match="leaked and unleaked"):
        measured_power(clean, a, b, np.ones_like(leaked), 48, 12, 2)


@pytest.mark.slow
def test_the_weak_null_interval_is_as_wide_as_the_estimate_spreads():
    import numpy as np

    from zerogap.uncertainty.calibration import measured_power

    # A mitigation measured (m = 40, so the posteriors are sharp) as helping every leaked
    # question fully (the clean model never solves them, Identity always does) and damaging
    # the others (the clean model and Identity always solve them, the mitigation half the
    # time): per-question differences -1 and about +0.5, each in its own clean stratum. The
    # swap test's interval follows their root mean square; by construction the estimate
    # varies only through the damaged questions' binomial noise, which is what the weak null's
    # interval follows: it is much narrower, near 1.96 sd, and holds the mean estimate.
    rng = np.random.default_rng(0)
    leaked = np.arange(48) < 24
    truth = {"clean": np.where(leaked, 0.0, 1.0), "mitigation": np.where(leaked, 0.0, 0.5),
             "identity": np.ones(48)}
    counts = {k: (rng.binomial(40, p), np.full(48, 40)) for k, p in truth.items()}
    study = (counts["clean"], counts["mitigation"], counts["identity"], leaked)
    mean = measured_power(*study, 96, 8, REPS, null="mean", resamples=9, seed=5)
    sharp = measured_power(*study, 96, 8, REPS, resamples=999, seed=5)
    assert mean.sd == sharp.sd and mean.difference == sharp.difference
    low, high = mean.covered.interval
    assert low <= 1 - NOMINAL <= high, f"{mean.covered}: coverage away from 0.95"
    assert mean.half_width == pytest.approx(1.96 * mean.sd, rel=0.2)
    assert mean.half_width < 0.5 * sharp.half_width


@pytest.mark.slow
def test_measured_power_holds_its_level_between_equal_strategies():
    import numpy as np

    from zerogap.uncertainty.calibration import measured_power

    # a and b measured alike (the same true solve probabilities): the one-sided test rejects
    # "a below b" at most at its nominal level.
    clean, a, _, leaked = _measured(np.array([0.0, 1.0]))
    rate = measured_power(clean, a, a, leaked, 48, 12, REPS, resamples=999).rejected
    assert_at_most_nominal(rate)


def test_the_profiles_look_like_the_studies_they_stand_for():
    import numpy as np

    for profile in (PAPER, *PAPER_MATCHED):  # nearly a quarter at 0/50, mean 0.22
        rng = np.random.default_rng(0)
        clean, railcap, identity = profile.draw(rng)
        assert abs((rng.binomial(50, clean) == 0).mean() - 0.23) < 0.04
        assert abs(clean.mean() - 0.22) < 0.03
    assert np.all(identity >= clean) and identity.mean() - clean.mean() > 0.25
    assert np.any(railcap < clean) and np.any(railcap > clean)  # helps some, harms others
    clean, _, identity = DEMO.draw(np.random.default_rng(0))
    assert abs((clean == 0).mean() - 0.20) < 0.08 and DEMO.n == 128 and DEMO.bins == 5


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "budget", "pilot", "reps"), [
    (DEMO, 5, 0, 100),  # the demo's precision at m = 8 for about 5 samples per question
    (DEMO, 4, 2, 100),  # a pilot of two samples per strategy gives the spread, then 4 more
    (PAPER, 20, 0, 30),  # the paper's size, about 20 samples and the reference allocated
])
def test_allocated_studies_are_unbiased_and_hold_their_rates(profile, budget, pilot, reps):
    # The allocation comes from the clean model's second batch (and a pilot the estimate does
    # not score): given it, every scored count is binomial at a fixed m. So the estimates are
    # unbiased for their expectation at the allocated m, the intervals cover it and the tests
    # of two strategies equal in distribution hold their level, whether the two moved questions
    # or not.
    # Nine rates a design, 27 in all, so each is judged by its 99.9% Wilson interval: with 95%
    # ones, exact tests at 5% would fail one of the 27 in about one run of four.
    # The criteria are the bench's (--check): bias within a quarter of the stated half-width,
    # coverage and false positives judged by 99.9% Wilson intervals.
    check = allocation_check(profile, reps, budget=budget, pilot=pilot, seed=7,
                             reference_strategies=5)
    assert check.mean_samples <= budget
    assert check.failures() == []


def test_the_check_fails_a_broken_plan():
    # The copies sampled at a fraction of the plan's m are no longer equal in distribution to
    # what they copy: their paired tests must reject, and the criteria must say so.
    small = Profile("small", n=60, m=8, bins=5, at_zero=0.2, at_one=0.15, shape=(0.7, 0.7),
                    memorised=0.97, kept=0.3, damaged=0.4)
    broken = allocation_check(small, 40, budget=5, twin_share=0.25, resamples=199,
                              truth_sims=50, seed=3)
    failures = broken.failures()
    assert any(line.startswith("false positives, moved") for line in failures), failures


def test_outcomes_on_sample_major_noise_keep_each_questions_first_samples():
    # Common random numbers across designs (bench/bench_allocation.py): on noise laid out by
    # sample index, a plan that gives some questions more samples leaves every other question's
    # outcomes as they were and only adds to the others'. On noise laid out by question (the
    # default draw), the same seed reads other outcomes as soon as the widest plan widens.
    rng = np.random.default_rng(5)
    n = 80
    p = rng.random((2, n))
    few = rng.integers(1, 6, n)
    more = few + rng.integers(0, 2, n) * rng.integers(1, 8, n)
    found = {}
    for plan in (few, more):
        samples = np.stack([plan, plan])
        noise = sample_noise(np.random.default_rng(9), n, int(plan.max()))
        found[len(found)] = shared_outcomes(None, p, samples, noise=noise)
    (c_few, j_few), (c_more, j_more) = found.values()
    same = few == more
    assert same.any() and not same.all()
    np.testing.assert_array_equal(c_few[:, same], c_more[:, same])
    np.testing.assert_array_equal(j_few[..., same], j_more[..., same])
    assert np.all(c_more >= c_few) and np.all(j_more >= j_few)
    # one uniform per (question, sample) for every strategy: the joint count of a strategy
    # with itself is its count, and a pair's is at most the smaller count
    assert np.array_equal(j_more[0, 0], c_more[0])
    assert np.all(j_more[0, 1] == np.minimum(c_more[0], c_more[1]))
    apart = [shared_outcomes(np.random.default_rng(9), p, np.stack([plan, plan]))[0]
             for plan in (few, more)]
    assert not np.array_equal(apart[0][:, same], apart[1][:, same])
    with pytest.raises(ValueError, match="noise must have shape"):
        shared_outcomes(None, p, np.stack([more, more]), noise=sample_noise(rng, n, 1))
