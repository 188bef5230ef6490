"""The paper's three findings as tests of the paper, each with a stated rule (arXiv 2608.07341
§5; issues 21 and 47).

* **F1** RailCap restores best: its SA-PPG is below Identity's and below every baseline's
  (TED, LNE-blocking, shortcut patching, All-Zero, whichever the study ran). One one-sided
  paired test per baseline, ``SA-PPG(railcap) - SA-PPG(b) < 0``.
* **F2** The A-PPG paradox: All-Zero reads a smaller A-PPG than Identity, yet the largest
  SA-PPG of the strategies compared (RailCap and the baselines of F1, whichever the study ran;
  ablation rows and other strategies are not the paper's comparison, as in F1). One-sided
  paired tests ``A-PPG(all-zero) - A-PPG(identity) < 0`` and
  ``SA-PPG(s) - SA-PPG(all-zero) < 0`` for each such strategy ``s`` but All-Zero.
* **F3** The 0/1 readout is noise: between the clean model's two independent batches, the
  mean per-question gap of one sampled response per question is far above that of the solve
  probabilities from m = 50 samples (paper: 0.190 vs 0.041). "Far above" is fixed here as
  more than twice: the one-sided test is ``gap01 - 2 * gap_r > 0``, questions resampled in
  pairs. The two batches sample one model, so the statistic's expectation is fixed by binomial
  sampling of its solve probabilities at the batches' m (:func:`binomial_f3`), stated beside
  it. The paper's statement is at m = 50 (:data:`PAPER_M`); at another m the test is of
  another quantity (at m = 8 its expectation sits near the test's threshold, and the verdict
  is that expectation plus noise), so F3 draws a verdict only where both clean batches have
  m = 50 on every question, and otherwise reads "arithmetic at this m" with its test and
  expectation shown.

Each paired test is :func:`zerogap.uncertainty.compare` under the weak null (``null="mean"``:
the two strategies equal *on average*, the claim each finding makes) on one
:func:`~zerogap.uncertainty.gap_intervals` of all strategies, one-sided at ``ALPHA`` = 0.05 in
each direction (``docs/uncertainty.md``).

**One rule for every finding** (each is a conjunction of one-sided claims, so its error rates
are those of one hypothesis, not of its tests one by one):

* *reproduced* when every test rejects in the paper's direction at ``ALPHA``: an
  intersection-union test, whose level is ``ALPHA`` with no correction (Berger 1982), since
  all claims must hold at once;
* *not reproduced* when some test rejects in the opposite direction after Holm's correction
  over the finding's tests (family-wise error at most ``ALPHA`` whatever their dependence);
* *inconclusive* otherwise.

Before that, a finding that needs the paper's regime is **not testable here** when the study's
design criteria (:mod:`zerogap.analysis.design`) say the regime is missing: the tests are shown,
the failed criteria named, and no verdict is drawn from them (:data:`PRECONDITIONS`). No
precondition is read off the sign of a finding's own test: a gate that is would let the test
pass only when it already leans the paper's way (at the boundary of F2's A-PPG test, "clean
mean below Identity's A-PPG" as a gate let F2 read "reproduced" in 7.2% of the simulated
studies it let through, against 2.0% under the gates now, and "not reproduced" in none;
``tests/analysis/test_findings_simulated.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from zerogap.analysis import design
from zerogap.uncertainty import GapIntervals, compare, gap_intervals
from zerogap.uncertainty.solve_prior import binomial_likelihood, fit_solve_prior

ALPHA = 0.05
NULL = "mean"
RAILCAP = "railcap"
PROTECTED = "railcap:protect=answer"
IDENTITY = "identity"
ALL_ZERO = "all-zero"
BASELINES = (IDENTITY, "ted", "lne-blocking", "shortcut", ALL_ZERO)
F3_FACTOR = 2.0
PAPER_F3 = (0.190, 0.041)
# SA-PPG of the strategies the paper's text reports for Llama-2 on GSM8K (§5.2.1 and the
# discussion of Table 2; TED's is only in the table, whose values the text does not repeat).
PAPER_SA_PPG = {"identity": 0.3261, "lne-blocking": 0.2932, "shortcut": 0.2476,
                "railcap": 0.1914, "all-zero": 0.4903}
PAPER_M = 50  # samples per question of the paper's solve probabilities (§5.1), F3's m
OUTCOMES = ("reproduced", "not reproduced", "inconclusive", "not testable here",
            "arithmetic at this m")
NOT_TESTABLE, ARITHMETIC = OUTCOMES[3], OUTCOMES[4]

# The design criteria each finding needs met to test the paper rather than the miniature
# (issue 47), named by their keys in zerogap.analysis.design. The paper's regime: M_co inflated
# on the leaked questions (contamination), its samples collapsing onto its greedy trajectory
# there and dispersing on unleaked ones (Figure 1's ROUGE-L), and RailCap's trigger rates those
# of that regime; without it RailCap and the baselines are tested in their failure modes
# (RailCap's over-suppression then nears All-Zero's). F1 compares RailCap with every baseline,
# and F2's SA-PPG half compares every strategy, RailCap included, with All-Zero, so both need
# the regime, and M_co inflated on the leaked questions only (no spill-over): where M_co also
# gained skill on unleaked questions, a strategy that damages them lowers its SA-PPG by
# cancelling that gain, and reads as restoring. F2's SA-PPG half also needs SA-PPG's strata
# filled (spread) and few questions at the floor, where All-Zero is exact by construction;
# both are measured on the two clean batches pooled (design.pooled_stratification), not on
# the batch the tests are built from. "Clean mean below Identity's A-PPG" is no gate: on the
# same counts it is the sign of F2's first test (module docstring). F3 needs nothing: it is
# stated beside its binomial expectation, and draws a verdict only at the paper's m.
REGIME = (design.CONTAMINATION, design.ROUGE_LEAKED, design.ROUGE_UNLEAKED,
          design.TRIGGER_LEAKED, design.TRIGGER_UNLEAKED, design.TRIGGER_CLEAN)
PRECONDITIONS: dict[str, tuple[str, ...]] = {
    "F1": (*REGIME, design.NO_SPILL_OVER),
    "F2": (*REGIME, design.NO_SPILL_OVER, design.SPREAD_POOLED, design.NO_FLOOR_POOLED),
    "F3": (),
}

F1_CLAIM = "RailCap's SA-PPG below Identity's and every baseline's"
F2_CLAIM = "All-Zero better than Identity under A-PPG, worst under SA-PPG"
F3_CLAIM = "the 0/1 readout's clean batch-to-batch gap is more than twice the solve probability's"


def rule(k: int) -> str:
    """The rule of the module docstring for a finding of ``k`` tests, in one line."""
    if k == 1:
        return (f"reproduced if its test holds one-sided at {ALPHA:g}; not reproduced if it "
                f"reverses at {ALPHA:g}; else inconclusive")
    return (f"reproduced if all {k} tests hold one-sided at {ALPHA:g} (intersection-union); "
            f"not reproduced if one reverses after Holm's correction over the {k}; else "
            "inconclusive") if k else ""


@dataclass(frozen=True)
class Test:
    """One claim's paired difference with its one-sided bounds at ``1 - ALPHA`` each.

    ``p_value`` tests the paper's direction (``difference < 0``), ``p_reverse`` the opposite
    one; ``p_reverse_holm`` is the latter after Holm's correction over the finding's tests
    (set by :func:`outcome`). ``reason`` says why no test was possible (then the p-values are
    NaN and the test neither holds nor reverses). ``df``: the weak-null t's Welch-Satterthwaite
    degrees of freedom (NaN for F3's bootstrap).
    """

    claim: str
    difference: float
    low: float
    high: float
    p_value: float
    p_reverse: float
    reason: str | None = None
    p_reverse_holm: float = math.nan
    df: float = math.nan

    @property
    def holds(self) -> bool:
        """The paper's direction rejects at ``ALPHA``."""
        return self.reason is None and self.p_value <= ALPHA

    @property
    def reversed(self) -> bool:
        """The opposite direction rejects at ``ALPHA`` after Holm's correction."""
        return self.reason is None and self.p_reverse_holm <= ALPHA


@dataclass(frozen=True)
class Finding:
    """A finding's outcome, the tests it rests on and the rule that turned them into it.

    ``failed``: the precondition criteria the study measured as not met (then the outcome is
    "not testable here"); ``unmeasured``: those it did not measure (the outcome stands, with
    that said); ``expected``: for F3, its statistic's expectation under binomial sampling.
    """

    key: str
    claim: str
    outcome: str
    statistic: str
    tests: tuple[Test, ...]
    note: str = ""
    rule: str = ""
    failed: tuple[str, ...] = ()
    unmeasured: tuple[str, ...] = ()
    expected: float | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "tests": [asdict(t) for t in self.tests]}

    def sentence(self) -> str:
        """One line for a terminal: outcome, why it is untestable, the tests' differences with
        their bounds."""
        parts = [f"{t.claim}: {t.difference:+.3f} " + (f"({t.reason})" if t.reason else
                                                      f"[{t.low:+.3f}, {t.high:+.3f}]")
                 for t in self.tests]
        head = f"{self.key} {self.outcome}"
        if self.failed:
            head += f" (not met: {', '.join(self.failed)})"
        if self.expected is not None:
            parts.append(f"{self.expected:+.3f} from binomial sampling alone")
        return f"{head}: " + "; ".join(parts) + (f" ({self.note})" if self.note else "")


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values; NaN (no test) stays NaN and is not counted.

    A hypothesis is rejected at level alpha when its adjusted p-value is at most alpha; the
    family-wise error rate is then at most alpha under any dependence between the tests.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03, float("nan")]).round(3).tolist()
    [0.03, 0.06, 0.06, nan]
    """
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    running = 0.0
    for rank, i in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        running = max(running, min(1.0, (tested.size - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def outcome(tests: Sequence[Test]) -> tuple[str, tuple[Test, ...]]:
    """The rule of the module docstring: the outcome, and the tests with their Holm-adjusted
    opposite-direction p-values filled in."""
    adjusted = holm([t.p_reverse for t in tests])
    done = tuple(replace(t, p_reverse_holm=float(a)) for t, a in zip(tests, adjusted,
                                                                       strict=True))
    if not done:
        return "inconclusive", done
    if any(t.reversed for t in done):
        return "not reproduced", done
    return ("reproduced" if all(t.holds for t in done) else "inconclusive"), done


def _finding(key: str, claim: str, statistic: str, tests: Sequence[Test],
             criteria: Mapping[str, bool] | None, note: str = "",
             expected: float | None = None, verdict: str | None = None) -> Finding:
    """Apply the rule (unless ``verdict`` says why there is none), then the precondition of
    :data:`PRECONDITIONS`."""
    ruled, done = outcome(tests)
    verdict = verdict or ruled
    needed = PRECONDITIONS[key]
    known = criteria or {}
    failed = tuple(c for c in needed if c in known and not known[c])
    unmeasured = tuple(c for c in needed if c not in known)
    notes = [note] if note else []
    if unmeasured:
        notes.append(f"its precondition was not measured: {', '.join(unmeasured)}")
    return Finding(key, claim, NOT_TESTABLE if failed else verdict, statistic, done,
                   "; ".join(notes), rule(len(done)), failed, unmeasured, expected)


def _less(gaps: GapIntervals, a: str, b: str, metric: str) -> Test:
    """The one-sided tests of ``metric(a) < metric(b)`` and of the reverse, at ``1 - ALPHA``."""
    less = compare(gaps, a, b, metric=metric, alternative="less", null=NULL)
    greater = compare(gaps, a, b, metric=metric, alternative="greater", null=NULL)
    return Test(f"{metric.replace('_', '-').upper()}({a}) - ({b})", less.difference,
                greater.low, less.high, less.p_value, greater.p_value, less.reason,
                df=less.df)


@dataclass(frozen=True)
class BinomialF3:
    """F3's two gaps as binomial sampling alone makes them (:func:`binomial_f3`)."""

    gap01: float
    gap_r: float

    @property
    def statistic(self) -> float:
        """``F3_FACTOR * gap_r - gap01``, the quantity F3's test is on."""
        return F3_FACTOR * self.gap_r - self.gap01


