"""Allocation by design (zerogap.uncertainty.allocation): what the rule gives each question.

The calibration of allocated studies (bias, coverage, false positives over simulated studies
whose truth is known) is in test_calibration.py; the difference interval, the noise floor and
the verdicts at a different m per question in test_uncertainty.py and test_verdicts.py.
"""

import numpy as np
import pytest

from zerogap.uncertainty import allocate_samples, stratum_weights


def clean_batch(n=300, m=20, seed=0):
    """True solve probabilities and one batch of a clean model that never solves 40% of the
    questions and spreads the rest (U-shaped)."""
    rng = np.random.default_rng(seed)
    p = np.where(rng.random(n) < 0.4, 0.0, rng.beta(0.7, 0.7, n))
    return p, rng.binomial(m, p), np.full(n, m)


def pilot_of(p, m=4, seed=1):
    """A pilot of two strategies: one equal to the clean model, one inflating every question."""
    rng = np.random.default_rng(seed)
    q = np.stack([p, np.minimum(p + 0.3, 1.0)])
    return rng.binomial(m, q), np.full(q.shape, m)


def test_a_budget_is_spent_and_not_exceeded():
    _, c, m = clean_batch()
    for budget in (2, 5.5, 12):
        plan = allocate_samples(c, m, budget=budget, bins=10)
        assert plan.mean_samples <= budget
        assert plan.mean_samples > 0.9 * budget
        assert plan.samples.dtype.kind == "i" and plan.samples.min() >= 1


def test_a_larger_budget_never_takes_samples_away():
    # What lets a study raise its budget by sampling only what is missing.
    _, c, m = clean_batch()
    pilot = pilot_of(clean_batch()[0])
    plans = [allocate_samples(c, m, *pilot, budget=b, bins=10) for b in (3, 4, 8, 20)]
    for smaller, larger in zip(plans, plans[1:], strict=False):
        assert np.all(smaller.samples <= larger.samples)


def test_every_stratum_gets_an_equal_share_without_a_pilot():
    # m ∝ w: the questions of a stratum together weigh 1 / |B| in SA-PPG, so each stratum the
    # clean batch surely fills gets the same samples, however many questions share it.
    n = 210
    c = np.r_[np.zeros(200, int), np.full(10, 10)]  # 200 never solved, 10 always
    plan = allocate_samples(c, np.full(n, 10), budget=20, bins=5)
    low, high = plan.samples[:200], plan.samples[200:]
    assert np.unique(low).size == 1 and np.unique(high).size == 1
    assert high.sum() == pytest.approx(low.sum(), rel=0.05)


def test_weights_follow_where_the_reference_batch_will_place_each_question():
    p, c, m = clean_batch(n=400, m=30, seed=3)
    plan = allocate_samples(c, m, budget=10, bins=10)
    # Close to the weights of another batch of the same model, but never those of one draw.
    rng = np.random.default_rng(4)
    drawn = np.mean([stratum_weights(rng.binomial(30, p) / 30, 10) for _ in range(200)], axis=0)
    assert np.corrcoef(plan.weights, drawn)[0, 1] > 0.95
    assert plan.weights.sum() == pytest.approx(1.0, abs=0.1)
    # Questions the clean model never solves share the largest stratum: the least weight.
    assert plan.weights[p == 0].max() < np.median(plan.weights[p > 0])


def test_weights_are_those_of_the_batch_that_will_be_scored():
    # Half the questions never solved, half at 0.75: at the batch's own m = 20 they fill the
    # two strata of B = 2 equally and weigh alike. A reference batch of one sample per question
    # would send a quarter of the latter down among the never-solved ones, and leave the rest
    # fewer in the upper stratum: they weigh more.
    n = 300
    c = np.r_[np.zeros(150, int), np.full(150, 15)]
    own = allocate_samples(c, np.full(n, 20), budget=5, bins=2).weights
    assert own[:150] == pytest.approx(own[150:], rel=0.05)
    single = allocate_samples(c, np.full(n, 20), budget=5, bins=2, reference_samples=1).weights
    assert single[150:].min() > 1.3 * single[:150].max()


def test_a_pilot_spends_nothing_where_every_strategy_is_sure():
    rng = np.random.default_rng(5)
    n = 200
    p = np.r_[np.zeros(100), rng.uniform(0.2, 0.8, 100)]
    c = rng.binomial(20, p)
    # Strategies that never solve the first half of the questions either (seen so 20 times).
    pilot = rng.binomial(20, np.stack([p, p])), np.full((2, n), 20)
    plan = allocate_samples(c, np.full(n, 20), *pilot, budget=10, bins=5)
    assert plan.samples[:100].max() == 1
    assert plan.spread[:100].max() < 0.05 < plan.spread[100:].min()


