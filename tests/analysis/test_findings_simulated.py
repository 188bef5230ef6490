"""The findings' false-verdict rates over simulated studies at each finding's boundary (issue 58).

Each scenario draws 1,000 studies shaped like the demo (128 questions, 64 leaked, m = 8, B = 5
strata, its six strategies; F3 at the paper's m = 50), all counts at once with numpy, and runs
on each the study's own design criteria (:func:`zerogap.analysis.design.design_criteria`; the
criteria read off texts, ROUGE-L and the trigger rates, are given as met) and findings
(:func:`zerogap.analysis.findings.findings`). Where the truth sits at a finding's boundary, the
verdict the truth does not support is false; its rate among the studies where the finding was
testable must not lie above ALPHA beyond the simulation's own error (the Wilson 95% interval of
the rate reaches down to ALPHA, about 6.5% at most over 1,000 studies). Each test prints its
rate: ``pytest -m slow -s tests/analysis/test_findings_simulated.py``.
"""

import numpy as np
import pytest

from zerogap.analysis.design import (
    CLEAN_BELOW_APPG,
    TrajectoryStats,
    design_criteria,
)
from zerogap.analysis.findings import ALPHA, NOT_TESTABLE, PAPER_M, findings, outcome
from zerogap.io.counts import QuestionCounts
from zerogap.uncertainty.calibration import Rate, benchmark
from zerogap.uncertainty.solve_prior import binomial_likelihood

pytestmark = pytest.mark.slow

N, LEAKED, M, BINS, REPS = 128, 64, 8, 5, 1000
LEAK = np.arange(N) < LEAKED
IDS = tuple(f"q{i}" for i in range(N))
# M_co's samples collapse onto its greedy decode on leaked questions and disperse on unleaked
# ones, M_cl's disperse everywhere: the text-based criteria met, as in the paper's regime.
CO = TrajectoryStats(np.where(LEAK, 1.0, 0.3), np.where(LEAK, 9, 2), np.full(N, 10))
CL = TrajectoryStats(np.full(N, 0.3), np.full(N, 2), np.full(N, 10))


def counts(correct, m, first=None) -> QuestionCounts:
    return QuestionCounts("(sim)", IDS, np.asarray(correct), np.full(N, m), first)


def studies(truths: dict[str, np.ndarray], seed: int, m: int = M, n_resamples: int = 9):
    """Draw every study's counts at once from ``truths`` (name -> (REPS, N) solve
    probabilities; "clean" is the clean model, drawn twice, "identity" M_co), then yield each
    study's design criteria (key -> met) and findings (key -> Finding).

    The clean batches also record their first sample's grade (F3): the count is that sample
    plus the other m - 1."""
    rng = np.random.default_rng(seed)
    drawn = {name: rng.binomial(m, p) for name, p in truths.items() if name != "clean"}
    first = rng.random((2, *truths["clean"].shape)) < truths["clean"]  # (2, REPS, N)
    rest = rng.binomial(m - 1, np.broadcast_to(truths["clean"], first.shape))
    clean, repeat = first + rest
    for i in range(REPS):
        criteria = design_criteria(clean[i] / m, repeat[i] / m, drawn["identity"][i] / m,
                                   LEAK, co=CO, cl=CL)
        met = {c.key: c.met for c in criteria}
        strategies = {name: counts(c[i], m) for name, c in drawn.items()}
        found = findings(counts(clean[i], m, first[0, i].astype(int)), strategies,
                         counts(repeat[i], m, first[1, i].astype(int)), bins=BINS,
                         n_resamples=n_resamples, seed=i, criteria=met)
        yield met, {f.key: f for f in found}


def rate_of(verdicts: list[str], false: str) -> Rate:
    """How often ``false`` was read among the studies where the finding was testable."""
    testable = [v for v in verdicts if v != NOT_TESTABLE]
    return Rate(sum(v == false for v in testable), len(testable),
                untestable=len(verdicts) - len(testable))


def report(name: str, rate: Rate) -> None:
    low, high = rate.interval
    print(f"\n{name}: {rate.hits} of {rate.trials} testable studies ({rate.rate:.1%}, 95% "
          f"[{low:.1%}, {high:.1%}]); {rate.untestable} not testable")


def inflated(p: np.ndarray, where: np.ndarray, shift: float) -> np.ndarray:
    return np.clip(p + shift * where, 0.0, 1.0)


def far_off(p: np.ndarray) -> np.ndarray:
    """A baseline far worse than any other strategy: every question 0.5 away from the clean
    model's solve probability, whichever way there is room."""
    return np.where(p < 0.5, p + 0.5, p - 0.5)