def binomial_f3(clean_correct, clean_samples, repeat_correct, repeat_samples) -> BinomialF3:
    """The expected F3 gaps when the clean model's two batches are pure binomial sampling of
    its solve probabilities.

    For a question solved with probability ``p``, two single draws differ with probability
    ``2 p (1 - p)``, and two solve probabilities from ``m1`` and ``m2`` samples differ by
    ``E|X / m1 - Y / m2|`` (X, Y binomial; computed exactly). ``p`` is averaged over the
    question's empirical-Bayes posterior (:mod:`zerogap.uncertainty.solve_prior`) given both
    batches (they sample the same model, so their counts pool), under the prior fitted to all
    questions.

    Parameters
    ----------
    clean_correct, clean_samples, repeat_correct, repeat_samples : array-like of int,
        shape (n_questions,)

    Examples
    --------
    At m = 8, questions solved half the time: two single draws differ half the time, two
    solve probabilities by about 0.2, so "gap01 > 2 gap_r" holds by arithmetic alone.

    >>> f3 = binomial_f3([4] * 40, [8] * 40, [4] * 40, [8] * 40)
    >>> round(f3.gap01, 2), round(f3.gap_r, 2), f3.statistic < 0
    (0.5, 0.2, True)
    """
    c1, m1, c2, m2 = (np.asarray(a, dtype=np.int64) for a in (clean_correct, clean_samples,
                                                               repeat_correct, repeat_samples))
    prior = fit_solve_prior(c1 + c2, m1 + m2)
    grid, posterior = prior.grid, prior.posterior  # (G,), (N, G)
    gap01 = posterior @ (2 * grid * (1 - grid))  # (N,)
    gap_r = np.empty(c1.size)
    for a, b in {(int(x), int(y)) for x, y in zip(m1, m2, strict=True)}:
        pa = binomial_likelihood(np.arange(a + 1), np.full(a + 1, a), grid)  # (a+1, G)
        pb = binomial_likelihood(np.arange(b + 1), np.full(b + 1, b), grid)  # (b+1, G)
        apart = np.abs(np.arange(a + 1)[:, None] / a - np.arange(b + 1)[None, :] / b)
        expected = np.einsum("ig,jg,ij->g", pa, pb, apart)  # (G,) E|X/a - Y/b| given p
        rows = (m1 == a) & (m2 == b)
        gap_r[rows] = posterior[rows] @ expected
    return BinomialF3(float(gap01.mean()), float(gap_r.mean()))


