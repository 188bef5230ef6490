"""The restoration verdict (equivalence test against the noise floor), checked by simulation.

Each case simulates counts whose truth is known by construction (a mitigated model with the
clean model's own solve probabilities is restored; one shifted far away is not) and asserts how
often the verdict says so, not any single number.
"""

import numpy as np
import pytest

from zerogap.uncertainty import restoration_verdicts

FAST = dict(n_boot=300, n_sim=300)


def simulate(rng, n, m, shift=0.0):
    p = rng.random(n)
    clean = rng.binomial(m, p)
    mitigated = rng.binomial(m, np.clip(p + shift, 0, 1))
    return clean, np.full(n, m), mitigated[None], np.full((1, n), m)


def outcomes(n, m, shift, trials, seed=0):
    rng = np.random.default_rng(seed)
    found = []
    for t in range(trials):
        c, cm, mc, mm = simulate(rng, n, m, shift)
        found.append(restoration_verdicts(c, cm, mc, mm, names=["s"], seed=t, **FAST)[0])
    return found


def test_a_perfect_restoration_is_called_restored_and_never_not_restored():
    found = outcomes(n=300, m=40, shift=0.0, trials=8)
    assert all(v.outcome != "not restored" for v in found)
    assert sum(v.outcome == "restored" for v in found) >= 7
    # the floor is what the two batches read, so the excess straddles zero
    assert np.mean([v.excess for v in found]) < 0.02


def test_a_far_strategy_is_called_not_restored():
    found = outcomes(n=200, m=20, shift=0.4, trials=5)
    assert all(v.outcome == "not restored" for v in found)
    assert all(v.low > v.margin for v in found)


def test_few_questions_are_inconclusive_and_the_stated_count_resolves_it():
    small = outcomes(n=12, m=8, shift=0.0, trials=6)
    inconclusive = [v for v in small if v.outcome == "inconclusive"]
    assert len(inconclusive) >= 4
    assert all(v.needed_questions > 12 for v in inconclusive)
    needed = int(np.median([v.needed_questions for v in inconclusive]))
    # Simulating the study again with the stated number of questions decides it (restored).
    larger = outcomes(n=needed, m=8, shift=0.0, trials=6, seed=1)
    assert sum(v.outcome == "restored" for v in larger) >= 4
    assert all(v.outcome != "not restored" for v in larger)


def test_more_samples_alone_cannot_resolve_spread_between_questions():
    # m is already huge, so the sampling part of the variance is negligible: only questions help
    v = outcomes(n=10, m=2000, shift=0.15, trials=1)[0]
    if v.outcome == "inconclusive":
        assert v.needed_samples is None or v.needed_samples > 2000
    assert v.se_questions <= v.se * 1.2


def test_bad_margin_and_level_are_refused():
    c, cm, mc, mm = simulate(np.random.default_rng(0), 20, 5)
    with pytest.raises(ValueError, match="margin"):
        restoration_verdicts(c, cm, mc, mm, names=["s"], margin=-1, **FAST)
    with pytest.raises(ValueError, match="level"):
        restoration_verdicts(c, cm, mc, mm, names=["s"], level=1.5, **FAST)