def random_halves(rng: np.random.Generator) -> np.ndarray:
    """(REPS, N) bool: a random half of the questions in each study."""
    return rng.permuted(np.tile(LEAK, (REPS, 1)), axis=1)


def demo_clean(rng: np.random.Generator) -> np.ndarray:
    """(REPS, N) clean solve probabilities shaped like the demo's clean model (18% never
    solved, 27% always, the rest spread: its spread 0.555 and floor 0.180 at m = 8)."""
    return benchmark(REPS * N, rng, at_zero=0.18, at_one=0.27).reshape(REPS, N)


def test_f1_reads_reproduced_at_most_alpha_at_its_boundary():
    """RailCap equal to Identity on average (each moves its own random half of the questions by
    0.5: the weak null's boundary, the differences spread over every stratum), the other
    baselines far worse: "reproduced" is false."""
    rng = np.random.default_rng(58)
    p = demo_clean(rng)
    truths = {"clean": p, "identity": inflated(p, LEAK, 0.5),
              "railcap": inflated(p, random_halves(rng), 0.5),
              **dict.fromkeys(("ted", "lne-blocking", "shortcut"), far_off(p)),
              "all-zero": np.zeros_like(p)}
    verdicts, far_hold = [], []
    for _, found in studies(truths, 1):
        f1 = found["F1"]
        verdicts.append(f1.outcome)
        far_hold.append(all(t.holds for t in f1.tests[1:]))
    rate = rate_of(verdicts, "reproduced")
    report("F1 at its boundary (RailCap = Identity on average), reproduced", rate)
    assert np.mean(far_hold) > 0.95  # the far baselines hold: Identity carries the boundary
    assert rate.untestable < 0.2 * REPS  # no spill-over in truth: the gate mostly passes
    assert rate.interval[0] <= ALPHA, rate


def test_f1_reads_reproduced_at_most_alpha_where_one_baseline_differs_on_few_questions():
    """The demo's shortcut pair: RailCap and shortcut differ on two questions only (each
    breaks one question the clean model always solves), so the weak-null test rests on a few
    large differences within one stratum and its Welch-Satterthwaite degrees of freedom fall
    (the demo measured 1.7 for RailCap - shortcut); every other baseline is far worse."""
    rng = np.random.default_rng(59)
    p = demo_clean(rng)
    broken_by_railcap, broken_by_shortcut = p.copy(), p.copy()
    for i in range(REPS):
        two = rng.choice(np.flatnonzero(p[i] == 1.0), size=2, replace=False)
        broken_by_railcap[i, two[0]] = broken_by_shortcut[i, two[1]] = 0.0
    truths = {"clean": p, "identity": inflated(p, LEAK, 0.5), "railcap": broken_by_railcap,
              "shortcut": broken_by_shortcut, "ted": far_off(p), "lne-blocking": far_off(p),
              "all-zero": np.zeros_like(p)}
    verdicts, dfs = [], []
    for _, found in studies(truths, 2):
        f1 = found["F1"]
        verdicts.append(f1.outcome)
        dfs.append(next(t.df for t in f1.tests if t.claim.endswith("(shortcut)")))
    rate = rate_of(verdicts, "reproduced")
    low, median, high = np.nanpercentile(dfs, [10, 50, 90])
    report(f"F1, RailCap = shortcut on average over 2 questions (df median {median:.1f}, "
           f"10-90% {low:.1f}-{high:.1f}), reproduced", rate)
    assert rate.interval[0] <= ALPHA, rate


def test_f1_reads_not_reproduced_at_most_alpha_when_no_baseline_is_better():
    """Every baseline equal to RailCap on average (each its own random half moved by 0.3):
    "not reproduced" is false. Holm's correction keeps it at or below alpha; the rule it
    replaced (any one test reversed at alpha) exceeds alpha."""
    rng = np.random.default_rng(60)
    p = demo_clean(rng)
    truths = {"clean": p, "identity": inflated(p, LEAK, 0.3),
              **{name: inflated(p, random_halves(rng), 0.3)
                 for name in ("railcap", "ted", "lne-blocking", "shortcut")}}
    verdicts, union = [], []
    for _, found in studies(truths, 3):
        verdicts.append(found["F1"].outcome)
        union.append(any(t.p_reverse <= ALPHA for t in found["F1"].tests))
    rate = rate_of(verdicts, "not reproduced")
    report("F1 with every baseline equal to RailCap on average, not reproduced", rate)
    assert rate.interval[0] <= ALPHA, rate
    old = Rate(sum(union), len(union))
    report("  the same under the old rule (any test reversed at alpha)", old)
    assert old.interval[0] > ALPHA, old