def _f3(clean, repeat, *, n_boot: int, seed: int) -> Finding:
    """F3 by a paired question bootstrap of ``gap01 - 2 * gap_r``, beside its binomial
    expectation; "arithmetic at this m" unless both batches have :data:`PAPER_M` samples on
    every question."""
    g01 = np.abs(np.asarray(clean.first, float) - np.asarray(repeat.first, float))
    gr = np.abs(clean.correct / clean.samples - repeat.correct / repeat.samples)
    per = g01 - F3_FACTOR * gr  # (n_questions,)
    rng = np.random.default_rng([seed, 3])
    idx = rng.integers(0, per.size, size=(n_boot, per.size))
    reps = per[idx].mean(axis=1)
    low, high = np.quantile(reps, [ALPHA, 1 - ALPHA])
    # Written as "2 gap_r - gap01 < 0" so that, like every test here, high < 0 is the claim.
    test = Test("2 x gap(solve prob.) - gap(0/1)", -float(per.mean()), float(-high),
                float(-low), float((1 + np.count_nonzero(reps <= 0)) / (1 + n_boot)),
                float((1 + np.count_nonzero(reps >= 0)) / (1 + n_boot)))
    arithmetic = binomial_f3(clean.correct, clean.samples, repeat.correct, repeat.samples)
    statistic = (f"mean |0/1 difference| {g01.mean():.3f} vs mean |solve-probability "
                 f"difference| {gr.mean():.3f} (paper {PAPER_F3[0]} vs {PAPER_F3[1]}); binomial "
                 f"sampling alone gives {arithmetic.gap01:.3f} vs {arithmetic.gap_r:.3f}, "
                 f"2 x gap(solve prob.) - gap(0/1) {arithmetic.statistic:+.3f} against "
                 f"{test.difference:+.3f} observed")
    at_paper_m = bool(np.all(clean.samples == PAPER_M) and np.all(repeat.samples == PAPER_M))
    shown = ", ".join(str(m) for m in np.unique(np.r_[clean.samples, repeat.samples]))
    note = "" if at_paper_m else (
        f"the paper's statement is at m = {PAPER_M}; at m = {shown} the statistic's "
        "expectation is the binomial one shown, so no verdict is drawn")
    return _finding("F3", F3_CLAIM, statistic, (test,), None, note, arithmetic.statistic,
                    None if at_paper_m else ARITHMETIC)


