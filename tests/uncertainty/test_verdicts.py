"""The restoration verdict (equivalence test against the noise floor): mechanics by simulation.

Each case simulates counts whose truth is known by construction (a mitigated model with the
clean model's own solve probabilities is restored; one shifted far away is not) and asserts how
often the verdict says so, not any single number. Error rates over many studies are in
tests/uncertainty/test_calibration.py.
"""

import numpy as np
import pytest

from zerogap.uncertainty import (
    MIN_QUESTIONS,
    choose_bins,
    gap_intervals,
    noise_floor,
    restoration_verdicts,
)


def simulate(rng, n, m, shift=0.0):
    p = rng.random(n)
    clean = rng.binomial(m, p)
    mitigated = rng.binomial(m, np.clip(p + shift, 0, 1))
    return clean, np.full(n, m), mitigated[None], np.full((1, n), m)


def verdicts(n, m, shift, trials, seed=0, margin=0.05):
    rng = np.random.default_rng(seed)
    found = []
    for t in range(trials):
        c, cm, mc, mm = simulate(rng, n, m, shift)
        gaps = gap_intervals(c, cm, mc, mm, bins=choose_bins(n), seed=t)
        found.append(restoration_verdicts(gaps, c, cm, mm, margin=margin, n_sim=300)[0])
    return found


def test_a_perfect_restoration_is_called_restored_and_never_not_restored():
    found = verdicts(n=300, m=40, shift=0.0, trials=8)
    assert all(v.outcome != "not restored" for v in found)
    assert sum(v.outcome == "restored" for v in found) >= 7
    # the floor is what the two batches read, so the excess straddles zero
    assert abs(np.mean([v.excess for v in found])) < 0.02


def test_a_far_strategy_is_called_not_restored():
    found = verdicts(n=200, m=20, shift=0.4, trials=5)
    assert all(v.outcome == "not restored" for v in found)
    assert all(v.low > v.margin for v in found)


def test_few_questions_are_inconclusive_and_the_stated_count_resolves_it():
    small = verdicts(n=16, m=4, shift=0.0, trials=6, margin=0.02)
    inconclusive = [v for v in small if v.outcome == "inconclusive"]
    assert len(inconclusive) >= 4
    assert all(v.needed_questions > 16 and v.needed_samples > 4 for v in inconclusive)
    needed = int(np.median([v.needed_questions for v in inconclusive]))
    # The count is where the bound would meet the margin if the excess stayed where it was
    # seen, so at that size a fair share of studies decides (restored), and at four times most
    # do (the strata's own variance, part of se, shrinks more slowly than 1/n at m = 4); none
    # ever calls a perfect restoration "not restored".
    at = verdicts(n=needed, m=4, shift=0.0, trials=10, seed=1, margin=0.02)
    beyond = verdicts(n=4 * needed, m=4, shift=0.0, trials=10, seed=2, margin=0.02)
    assert sum(v.outcome == "restored" for v in at) >= 2
    assert sum(v.outcome == "restored" for v in beyond) >= 5
    assert all(v.outcome != "not restored" for v in (*at, *beyond))


def test_below_the_calibrated_size_the_verdict_says_so():
    (v,) = verdicts(n=MIN_QUESTIONS - 9, m=2, shift=0.0, trials=1)
    assert v.outcome == "inconclusive" and "too few questions" in v.reason
    assert "too few questions" in v.sentence()


def test_bad_margin_is_refused():
    c, cm, mc, mm = simulate(np.random.default_rng(0), 20, 5)
    gaps = gap_intervals(c, cm, mc, mm)
    with pytest.raises(ValueError, match="margin"):
        restoration_verdicts(gaps, c, cm, mm, margin=-1)


def test_verdicts_simulate_each_strategy_floor_at_its_own_m_per_question():
    rng = np.random.default_rng(6)
    p = rng.random(200)
    c, m = rng.binomial(10, p), np.full(200, 10)
    alloc = np.where(np.arange(200) % 2, 4, 16)
    same = rng.binomial(alloc, p)
    gaps = gap_intervals(c, m, same, alloc, bins=5)
    (verdict,) = restoration_verdicts(gaps, c, m, alloc[None], n_sim=300)
    floor = noise_floor(c, m, other_samples=alloc, bins=5, n_sim=300, seed=gaps.seed)
    assert verdict.floor == floor.sa_ppg and verdict.samples == 10