def test_bounds_hold():
    _, c, m = clean_batch()
    plan = allocate_samples(c, m, budget=6, bins=10, min_samples=3, max_samples=15)
    assert plan.samples.min() >= 3 and plan.samples.max() <= 15 and plan.mean_samples <= 6


def test_a_target_half_width_is_met_with_the_fewest_samples_of_the_rule():
    p, c, m = clean_batch()
    pilot = pilot_of(p)
    plan = allocate_samples(c, m, *pilot, target_half_width=0.025, names=["a", "b"], bins=10)
    assert set(plan.half_widths) == {"a", "b", "a - b"}
    assert max(plan.half_widths.values()) <= 0.025
    # The same rule with a budget just below what it spent misses the target.
    fewer = allocate_samples(c, m, *pilot, budget=plan.mean_samples - 0.5, bins=10)
    assert max(fewer.half_widths.values()) > 0.025
    # A uniform study reaches the same largest half-width only with more samples.
    assert plan.uniform_samples > plan.mean_samples


def test_the_uniform_equivalent_of_a_uniform_allocation_is_itself():
    # One stratum and a pilot in which every question looks alike: the rule has nothing to
    # prefer, so it allocates uniformly, and a uniform study needs as many samples.
    n = 100
    c = np.full(n, 5)
    plan = allocate_samples(c, np.full(n, 10), np.full((2, n), 2), np.full((2, n), 4),
                            budget=12, bins=1)
    assert np.all(plan.samples == 12) and plan.uniform_samples == 12