def missing_regime(criteria: Sequence[design.Criterion]) -> str:
    """A plain statement, for a report's first screen, that the measured design criteria say
    the paper's regime is missing; ``""`` when every criterion of :data:`PRECONDITIONS`
    measured is met.

    It names each failed criterion with its value and requirement, the findings that are
    therefore not testable (:data:`PRECONDITIONS`), and what the study still tests.

    Examples
    --------
    >>> met = design.Criterion(design.CONTAMINATION, "p", 0.001, "<=", 0.01, True, "")
    >>> missing_regime([met])
    ''
    >>> flat = design.Criterion(design.ROUGE_UNLEAKED, "median", 1.0, "<=", 0.6, False, "")
    >>> print(missing_regime([met, flat]))  # doctest: +NORMALIZE_WHITESPACE
    The paper's premise does not hold here: dispersion (ROUGE-L, unleaked) 1.000, required
    <= 0.600. F1 and F2 are therefore not testable here; what this study tests is the metric's
    behaviour (SA-PPG beside A-PPG and G-APP, against the clean batches' noise floor), each
    strategy's collateral damage on the clean model where controls ran, and F3 beside its
    binomial expectation.
    """
    gates = {key for needed in PRECONDITIONS.values() for key in needed}
    failed = [c for c in criteria if c.key in gates and not c.met]
    if not failed:
        return ""
    shown = "; ".join(f"{c.key} {c.value:.3f}, required {c.op} {c.threshold:.3f}"
                      for c in failed)
    keys = {c.key for c in failed}
    untestable = [k for k, needed in PRECONDITIONS.items() if keys & set(needed)]
    return (f"The paper's premise does not hold here: {shown}. {' and '.join(untestable)} "
            f"{'are' if len(untestable) > 1 else 'is'} therefore not testable here; what this "
            "study tests is the metric's behaviour (SA-PPG beside A-PPG and G-APP, against the "
            "clean batches' noise floor), each strategy's collateral damage on the clean model "
            "where controls ran, and F3 beside its binomial expectation.")


