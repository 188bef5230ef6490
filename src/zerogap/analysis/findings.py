"""The paper's three findings as tests with a stated statistic (arXiv 2608.07341 §5, issue 21).

* **F1** RailCap restores best: its SA-PPG is below Identity's and below every baseline's
  (TED, LNE-blocking, shortcut patching, All-Zero, whichever the study ran). One one-sided
  paired test per baseline, ``SA-PPG(railcap) - SA-PPG(b) < 0``.
* **F2** The A-PPG paradox: All-Zero reads a smaller A-PPG than Identity, yet the largest
  SA-PPG of all strategies. One-sided paired tests ``A-PPG(all-zero) - A-PPG(identity) < 0``
  and ``SA-PPG(s) - SA-PPG(all-zero) < 0`` for every other strategy ``s``.
* **F3** The 0/1 readout is noise: between the clean model's two independent batches, the
  mean per-question gap of one sampled response per question is far above that of the solve
  probabilities (paper: 0.190 vs 0.041). "Far above" is fixed here as more than twice: the
  one-sided test is ``gap01 - 2 * gap_r > 0``, questions resampled in pairs.

Each paired test is :func:`zerogap.uncertainty.compare` under the weak null (``null="mean"``:
the two strategies equal *on average*, the claim each finding makes) on one
:func:`~zerogap.uncertainty.gap_intervals` of all strategies, one-sided at ``ALPHA`` = 0.05 in
each direction. The exact swap test's null (equal on every question) is stronger than any of
the claims, and its interval follows the root mean square of the per-question differences, so
it is about twice as wide when a strategy helps some questions and harms others
(``docs/uncertainty.md``). A finding is *reproduced* when all its tests reject in the paper's
direction, *not reproduced* when at least one rejects in the opposite direction, and
*inconclusive* otherwise (with the numbers either way, or the reason no test was possible).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from zerogap.uncertainty import compare, gap_intervals

ALPHA = 0.05
NULL = "mean"
RAILCAP = "railcap"
IDENTITY = "identity"
ALL_ZERO = "all-zero"
BASELINES = (IDENTITY, "ted", "lne-blocking", "shortcut", ALL_ZERO)
F3_FACTOR = 2.0
PAPER_F3 = (0.190, 0.041)
# SA-PPG of the strategies the paper's text reports for Llama-2 on GSM8K (§5.2.1 and the
# discussion of Table 2; TED's is only in the table, whose values the text does not repeat).
PAPER_SA_PPG = {"identity": 0.3261, "lne-blocking": 0.2932, "shortcut": 0.2476,
                "railcap": 0.1914, "all-zero": 0.4903}
OUTCOMES = ("reproduced", "not reproduced", "inconclusive")


@dataclass(frozen=True)
class Test:
    """One one-sided test: ``difference`` with its one-sided bounds at ``1 - ALPHA`` each.

    ``holds``: the upper bound excludes 0 in the paper's direction (``high < 0``);
    ``reversed``: the lower bound excludes it in the opposite one (``low > 0``); ``p_value``
    is the paper's direction's. ``reason`` says why no test was possible (then neither).
    """

    claim: str
    difference: float
    low: float
    high: float
    p_value: float
    reason: str | None = None

    @property
    def holds(self) -> bool:
        return self.reason is None and self.high < 0

    @property
    def reversed(self) -> bool:
        return self.reason is None and self.low > 0


@dataclass(frozen=True)
class Finding:
    key: str
    claim: str
    outcome: str
    statistic: str
    tests: tuple[Test, ...]
    note: str = ""

    def to_dict(self) -> dict:
        return {**asdict(self), "tests": [asdict(t) for t in self.tests]}

    def sentence(self) -> str:
        """One line for a terminal: outcome and the tests' differences with their bounds."""
        parts = [f"{t.claim}: {t.difference:+.3f} " + (f"({t.reason})" if t.reason else
                                                      f"[{t.low:+.3f}, {t.high:+.3f}]")
                 for t in self.tests]
        return f"{self.key} {self.outcome}: " + "; ".join(parts) + (
            f" ({self.note})" if self.note else "")


def _outcome(tests: Sequence[Test]) -> str:
    if not tests:
        return "inconclusive"
    if any(t.reversed for t in tests):
        return "not reproduced"
    return "reproduced" if all(t.holds for t in tests) else "inconclusive"