def binomial_gap(m: int, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(P,) E|X / m - Y / m| for X ~ Bin(m, p), Y ~ Bin(m, q), exactly."""
    x = np.arange(m + 1)
    pmf_p = binomial_likelihood(x, np.full(m + 1, m), p)  # (m + 1, P)
    pmf_q = binomial_likelihood(x, np.full(m + 1, m), q)
    apart = np.abs(x[:, None] - x[None, :]) / m  # (m + 1, m + 1)
    return np.einsum("ip,jp,ij->p", pmf_p, pmf_q, apart)


def bisect(f, low: float, high: float) -> float:
    """The root of an increasing ``f`` on [low, high]."""
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < 0 else (low, mid)
    return (low + high) / 2


def f2_clean(rng: np.random.Generator, size: int) -> np.ndarray:
    """A clean model near the paper's (mean solve probability about 0.25): 10% never solved,
    the rest Beta(0.6, 1.4)."""
    return benchmark(size, rng, at_zero=0.1, at_one=0.0, shape=(0.6, 1.4))


def test_f2_reads_reproduced_at_most_alpha_at_its_boundary():
    """All-Zero's A-PPG (the clean mean) equal to Identity's in expectation (M_co inflated on
    the leaked half by the shift that makes them equal, computed exactly), All-Zero's SA-PPG
    far the largest: "reproduced" is false. Under the old gate "clean mean below Identity's
    A-PPG" (the sign of F2's first test on the same counts) it read about twice alpha, and
    "not reproduced" never."""
    rng = np.random.default_rng(61)
    population = f2_clean(rng, 200_000)
    half = population.size // 2

    def excess(shift: float) -> float:  # E[A-PPG(identity)] - E[A-PPG(all-zero)]
        leaked = binomial_gap(M, np.clip(population[:half] + shift, 0, 1), population[:half])
        unleaked = binomial_gap(M, population[half:], population[half:])
        return float(np.r_[leaked, unleaked].mean() - population.mean())

    shift = bisect(excess, 0.0, 1.0)
    p = f2_clean(rng, REPS * N).reshape(REPS, N)
    truths = {"clean": p, "identity": inflated(p, LEAK, shift), "railcap": p,
              **{name: np.clip(p + 0.05, 0, 1) for name in ("ted", "lne-blocking", "shortcut")},
              "all-zero": np.zeros_like(p)}
    verdicts, sa_hold, old_gate = [], [], []
    for met, found in studies(truths, 4):
        f2 = found["F2"]
        verdicts.append(f2.outcome)
        sa_hold.append(all(t.holds for t in f2.tests[1:]))
        if met[CLEAN_BELOW_APPG]:
            old_gate.append(outcome(f2.tests)[0])
    rate = rate_of(verdicts, "reproduced")
    report(f"F2 at its boundary (shift {shift:.3f}), reproduced", rate)
    assert np.mean(sa_hold) > 0.99  # the SA-PPG half holds: the A-PPG test is the boundary
    assert rate.interval[0] <= ALPHA, rate
    old = Rate(sum(v == "reproduced" for v in old_gate), len(old_gate))
    report("  the same under the old gate (clean mean below Identity's A-PPG)", old)
    assert old.interval[0] > ALPHA and "not reproduced" not in old_gate, old
    assert rate.untestable < 0.2 * REPS  # spread, floor and spill-over gates mostly pass


def test_f3_reads_reproduced_at_most_alpha_at_its_boundary():
    """At the paper's m = 50, a clean model whose binomial expectation of
    ``2 gap_r - gap01`` is 0 (a floor-heavy benchmark: questions solved 0.5-2% of the time
    read a 0/1 gap below twice their solve-probability gap), found by mixing those with a
    spread share: "reproduced" is false."""
    rng = np.random.default_rng(62)
    rare, spread = rng.uniform(0.005, 0.02, 100_000), rng.beta(0.7, 0.7, 100_000)

    def statistic(p: np.ndarray) -> np.ndarray:  # per question, 2 gap_r - gap01
        return 2 * binomial_gap(PAPER_M, p, p) - 2 * p * (1 - p)

    s_rare, s_spread = statistic(rare).mean(), statistic(spread).mean()
    share = s_rare / (s_rare - s_spread)  # of spread questions: expectation 0
    p = np.where(rng.random((REPS, N)) < share, rng.beta(0.7, 0.7, (REPS, N)),
                 rng.uniform(0.005, 0.02, (REPS, N)))
    verdicts = [found["F3"].outcome for _, found in
                studies({"clean": p, "identity": p}, 5, m=PAPER_M, n_resamples=400)]
    rate = rate_of(verdicts, "reproduced")
    report(f"F3 at its boundary (m = {PAPER_M}, {share:.1%} spread questions), reproduced", rate)
    assert rate.trials == REPS  # F3 has no precondition: every study is tested
    assert rate.interval[0] <= ALPHA, rate