def findings(clean_counts, strategies: dict, repeat=None, *, bins: int, n_resamples: int,
             seed: int, criteria: Mapping[str, bool] | None = None) -> list[Finding]:
    """F1, F2 and F3 on one setting's counts (missing inputs make a finding inconclusive).

    Parameters
    ----------
    clean_counts : QuestionCounts
        The clean reference batch.
    strategies : dict of name -> QuestionCounts
        The strategies on the contaminated model, aligned to the clean questions (All-Zero
        included).
    repeat : QuestionCounts, optional
        The clean model's second batch (F3).
    criteria : mapping of criterion key -> met, optional
        The study's design criteria (:mod:`zerogap.analysis.design`): a finding whose
        :data:`PRECONDITIONS` include one that is not met is not testable here. Spread and
        no floor on the clean batches pooled are measured here, from ``repeat``.
    """
    c = clean_counts
    pooled = [] if repeat is None else design.pooled_stratification(
        c.correct, c.samples, repeat.correct, repeat.samples)
    if pooled:
        criteria = {**(criteria or {}), **{p.key: p.met for p in pooled}}
    stratification = "; ".join(p.sentence() for p in pooled)
    names = list(strategies)
    gaps = gap_intervals(
        c.correct, c.samples, np.stack([strategies[n].correct for n in names]),
        np.stack([strategies[n].samples for n in names]), names=names, bins=bins,
        n_resamples=n_resamples, level=1 - ALPHA, seed=seed)
    out = []
    base = [b for b in BASELINES if b in strategies]
    if RAILCAP in strategies and base:
        out.append(_finding("F1", F1_CLAIM, "paired SA-PPG differences, one-sided, weak null "
                            "(stratified t)",
                            [_less(gaps, RAILCAP, b, "sa_ppg") for b in base], criteria))
    else:
        out.append(_finding("F1", F1_CLAIM, "", (), criteria,
                            "the study ran no RailCap or no baseline"))
    if ALL_ZERO in strategies and IDENTITY in strategies:
        compared = [n for n in (*BASELINES, RAILCAP) if n in strategies and n != ALL_ZERO]
        tests = [_less(gaps, ALL_ZERO, IDENTITY, "a_ppg"),
                 *(_less(gaps, n, ALL_ZERO, "sa_ppg") for n in compared)]
        out.append(_finding("F2", F2_CLAIM, "paired A-PPG and SA-PPG differences, one-sided, "
                            "weak null (stratified t)", tests, criteria, stratification))
    else:
        out.append(_finding("F2", F2_CLAIM, "", (), criteria, "the study ran no identity"))
    if repeat is not None and c.first is not None and repeat.first is not None:
        out.append(_f3(c, repeat, n_boot=n_resamples, seed=seed))
    else:
        out.append(_finding("F3", F3_CLAIM, "", (), None,
                            "no second clean batch with single draws"))
    return out


