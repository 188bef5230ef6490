"""The paper's findings F1-F3 as tests: outcomes on counts built so that each holds, or is
reversed, by construction (200 questions, m = 50: differences far beyond the tests' noise);
the rule's logic on hand-set p-values; preconditions; F3's binomial expectation. The rule's
false-verdict rates over simulated studies whose truth is known: test_findings_simulated.py.
"""

import math

import numpy as np
import pytest

from zerogap.analysis.design import (
    CLEAN_BELOW_APPG,
    KEYS,
    NO_FLOOR_POOLED,
    NO_SPILL_OVER,
    ROUGE_LEAKED,
    ROUGE_UNLEAKED,
    SPREAD_POOLED,
    TRIGGER_CLEAN,
    TRIGGER_LEAKED,
    TRIGGER_UNLEAKED,
)
from zerogap.analysis.findings import (
    OUTCOMES,
    PRECONDITIONS,
    PROTECTED,
    answer_slot,
    binomial_f3,
    findings,
    holm,
    outcome,
)
from zerogap.analysis.findings import (
    Test as ClaimTest,
)
from zerogap.io.counts import QuestionCounts
from zerogap.uncertainty import gap_intervals
from zerogap.uncertainty.calibration import benchmark

M = 50
# 180 questions the clean model solves 2% of the time, 10 at 50%, 10 at 98%
CLEAN = np.array([1] * 180 + [25] * 10 + [49] * 10)
# One more correct sample on every other question: per-question differences then spread inside
# each stratum, as sampled counts always do (the weak null's test reads that spread).
JITTER = np.tile([0, 1], CLEAN.size // 2)
IDS = tuple(f"q{i}" for i in range(CLEAN.size))


def counts(correct, first=None) -> QuestionCounts:
    correct = np.asarray(correct)
    return QuestionCounts("(test)", IDS, correct, np.full(correct.size, M),
                          None if first is None else np.asarray(first))


def run(strategies, repeat=None, clean_first=None):
    found = findings(counts(CLEAN, clean_first), strategies, repeat, bins=50, n_resamples=400,
                     seed=0)
    return {f.key: f for f in found}


def paper_like():
    """RailCap equals the clean model up to the jitter; identity adds 0.3 to every solve
    probability (capped):
    All-Zero then reads a smaller A-PPG than identity (most questions sit near 0) but the
    largest SA-PPG (its gap is 0.5 and 0.98 in the upper strata)."""
    return {
        "identity": counts(np.minimum(CLEAN + 15 + JITTER, M)),
        "ted": counts(np.minimum(CLEAN + 10 + JITTER, M)),
        "railcap": counts(np.minimum(CLEAN + JITTER, M)),
        "all-zero": counts(np.zeros_like(CLEAN)),
    }


def test_findings_reproduced_where_they_hold_by_construction():
    first = np.tile([0, 1], CLEAN.size // 2)
    got = run(paper_like(), repeat=counts(CLEAN, 1 - first), clean_first=first)
    assert [got[k].outcome for k in ("F1", "F2", "F3")] == ["reproduced"] * 3
    f1 = got["F1"]
    assert [t.claim for t in f1.tests] == [f"SA-PPG(railcap) - ({b})"
                                           for b in ("identity", "ted", "all-zero")]
    assert all(t.high < 0 and t.difference < 0 for t in f1.tests)
    # F3: every 0/1 pair differs (gap 1), the solve probabilities are equal (gap 0)
    assert "mean |0/1 difference| 1.000 vs mean |solve-probability difference| 0.000" \
        in got["F3"].statistic


def test_ablation_rows_stay_out_of_f1_and_f2():
    """A RailCap variant worse than All-Zero (an ablation row) leaves both findings as the
    paper's comparison makes them: F2 tests RailCap and the baselines only."""
    strategies = {**paper_like(), "railcap:n=1": counts(np.minimum(CLEAN + 60, M))}
    first = np.tile([0, 1], CLEAN.size // 2)
    got = run(strategies, repeat=counts(CLEAN, 1 - first), clean_first=first)
    assert got["F2"].outcome == "reproduced"
    assert [t.claim for t in got["F2"].tests[1:]] == [
        f"SA-PPG({s}) - (all-zero)" for s in ("identity", "ted", "railcap")]
    assert all("railcap:n=1" not in t.claim for f in ("F1", "F2") for t in got[f].tests)


def test_findings_not_reproduced_where_they_are_reversed():
    strategies = paper_like()
    strategies["railcap"] = counts(np.minimum(CLEAN + 30 + JITTER, M))  # worse than identity
    strategies["all-zero"] = counts(np.zeros_like(CLEAN))
    # nearly the clean model: beats All-Zero
    strategies["identity"] = counts(np.minimum(CLEAN + 1 + JITTER, M))
    first = np.zeros(CLEAN.size, int)
    # the two clean batches' single draws agree everywhere, their solve probabilities do not
    got = run(strategies, repeat=counts(np.minimum(CLEAN + 10, M), first), clean_first=first)
    assert got["F1"].outcome == "not reproduced"
    assert got["F2"].outcome == "not reproduced"
    assert got["F3"].outcome == "not reproduced"


def test_findings_without_their_inputs_are_inconclusive_and_say_why():
    got = run({"identity": counts(CLEAN)})
    assert {f.outcome for f in got.values()} == {"inconclusive"}
    assert "no RailCap" in got["F1"].note and "no second clean batch" in got["F3"].note
    assert set(OUTCOMES) == {"reproduced", "not reproduced", "inconclusive",
                             "not testable here", "arithmetic at this m"}


def test_a_small_difference_on_few_questions_is_inconclusive():
    def c(x):
        return QuestionCounts("(t)", IDS[:len(x)], np.asarray(x), np.full(len(x), M), None)

    few = np.array([1] * 9 + [25] * 4)  # 13 questions: 9 at 2%, 4 at 50%
    # RailCap's gaps are 0 or 0.04 on alternate questions, identity's 0.02 everywhere: the
    # same on average, so the tests' bounds straddle 0
    railcap = few + np.r_[np.tile([2, 0], 6), 2]
    f1 = findings(c(few), {"identity": c(few + 1), "railcap": c(railcap)}, None,
                  bins=50, n_resamples=400, seed=0)[0]
    assert f1.tests[0].low < 0 < f1.tests[0].high, f1
    assert f1.outcome == "inconclusive"
    # Below the calibrated size no test is made, and the finding says why.
    tiny = findings(c(few[:10]), {"identity": c(few[:10] + 1), "railcap": c(railcap[:10])},
                    None, bins=50, n_resamples=400, seed=0)[0]
    assert tiny.outcome == "inconclusive" and "too few questions" in tiny.sentence()


def made(p_value, p_reverse, reason=None):
    return ClaimTest("d", 0.0, math.nan, math.nan, p_value, p_reverse, reason)


def test_the_rule_is_intersection_union_for_the_claim_and_holm_against_it():
    # Every test at alpha in the paper's direction: reproduced, no correction (all must hold).
    assert outcome([made(0.04, 0.96)] * 5)[0] == "reproduced"
    assert outcome([made(0.04, 0.96)] * 4 + [made(0.06, 0.94)])[0] == "inconclusive"
    # One of five tests reversed at 0.03: the old rule said "not reproduced"; Holm's first step
    # needs 0.05 / 5.
    five = [made(0.5, 0.5)] * 4 + [made(0.97, 0.03)]
    verdict, done = outcome(five)
    assert verdict == "inconclusive" and done[-1].p_reverse_holm == pytest.approx(0.15)
    assert outcome([made(0.5, 0.5)] * 4 + [made(0.995, 0.005)])[0] == "not reproduced"
    # A test that could not be made neither holds nor counts in Holm's family.
    untested = made(math.nan, math.nan, "too few questions")
    assert outcome([made(0.01, 0.99), untested])[0] == "inconclusive"
    assert outcome([made(0.97, 0.03), made(0.5, 0.5), untested])[0] == "inconclusive"
    assert outcome([made(0.97, 0.03), untested])[0] == "not reproduced"
    assert outcome([])[0] == "inconclusive"


def test_holm_matches_its_step_down_definition():
    assert holm([0.01, 0.02, 0.04]).tolist() == pytest.approx([0.03, 0.04, 0.04])
    assert holm([0.3, 0.001]).tolist() == pytest.approx([0.3, 0.002])
    assert holm([0.6, 0.6]).tolist() == [1.0, 1.0]


def test_every_precondition_names_a_criterion_the_design_checks_measure():
    # A key neither the design checks nor the findings (the pooled clean batches) measure
    # would leave its finding "not measured" forever.
    named = {key for keys in PRECONDITIONS.values() for key in keys}
    measured = {*KEYS, SPREAD_POOLED, NO_FLOOR_POOLED}
    assert named <= measured, sorted(named - measured)
    assert set(PRECONDITIONS) == {"F1", "F2", "F3"}
    # Issues 47 and 58: F1 and F2 need the dispersion and trigger criteria and no spill-over,
    # F2 also spread and no floor on the pooled clean batches; F3 is stated beside its
    # binomial expectation instead. "Clean mean below A-PPG" is the sign of F2's own first
    # test on the same counts: no gate.
    regime = {ROUGE_LEAKED, ROUGE_UNLEAKED, TRIGGER_LEAKED, TRIGGER_UNLEAKED, TRIGGER_CLEAN,
              NO_SPILL_OVER}
    assert regime <= set(PRECONDITIONS["F1"]) and regime <= set(PRECONDITIONS["F2"])
    assert {SPREAD_POOLED, NO_FLOOR_POOLED} <= set(PRECONDITIONS["F2"])
    assert not {SPREAD_POOLED, NO_FLOOR_POOLED} & set(PRECONDITIONS["F1"])
    assert CLEAN_BELOW_APPG not in named
    assert PRECONDITIONS["F3"] == ()


def test_a_finding_whose_precondition_failed_is_not_testable_and_names_it():
    first = np.tile([0, 1], CLEAN.size // 2)
    strategies = paper_like()
    strategies["railcap"] = counts(np.minimum(CLEAN + 30 + JITTER, M))  # reversed: see above
    every = {name: True for names in PRECONDITIONS.values() for name in names}

    clean, repeat = counts(CLEAN, first), counts(CLEAN, 1 - first)

    def found(criteria, clean=clean, repeat=repeat, chosen=strategies):
        return {f.key: f for f in findings(clean, chosen, repeat, bins=50, n_resamples=400,
                                           seed=0, criteria=criteria)}

    # No dispersion: F1 and F2 (whose SA-PPG half compares RailCap with All-Zero) both name it.
    got = found({**every, ROUGE_UNLEAKED: False})
    for key in ("F1", "F2"):
        assert got[key].outcome == "not testable here" and got[key].failed == (ROUGE_UNLEAKED,)
        assert f"not met: {ROUGE_UNLEAKED}" in got[key].sentence()
    assert outcome(got["F1"].tests)[0] == "not reproduced"  # what the tests, shown, would say
    assert got["F3"].outcome != "not testable here" and got["F3"].failed == ()
    # Spill-over fails both; the circular "clean mean below A-PPG" gates nothing.
    got = found({**every, NO_SPILL_OVER: False, CLEAN_BELOW_APPG: False})
    assert [got[k].failed for k in ("F1", "F2")] == [(NO_SPILL_OVER,)] * 2
    # A floor in both clean batches (80 of 200 questions never solved) fails F2 alone,
    # measured on the batches pooled whatever the design file says.
    floored = np.where(np.arange(CLEAN.size) < 80, 0, CLEAN)
    got = found(every, clean=counts(floored, first), repeat=counts(floored, 1 - first))
    assert got["F1"].outcome == "not reproduced" and got["F1"].failed == ()
    assert got["F2"].outcome == "not testable here" and got["F2"].failed == (NO_FLOOR_POOLED,)
    assert f"{NO_FLOOR_POOLED}: 0.400 <= 0.333 (NOT met; 80 of 200 questions)" in got["F2"].note
    # Unmeasured preconditions leave the outcome and say so: without a second clean batch the
    # pooled criteria are not measured.
    design_file = {k: v for k, v in every.items() if k not in (SPREAD_POOLED, NO_FLOOR_POOLED)}
    f2 = found(design_file, clean=counts(CLEAN), repeat=None, chosen=paper_like())["F2"]
    assert f2.outcome == "reproduced" and f2.unmeasured == (SPREAD_POOLED, NO_FLOOR_POOLED)
    assert "not measured" in f2.note
    assert "Holm" in f2.rule and "intersection-union" in f2.rule and "all 4 tests" in f2.rule


def test_f3_states_its_binomial_expectation_beside_the_observed_value():
    rng = np.random.default_rng(0)
    p = benchmark(400, rng)
    # With the true solve probabilities known, the expectation is a sum of exact terms.
    m = 8
    x = np.arange(m + 1)
    pmf = np.array([[math.comb(m, k) * q**k * (1 - q) ** (m - k) for k in x] for q in p])
    gap_r = np.einsum("ni,nj,ij->n", pmf, pmf, np.abs(x[:, None] - x[None, :]) / m).mean()
    truth = 2 * gap_r - (2 * p * (1 - p)).mean()
    c1, c2 = rng.binomial(m, p), rng.binomial(m, p)
    estimated = binomial_f3(c1, np.full(400, m), c2, np.full(400, m))
    assert estimated.statistic == pytest.approx(truth, abs=0.02)
    first, repeat_first = rng.binomial(1, p), rng.binomial(1, p)
    f3 = findings(counts_of(c1, m, first), {"identity": counts_of(c1, m)},
                  counts_of(c2, m, repeat_first), bins=5, n_resamples=400, seed=0)[2]
    assert f3.expected == pytest.approx(estimated.statistic)
    assert f"{estimated.statistic:+.3f} against {f3.tests[0].difference:+.3f}" in f3.statistic
    # At m = 8 the statistic is another quantity than the paper's (m = 50): no verdict.
    assert f3.outcome == "arithmetic at this m" and "at m = 8" in f3.note


def counts_of(correct, m, first=None):
    ids = tuple(f"q{i}" for i in range(len(correct)))
    return QuestionCounts("(t)", ids, np.asarray(correct), np.full(len(correct), m),
                          None if first is None else np.asarray(first))


def test_answer_slot_splits_railcaps_collateral_damage():
    # On the clean model: RailCap halves every solve probability, its answer-protecting variant
    # takes a quarter; the slot's share is the difference, the reasoning steps' the rest.
    clean = np.array([40, 20, 30, 10] * 30)
    jitter = np.random.default_rng(0).integers(0, 3, size=(2, 120))  # spread within strata
    railcap, protected = clean // 2 + jitter[0], clean * 3 // 4 + jitter[1]
    gaps = gap_intervals(clean, np.full(120, M), [railcap, protected], np.full((2, 120), M),
                         names=["railcap", PROTECTED], bins=5)
    slot = answer_slot(gaps)
    assert slot is not None
    difference, low, high = slot.slot
    assert slot.damage > slot.reasoning > 0
    assert difference == pytest.approx(slot.damage - slot.reasoning)
    assert low < difference < high and low > 0
    assert f"{difference:+.3f}" in slot.sentence() and PROTECTED in slot.sentence()
    assert answer_slot(gap_intervals(clean, np.full(120, M), [railcap], np.full((1, 120), M),
                                     names=["railcap"], bins=5)) is None