def _less(gaps, a: str, b: str, metric: str) -> Test:
    """The one-sided tests of ``metric(a) < metric(b)`` and of the reverse, at ``1 - ALPHA``."""
    less = compare(gaps, a, b, metric=metric, alternative="less", null=NULL)
    greater = compare(gaps, a, b, metric=metric, alternative="greater", null=NULL)
    return Test(f"{metric.replace('_', '-').upper()}({a}) - ({b})", less.difference,
                greater.low, less.high, less.p_value, less.reason)


def _f3(clean_first, repeat_first, clean_r, repeat_r, *, n_boot: int, seed: int) -> Finding:
    """F3 by a paired question bootstrap of ``gap01 - 2 * gap_r``."""
    g01 = np.abs(np.asarray(clean_first, float) - np.asarray(repeat_first, float))
    gr = np.abs(np.asarray(clean_r, float) - np.asarray(repeat_r, float))
    per = g01 - F3_FACTOR * gr  # (n_questions,)
    rng = np.random.default_rng([seed, 3])
    idx = rng.integers(0, per.size, size=(n_boot, per.size))
    reps = per[idx].mean(axis=1)
    low, high = np.quantile(reps, [ALPHA, 1 - ALPHA])
    observed = float(per.mean())
    # Written as "2 gap_r - gap01 < 0" so that, like every test here, high < 0 is the claim.
    test = Test("2 x gap(solve prob.) - gap(0/1)", -observed, float(-high), float(-low),
                float((1 + np.count_nonzero(reps <= 0)) / (1 + n_boot)))
    return Finding(
        "F3", "the 0/1 readout's clean batch-to-batch gap is more than twice the solve "
        "probability's", _outcome([test]),
        f"mean |0/1 difference| {g01.mean():.3f} vs mean |solve-probability difference| "
        f"{gr.mean():.3f} (paper {PAPER_F3[0]} vs {PAPER_F3[1]})", (test,))


def findings(clean_counts, strategies: dict, repeat=None, *, bins: int, n_resamples: int,
             seed: int) -> list[Finding]:
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
    """
    c = clean_counts
    names = list(strategies)
    gaps = gap_intervals(
        c.correct, c.samples, np.stack([strategies[n].correct for n in names]),
        np.stack([strategies[n].samples for n in names]), names=names, bins=bins,
        n_resamples=n_resamples, level=1 - ALPHA, seed=seed)
    out = []
    base = [b for b in BASELINES if b in strategies]
    if RAILCAP in strategies and base:
        tests = tuple(_less(gaps, RAILCAP, b, "sa_ppg") for b in base)
        out.append(Finding("F1", "RailCap's SA-PPG below Identity's and every baseline's",
                           _outcome(tests), "paired SA-PPG differences, one-sided, weak null "
                           "(stratified t)", tests))
    else:
        out.append(Finding("F1", "RailCap's SA-PPG below Identity's and every baseline's",
                           "inconclusive", "", (), "the study ran no RailCap or no baseline"))
    if ALL_ZERO in strategies and IDENTITY in strategies:
        others = [n for n in names if n != ALL_ZERO]
        tests = (_less(gaps, ALL_ZERO, IDENTITY, "a_ppg"),
                 *(_less(gaps, n, ALL_ZERO, "sa_ppg") for n in others))
        out.append(Finding("F2", "All-Zero better than Identity under A-PPG, worst under SA-PPG",
                           _outcome(tests), "paired A-PPG and SA-PPG differences, one-sided, "
                           "weak null (stratified t)",
                           tests))
    else:
        out.append(Finding("F2", "All-Zero better than Identity under A-PPG, worst under SA-PPG",
                           "inconclusive", "", (), "the study ran no identity"))
    if repeat is not None and c.first is not None and repeat.first is not None:
        out.append(_f3(c.first, repeat.first, c.correct / c.samples,
                       repeat.correct / repeat.samples, n_boot=n_resamples, seed=seed))
    else:
        out.append(Finding("F3", "the 0/1 readout's clean batch-to-batch gap is more than twice "
                           "the solve probability's", "inconclusive", "", (),
                           "no second clean batch with single draws"))
    return out