@dataclass(frozen=True)
class AnswerSlot:
    """How much of RailCap's collateral damage on the clean model its answer slot causes.

    RailCap and ``railcap:protect=answer`` on M_cl (controls) cap the same steps up to the
    answer marker and differ only after it, so the difference of their over-suppression
    component S-Δ- (paper Table 4, collateral damage) is the damage done in the answer slot;
    what remains with the slot exempt is the damage done in the reasoning steps. ``slot`` is
    that difference with its two-sided interval at ``1 - ALPHA`` (weak null), ``sa_ppg`` the
    same for SA-PPG; ``reason`` says why no interval was possible (then they are NaN).
    """

    damage: float
    reasoning: float
    slot: tuple[float, float, float]
    sa_ppg: tuple[float, float, float]
    reason: str | None = None

    def sentence(self) -> str:
        def shown(value: tuple[float, float, float]) -> str:
            bounds = f"({self.reason})" if self.reason else f"[{value[1]:+.3f}, {value[2]:+.3f}]"
            return f"{value[0]:+.3f} {bounds}"

        share = self.slot[0] / self.damage if self.damage > 0 else math.nan
        return (f"RailCap's collateral damage on the clean model (S-Δ-) {self.damage:.3f}: "
                f"{shown(self.slot)} ({share:.0%}) from capping the answer slot, "
                f"{self.reasoning:.3f} from the reasoning steps ({PROTECTED}); SA-PPG "
                f"{shown(self.sa_ppg)}")


def answer_slot(gaps: GapIntervals) -> AnswerSlot | None:
    """:class:`AnswerSlot` from the controls' gaps (None unless both RailCap and its
    answer-protecting variant were applied to the clean model)."""
    if not {RAILCAP, PROTECTED} <= set(gaps.names):
        return None

    slot, sa = (compare(gaps, RAILCAP, PROTECTED, metric=metric, null=NULL)
                for metric in ("s_delta_minus", "sa_ppg"))
    return AnswerSlot(gaps.estimates[gaps.index(RAILCAP)].s_delta_minus,
                      gaps.estimates[gaps.index(PROTECTED)].s_delta_minus,
                      (slot.difference, slot.low, slot.high), (sa.difference, sa.low, sa.high),
                      slot.reason or sa.reason)
