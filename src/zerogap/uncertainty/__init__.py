"""Uncertainty for the restoration metrics: intervals, paired tests, the noise floor, verdicts.

The paper (arXiv 2608.07341) reports point estimates only. What a user needs beside them, and
what each number here means:

* **A strategy's interval** (:func:`gap_intervals`, :meth:`GapIntervals.interval`; module
  :mod:`~zerogap.uncertainty.intervals`): where the metric's expectation lies *for these
  questions*, over new samples of the clean and the mitigated model at the same m. Sampling
  noise is the only randomness: the benchmark is taken as given, as GSM8K's 1,319 questions
  are. Method: the metric is a weighted sum of per-question terms (SA-PPG's weights are
  ``1 / (n_strata * n_stratum(q))``), so its variance is the weighted sum of the terms'
  variances, each computed exactly from two binomials and averaged over the question's
  empirical-Bayes posteriors of its two solve probabilities
  (:mod:`~zerogap.uncertainty.solve_prior`). The interval is the estimate plus or minus a
  normal quantile times that standard error.
  Plug-in ``c / m`` would give questions seen at 0/m or m/m no variance at all, which is what
  made the old question bootstrap state intervals such as [0.611, 0.611].
* **A paired comparison** (:func:`compare`; :mod:`~zerogap.uncertainty.paired`): is strategy
  a's metric different from b's? A randomisation test that swaps a's and b's outcomes question
  by question (a sign flip of the per-question difference for the metrics that are weighted
  sums; a swap of the two runs for G-APP and G-AP), exact by enumeration when there are few
  questions. When a and b are equal in distribution on every question, the swap changes
  nothing in distribution, so the test holds its level exactly, whatever N, m, B and the clean
  model are, and for either reading (these questions re-sampled, or a new draw of questions).
  Its interval is the set of differences the same test does not reject (for weighted sums: the
  test of a shifted difference, inverted in closed form), so the interval excludes 0 exactly
  when the p-value is at most ``1 - level``.
* **The noise floor** (:func:`noise_floor`; :mod:`~zerogap.uncertainty.floor`): what two
  independent batches of the *same* model read, simulated from the empirical-Bayes posteriors;
  its mean matches a measured second batch in expectation (checked in the tests and the
  README's simulation).
* **A verdict** (:func:`restoration_verdicts`; :mod:`~zerogap.uncertainty.verdicts`): restored
  / not restored / inconclusive by one rule, an equivalence test of SA-PPG's excess over the
  noise floor against a margin.
* **A difference on these questions** (:func:`difference_interval`): two strategies' metric
  difference with its interval over new samples, the questions fixed, as a strategy's interval
  is.
* **An allocation** (:func:`allocate_samples`; :mod:`~zerogap.uncertainty.allocation`): how
  many samples each question gets so that SA-PPG and the paired differences reach a precision
  for fewer samples than a uniform m; everything above accepts a different m per question.
  :func:`allocation_shift` (:mod:`~zerogap.uncertainty.shift`) estimates how far a plan moves
  each strategy's expected SA-PPG from a uniform study's.

Below :data:`MIN_QUESTIONS` questions no interval, comparison or verdict is calibrated (the
calibration suite starts there), and each says so instead of printing a number.
:mod:`~zerogap.uncertainty.calibration` simulates studies whose truth is known to check all of
it; :mod:`~zerogap.uncertainty.student_t` is the t reference of the weak-null test.

Pure numpy.
"""

from zerogap.uncertainty.allocation import Allocation, allocate_samples
from zerogap.uncertainty.floor import NoiseFloor, noise_floor
from zerogap.uncertainty.intervals import (
    LINEAR_METRICS,
    MIN_QUESTIONS,
    QUESTIONS_PER_BIN,
    STRATIFIED,
    GapIntervals,
    Interval,
    choose_bins,
    difference_interval,
    gap_intervals,
    stratum_weights,
    too_few,
)
from zerogap.uncertainty.paired import ALTERNATIVES, NULLS, PairedComparison, compare
from zerogap.uncertainty.shift import allocation_shift
from zerogap.uncertainty.verdicts import VERDICT_OUTCOMES, Verdict, restoration_verdicts

__all__ = [
    "ALTERNATIVES",
    "LINEAR_METRICS",
    "MIN_QUESTIONS",
    "NULLS",
    "QUESTIONS_PER_BIN",
    "STRATIFIED",
    "VERDICT_OUTCOMES",
    "Allocation",
    "GapIntervals",
    "Interval",
    "NoiseFloor",
    "PairedComparison",
    "Verdict",
    "allocate_samples",
    "allocation_shift",
    "choose_bins",
    "compare",
    "difference_interval",
    "gap_intervals",
    "noise_floor",
    "restoration_verdicts",
    "stratum_weights",
    "too_few",
]