def test_targets_out_of_reach_say_why():
    p, c, m = clean_batch()
    pilot = pilot_of(p)
    with pytest.raises(ValueError, match="clean batch's own noise gives"):
        allocate_samples(c, m, *pilot, target_half_width=0.001, bins=10)
    with pytest.raises(ValueError, match="out of reach with max_samples = 3"):
        allocate_samples(c, m, *pilot, target_half_width=0.02, bins=10, max_samples=3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of budget and target_half_width"),
        ({"budget": 5, "target_half_width": 0.1}, "exactly one of"),
        ({"target_half_width": 0.05}, "needs pilot counts"),
        ({"budget": 0.5}, "budget must be a number of at least min_samples"),
        ({"budget": "5"}, "budget must be a number"),
        ({"target_half_width": -0.1}, "target_half_width must be positive"),
        ({"budget": 5, "min_samples": 0}, "min_samples must be a positive integer"),
        ({"budget": 5, "max_samples": 2, "min_samples": 3}, "max_samples must be"),
        ({"budget": 5, "reference_samples": [10, 10]}, "reference_samples must be one number"),
        ({"budget": 5, "level": 1.5}, "level"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    _, c, m = clean_batch()
    with pytest.raises(ValueError, match=message):
        allocate_samples(c, m, **kwargs)


def test_a_pilot_must_match_the_clean_batch():
    p, c, m = clean_batch()
    first, samples = pilot_of(p)
    with pytest.raises(ValueError, match="covers 299 questions but the clean batch covers 300"):
        allocate_samples(c, m, first[:, 1:], samples[:, 1:], budget=5)
    with pytest.raises(ValueError, match="both pilot_correct and pilot_samples"):
        allocate_samples(c, m, first, budget=5)
    with pytest.raises(ValueError, match="1 names for 2 strategies"):
        allocate_samples(c, m, first, samples, budget=5, names=["a"])


def _shared(rng, p, m):
    """Counts (K, N) and joint counts (K, K, N) of strategies sampled on one noise."""
    from zerogap.uncertainty.calibration import shared_outcomes

    return shared_outcomes(rng, p, np.full(p.shape, m))


def test_shared_noise_narrows_a_difference_most_where_the_samples_are_the_same():
    from zerogap.uncertainty import difference_interval, gap_intervals

    rng = np.random.default_rng(3)
    n, m = 200, 10
    p = rng.beta(0.7, 0.7, n)
    moved = np.where(np.arange(n) < n // 2, np.minimum(p + 0.3, 1.0), p)
    for strategies, most in ((np.stack([p, p]), 0.6), (np.stack([moved, p]), 1.0)):
        counts, joint = _shared(rng, strategies, m)
        apart = gap_intervals(rng.binomial(m, p), np.full(n, m), counts, np.full((2, n), m),
                              bins=5, n_resamples=1)
        paired = gap_intervals(rng.binomial(m, p), np.full(n, m), counts, np.full((2, n), m),
                               bins=5, n_resamples=1, joint_correct=joint)
        wide, narrow = (difference_interval(g, "s0", "s1") for g in (apart, paired))
        assert narrow.high - narrow.low < most * (wide.high - wide.low)
        assert narrow.low <= narrow.estimate <= narrow.high


def test_impossible_joint_counts_are_refused():
    from zerogap.uncertainty import gap_intervals

    with pytest.raises(ValueError, match="joint counts must lie"):
        gap_intervals([3] * 12, [5] * 12, [[2] * 12, [2] * 12], [[5] * 12] * 2,
                      joint_correct=np.full((2, 2, 12), 3))
    with pytest.raises(ValueError, match="joint_correct must have shape"):
        gap_intervals([3] * 12, [5] * 12, [[2] * 12, [2] * 12], [[5] * 12] * 2,
                      joint_correct=np.zeros((2, 12)))


def test_the_reference_is_allocated_upward_most_where_a_question_is_alone():
    rng = np.random.default_rng(4)
    n = 200
    p = np.r_[np.zeros(150), np.linspace(0.05, 0.95, 50)]
    c, m = rng.binomial(20, p), np.full(n, 20)
    plan = allocate_samples(c, m, budget=10, bins=10, reference_strategies=5)
    assert np.all(plan.reference >= 20)
    assert plan.reference[:150].max() == 20  # one crowded stratum: the study's m suffices
    assert plan.reference[150:].max() > 20
    kept = allocate_samples(c, m, budget=10, bins=10)
    assert np.all(kept.reference == 20) and np.array_equal(kept.samples, plan.samples)


@pytest.mark.parametrize("pilots", [1, 3])
def test_the_reference_rule_prices_one_strategys_spread_whatever_the_pilots(pilots):
    """Neyman's ratio r_q / m_q = √K σ_clean / σ_strategy: with pilots that sample like the
    clean model, σ_strategy = σ_clean, so the ratio is √K however many strategies were piloted
    (a study pilots a filter as well, which adds no strategy samples)."""
    rng = np.random.default_rng(7)
    n, k = 200, 4
    p = np.r_[np.zeros(50), np.linspace(0.05, 0.95, 150)]
    c, m = rng.binomial(20, p), np.full(n, 20)
    plan = allocate_samples(c, m, np.stack([c] * pilots), np.stack([m] * pilots), budget=6,
                            bins=10, reference_strategies=k, reference_samples=1)
    ratio = plan.reference / plan.samples
    solved = (c > 0) & (c < 20)
    assert np.allclose(ratio[solved], np.sqrt(k), atol=0.5 / plan.samples[solved].min())


def test_targets_buy_fewer_samples_with_the_reference_allocated_and_shared_noise():
    rng = np.random.default_rng(5)
    n = 300
    p = np.r_[np.zeros(100), rng.beta(0.7, 0.7, 200)]
    c, m = rng.binomial(20, p), np.full(n, 20)
    pilot, joint = _shared(rng, np.stack([p, np.minimum(p + 0.1, 1.0)]), 4)
    samples = np.full(pilot.shape, 4)
    plain = allocate_samples(c, m, pilot, samples, target_half_width=0.04, bins=10)
    paired = allocate_samples(c, m, pilot, samples, joint, target_half_width=0.04, bins=10)
    upward = allocate_samples(c, m, pilot, samples, joint, target_half_width=0.04, bins=10,
                              reference_strategies=2)
    assert paired.samples.sum() <= plain.samples.sum()
    assert upward.samples.sum() <= paired.samples.sum()
    assert max(upward.half_widths.values()) <= 0.04 and np.all(upward.reference >= 20)


def test_a_plan_at_uniform_m_shifts_nothing_and_fewer_samples_inflate():
    from zerogap.uncertainty import allocation_shift

    rng = np.random.default_rng(6)
    n, m = 300, 10
    p = rng.beta(0.5, 1.0, n)
    clean, mit = rng.binomial(m, p), rng.binomial(m, [p, np.minimum(p + 0.2, 1)])
    same, se = allocation_shift(clean, np.full(n, m), mit, np.full((2, n), m), m, m, m,
                                bins=5)
    assert np.all(np.abs(same) <= 4 * se + 1e-12)
    fewer, se = allocation_shift(clean, np.full(n, m), mit, np.full((2, n), m), 3, m, m,
                                 bins=5)
    assert np.all(fewer > 3 * se)
