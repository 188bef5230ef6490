"""The paper's findings F1-F3 as tests: outcomes on counts built so that each holds, or is
reversed, by construction (200 questions, m = 50: differences far beyond the tests' noise).
"""

import numpy as np

from zerogap.analysis.findings import OUTCOMES, findings
from zerogap.io.counts import QuestionCounts

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
    assert set(OUTCOMES) == {"reproduced", "not reproduced", "inconclusive"}


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
