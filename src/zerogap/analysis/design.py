"""Design criteria of a study setting, measured on its two models alone (issues 21 and 47).

A miniature of the paper's experiment (arXiv 2608.07341 §5) can only test its claims in the
paper's regime, so before any strategy samples, the study measures that regime from the clean
model's two batches and greedy decodes, and the contaminated model's plain samples (identity)
and greedy decodes:

==========================  ========================================================  =========
criterion                   statistic                                                 required
==========================  ========================================================  =========
spread                      share of questions whose clean solve probability is in    >= 0.40
                            (0, 1)
no floor                    share of questions the clean model never solves           <= 1/3
clean mean (min)            the clean model's mean solve probability                  >= 0.15
clean mean (max)            the same                                                  <= 0.35
contamination               exact one-sided sign test, r_co > r_cl on leaked          p <= .01
no spill-over               abs(mean (r_co - r_cl)) on unleaked questions, against    <= band
                            the 95% band two clean batches' mean difference shows
collapse (ROUGE-L, leaked)  median over leaked questions of the mean ROUGE-L of       >= 0.90
                            M_co's samples to its greedy decode (Figure 1 a)
dispersion (ROUGE-L,        the same median over unleaked questions (Figure 1 c)      <= 0.60
unleaked)
trigger (M_co, leaked)      share of M_co's sampled steps whose last n = 4 tokens     >= 0.80
                            are an n-gram of its greedy decode, leaked questions
trigger (M_co, unleaked)    the same share on unleaked questions                      <= 0.50
trigger (M_cl)              the same share for M_cl's samples and greedy decodes,     <= 0.50
                            every question
clean mean below A-PPG      mean r_cl against A-PPG(identity) = mean abs(r_co - r_cl) <  A-PPG
==========================  ========================================================  =========

The stratification (spread, no floor) is what SA-PPG's strata and Figure 2 need, and the clean
mean puts the clean model where the paper's is (0.219 on GSM8K). Contamination and spill-over
say that M_co is inflated on the leaked questions and only there. ROUGE-L and the trigger rate
are the paper's first observation, RailCap's premise (§1, §4): on leaked questions the samples
collapse onto the greedy trajectory, on unleaked ones they disperse, so RailCap triggers where
the memory is and rarely elsewhere. The last criterion is arithmetic: All-Zero's A-PPG is the
clean mean, so where it is not below Identity's, F2 ("All-Zero beats Identity under A-PPG") is
false by construction. It is reported, not a gate of F2: on the same counts it is the sign of
F2's own first test, and gating that test on it would select the studies where the test leans
the paper's way (:mod:`zerogap.analysis.findings`). F2 is gated instead on spread and no floor
measured on the two clean batches pooled (:func:`pooled_stratification`).

ROUGE-L is the F-measure (beta = 1) of the longest common subsequence of two texts' words,
tokenised as the standard ROUGE package does (:func:`rouge_words`); each question's value is
the mean over its samples. The trigger rate is counted in the sampling model's own tokens (the
study tokenises the stored texts again with the model's tokenizer: the run store keeps no
sample's token ids). A sampled step is a position of a sample with n tokens before it, up to
its end (the step that stopped it included): a sample of L tokens has L - n + 1 of them, one
per n-gram it contains, and the trigger rate pools them over a group's samples.

The band of the spill-over criterion is ``1.96 * sd(r_cl' - r_cl) / sqrt(n)`` over the n
unleaked questions, ``r_cl'`` the clean model's second batch: under "M_co behaves as M_cl
there", ``r_co - r_cl`` is another such difference. Each criterion is reported met or
not; a study goes on either way.

Torch-free: the model's tokenizer comes in as a function. The study's design-check job
(:func:`zerogap.study.checks.design_checks`) gathers the runs' texts and counts and writes the
result beside its runs; the report reads it back, and the findings' preconditions
(:data:`zerogap.analysis.findings.PRECONDITIONS`) name these criteria by their keys.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from zerogap.errors import DataError
from zerogap.io.files import atomic_write
from zerogap.io.jsonlines import read_json_object

DESIGN_FORMAT = "zerogap-design-checks"
SPREAD_MIN = 0.40
FLOOR_MAX = 1 / 3
CLEAN_MEAN_RANGE = (0.15, 0.35)
SIGN_ALPHA = 0.01
BAND_Z = 1.96
ROUGE_LEAKED_MIN = 0.90
ROUGE_UNLEAKED_MAX = 0.60
TRIGGER_LEAKED_MIN = 0.80
TRIGGER_UNLEAKED_MAX = 0.50
TRIGGER_N = 4  # RailCap's default n (§4)
_NON_ALNUM = re.compile(r"[^a-z0-9]+")

# The criteria's keys, in the order design_criteria returns them.
SPREAD, NO_FLOOR = "spread", "no floor"
CLEAN_MEAN_MIN, CLEAN_MEAN_MAX = "clean mean (min)", "clean mean (max)"
CONTAMINATION, NO_SPILL_OVER = "contamination", "no spill-over"
ROUGE_LEAKED, ROUGE_UNLEAKED = "collapse (ROUGE-L, leaked)", "dispersion (ROUGE-L, unleaked)"
TRIGGER_LEAKED, TRIGGER_UNLEAKED = "trigger (M_co, leaked)", "trigger (M_co, unleaked)"
TRIGGER_CLEAN = "trigger (M_cl)"
CLEAN_BELOW_APPG = "clean mean below A-PPG"
KEYS = (SPREAD, NO_FLOOR, CLEAN_MEAN_MIN, CLEAN_MEAN_MAX, CONTAMINATION, NO_SPILL_OVER,
        ROUGE_LEAKED, ROUGE_UNLEAKED, TRIGGER_LEAKED, TRIGGER_UNLEAKED, TRIGGER_CLEAN,
        CLEAN_BELOW_APPG)


@dataclass(frozen=True)
class Criterion:
    """One design criterion: ``value`` compared with ``threshold`` by ``op`` (">=", "<=" or
    "<")."""

    key: str
    statistic: str
    value: float
    op: str
    threshold: float
    met: bool
    detail: str

    def sentence(self) -> str:
        """``"spread: 0.417 >= 0.400 (met; 5 of 12 questions)"``."""
        state = "met" if self.met else "NOT met"
        return (f"{self.key}: {self.value:.3f} {self.op} {self.threshold:.3f} ({state}; "
                f"{self.detail})")


def sign_test(wins: int, losses: int) -> float:
    """Exact one-sided sign test: ``P(X >= wins)`` for ``X ~ Binomial(wins + losses, 1/2)``
    (ties are dropped before); 1.0 when there is no untied pair.

    Examples
    --------
    >>> sign_test(8, 0), round(sign_test(6, 2), 4), sign_test(0, 0)
    (0.00390625, 0.1445, 1.0)
    """
    n = wins + losses
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n if n else 1.0


def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common subsequence of two sequences (dynamic programming, one
    row of ``len(b) + 1`` at a time).

    Examples
    --------
    >>> lcs_length([1, 2, 3, 4], [2, 4, 3]), lcs_length("abc", "")
    (2, 0)
    """
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0  # row[j - 1] of the previous row
        for j, y in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if x == y else max(row[j - 1], above)
            diagonal = above
    return row[-1]


def rouge_l(candidate: Sequence[Hashable], reference: Sequence[Hashable]) -> float:
    """ROUGE-L F-measure (beta = 1) of two token sequences: ``2 P R / (P + R)`` with
    ``P = LCS / len(candidate)``, ``R = LCS / len(reference)``; 1.0 for two empty sequences,
    0.0 when only one is empty.

    Examples
    --------
    >>> rouge_l([1, 2, 3, 4], [1, 2, 3, 4]), rouge_l([1, 2], [3, 4])
    (1.0, 0.0)
    >>> rouge_l([1, 2, 3, 4], [1, 2])  # P = 1/2, R = 1
    0.6666666666666666
    """
    if not candidate and not reference:
        return 1.0
    common = lcs_length(candidate, reference)
    return 2 * common / (len(candidate) + len(reference))


def ngram_hits(sample: Sequence[Hashable], trajectory: Sequence[Hashable],
               n: int = TRIGGER_N) -> tuple[int, int]:
    """``(hits, steps)``: the sampled steps of ``sample`` (its positions with ``n`` tokens before
    them, up to its end: one per n-gram of the sample) and how many of them have for their last
    ``n`` tokens an n-gram of ``trajectory``, the sampling model's greedy decode; where RailCap
    (§4) would look its window up.

    Examples
    --------
    >>> ngram_hits([1, 2, 3, 9], [1, 2, 3, 4], n=2)  # (1, 2) and (2, 3) hit, (3, 9) does not
    (2, 3)
    >>> ngram_hits([1], [1, 2], n=2)
    (0, 0)
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    grams = {tuple(trajectory[i:i + n]) for i in range(len(trajectory) - n + 1)}
    windows = [tuple(sample[i:i + n]) for i in range(len(sample) - n + 1)]
    return sum(w in grams for w in windows), len(windows)


def rouge_words(text: str) -> list[str]:
    """ROUGE's own tokens of a text, as the rouge-score package makes them (no stemming): the
    text lowercased, every run of characters other than a-z and 0-9 a separator.

    Examples
    --------
    >>> rouge_words("Mia has 17 - 13 = 4 beads. The answer is 4.")
    ['mia', 'has', '17', '13', '4', 'beads', 'the', 'answer', 'is', '4']
    """
    return _NON_ALNUM.sub(" ", text.lower()).split()


@dataclass(frozen=True)
class TrajectoryStats:
    """Per question, one model's plain samples against its own greedy decode.

    ``rouge`` (float), ``hits`` and ``steps`` (int), each of shape (n_questions,): the mean
    ROUGE-L of the question's samples to the decode, and :func:`ngram_hits` summed over them.
    """

    rouge: np.ndarray
    hits: np.ndarray
    steps: np.ndarray


def trajectory_stats(samples: Sequence[Sequence[str]], greedy: Sequence[str],
                     tokenize: Callable[[str], Sequence[Hashable]], n: int = TRIGGER_N
                     ) -> TrajectoryStats:
    """:class:`TrajectoryStats` of questions given as ``samples[q]`` (the question's sampled
    texts) and ``greedy[q]`` (its greedy decode's text).

    ROUGE-L is taken on :func:`rouge_words`, as the paper's Figure 1 measure is the standard
    ROUGE-L; the trigger rate on ``tokenize(text)``, the sampling model's own tokens, where
    RailCap looks its windows up. A question without samples gets ROUGE-L NaN and no steps.

    Examples
    --------
    >>> s = trajectory_stats([["a b c", "a b c"], ["x y z"]], ["a b c", "a b c"], str.split, n=2)
    >>> s.rouge.tolist(), s.hits.tolist(), s.steps.tolist()
    ([1.0, 0.0], [4, 0], [4, 2])
    """
    if len(samples) != len(greedy):
        raise ValueError(f"{len(samples)} questions of samples but {len(greedy)} greedy decodes")
    rouge, hits, steps = [], [], []
    for texts, decode in zip(samples, greedy, strict=True):
        words, tokens = rouge_words(decode), tokenize(decode)
        counted = [ngram_hits(tokenize(text), tokens, n) for text in texts]
        rouge.append(float(np.mean([rouge_l(rouge_words(text), words) for text in texts]))
                     if texts else math.nan)
        hits.append(sum(h for h, _ in counted))
        steps.append(sum(t for _, t in counted))
    return TrajectoryStats(np.array(rouge, dtype=float), np.array(hits, dtype=int),
                           np.array(steps, dtype=int))


def _criterion(key: str, statistic: str, value: float, op: str, threshold: float,
               detail: str) -> Criterion:
    compare = {">=": np.greater_equal, "<=": np.less_equal, "<": np.less}[op]
    met = bool(np.isfinite(value) and np.isfinite(threshold) and compare(value, threshold))
    return Criterion(key, statistic, float(value), op, float(threshold), met, detail)


def _median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else math.nan


def _trigger(key: str, who: str, stats: TrajectoryStats, mask: np.ndarray, op: str,
             threshold: float) -> Criterion:
    hits, steps = int(stats.hits[mask].sum()), int(stats.steps[mask].sum())
    return _criterion(key, f"share of {who}'s sampled steps whose last {TRIGGER_N} tokens are "
                      "an n-gram of its greedy decode", hits / steps if steps else math.nan, op,
                      threshold, f"{hits} of {steps} steps")


def design_criteria(clean, repeat, contaminated, leaked, *, co: TrajectoryStats,
                    cl: TrajectoryStats) -> list[Criterion]:
    """The twelve criteria of the module docstring, in its order (keys: :data:`KEYS`).

    Parameters
    ----------
    clean, repeat : array-like of float, shape (n_questions,)
        The clean model's solve probabilities from its two independent batches.
    contaminated : array-like of float, shape (n_questions,)
        The contaminated model's solve probabilities (identity).
    leaked : array-like of bool, shape (n_questions,)
    co, cl : TrajectoryStats
        The contaminated model's identity samples against its greedy decodes, and the clean
        model's (first batch) against its own.

    Examples
    --------
    >>> same = trajectory_stats([["a b c d e"]] * 4, ["a b c d e"] * 4, str.split)
    >>> out = design_criteria([0.5, 0.0, 0.25, 0.5], [0.5, 0.0, 0.5, 0.25], [1.0, 1.0, 0.25, 0.5],
    ...                       [True, True, False, False], co=same, cl=same)
    >>> failed = [c.key for c in out if not c.met]  # every sample is its greedy decode
    >>> failed[:2]
    ['contamination', 'dispersion (ROUGE-L, unleaked)']
    >>> failed[2:]
    ['trigger (M_co, unleaked)', 'trigger (M_cl)']
    """
    clean, repeat, co_r = (np.asarray(a, dtype=float) for a in (clean, repeat, contaminated))
    leaked = np.asarray(leaked, dtype=bool)
    n = clean.size
    arrays = (repeat, co_r, leaked, co.rouge, co.hits, co.steps, cl.rouge, cl.hits, cl.steps)
    if n == 0 or not all(np.shape(a) == (n,) for a in arrays):
        raise ValueError("design checks need equal-length, non-empty per-question arrays")
    between = int(((clean > 0) & (clean < 1)).sum())
    zero = int((clean == 0).sum())
    mean = float(clean.mean())
    low, high = CLEAN_MEAN_RANGE
    out = [
        _criterion(SPREAD, "share of questions with a clean solve probability in (0, 1)",
                   between / n, ">=", SPREAD_MIN, f"{between} of {n} questions"),
        _criterion(NO_FLOOR, "share of questions the clean model never solves", zero / n,
                   "<=", FLOOR_MAX, f"{zero} of {n} questions"),
        _criterion(CLEAN_MEAN_MIN, "the clean model's mean solve probability", mean, ">=", low,
                   f"over {n} questions"),
        _criterion(CLEAN_MEAN_MAX, "the clean model's mean solve probability", mean, "<=", high,
                   f"over {n} questions"),
    ]
    wins = int((co_r[leaked] > clean[leaked]).sum())
    losses = int((co_r[leaked] < clean[leaked]).sum())
    out.append(_criterion(CONTAMINATION, "exact one-sided sign test p, r_co > r_cl on leaked",
                          sign_test(wins, losses), "<=", SIGN_ALPHA,
                          f"{wins} up, {losses} down, {int(leaked.sum()) - wins - losses} tied"))
    unleaked = ~leaked
    k = int(unleaked.sum())
    shift = float(np.mean(co_r[unleaked] - clean[unleaked])) if k else math.nan
    spread = float(np.std(repeat[unleaked] - clean[unleaked], ddof=1)) if k > 1 else math.nan
    band = BAND_Z * spread / math.sqrt(k) if k > 1 else math.nan
    out.append(_criterion(NO_SPILL_OVER, "|mean (r_co - r_cl)| on unleaked questions",
                          abs(shift), "<=", band,
                          f"mean shift {shift:+.3f} over {k} questions; band from the clean "
                          "batches"))
    for key, mask, op, threshold in ((ROUGE_LEAKED, leaked, ">=", ROUGE_LEAKED_MIN),
                                     (ROUGE_UNLEAKED, unleaked, "<=", ROUGE_UNLEAKED_MAX)):
        side = "leaked" if mask is leaked else "unleaked"
        out.append(_criterion(key, f"median over {side} questions of the mean ROUGE-L of M_co's "
                              "samples to its greedy decode", _median(co.rouge[mask]), op,
                              threshold, f"{int(mask.sum())} questions"))
    out += [_trigger(TRIGGER_LEAKED, "M_co", co, leaked, ">=", TRIGGER_LEAKED_MIN),
            _trigger(TRIGGER_UNLEAKED, "M_co", co, unleaked, "<=", TRIGGER_UNLEAKED_MAX),
            _trigger(TRIGGER_CLEAN, "M_cl", cl, np.ones(n, dtype=bool), "<=",
                     TRIGGER_UNLEAKED_MAX)]
    a_ppg = float(np.mean(np.abs(co_r - clean)))
    out.append(_criterion(CLEAN_BELOW_APPG, "the clean mean (All-Zero's A-PPG) against "
                          "Identity's A-PPG", mean, "<", a_ppg,
                          "otherwise F2 is false by arithmetic"))
    return out


SPREAD_POOLED, NO_FLOOR_POOLED = "spread (clean batches pooled)", "no floor (clean batches pooled)"


def pooled_stratification(clean_correct, clean_samples, repeat_correct, repeat_samples
                          ) -> list[Criterion]:
    """Spread and no floor, as :func:`design_criteria` states them, on the clean model's two
    batches pooled (each question's counts summed): keys :data:`SPREAD_POOLED` and
    :data:`NO_FLOOR_POOLED`.

    A gate read off the first batch alone would select on the batch SA-PPG's strata and every
    paired test are built from; the pooled batches read each question at twice the samples,
    so a question solved now and then is less often read as never solved.

    Parameters
    ----------
    clean_correct, clean_samples : array-like of int, shape (n_questions,)
        The first clean batch's counts.
    repeat_correct, repeat_samples : array-like of int, shape (n_questions,)
        The second's, in the same question order.

    Examples
    --------
    >>> spread, floor = pooled_stratification([0, 0, 4, 8], [8] * 4, [1, 0, 3, 8], [8] * 4)
    >>> spread.value, spread.met, floor.value, floor.met
    (0.5, True, 0.25, True)
    """
    correct = np.asarray(clean_correct, int) + np.asarray(repeat_correct, int)
    samples = np.asarray(clean_samples, int) + np.asarray(repeat_samples, int)
    n = correct.size
    between = int(((correct > 0) & (correct < samples)).sum())
    zero = int((correct == 0).sum())
    return [
        _criterion(SPREAD_POOLED, "share of questions whose pooled clean solve probability is "
                   "in (0, 1)", between / n, ">=", SPREAD_MIN, f"{between} of {n} questions"),
        _criterion(NO_FLOOR_POOLED, "share of questions neither clean batch ever solves",
                   zero / n, "<=", FLOOR_MAX, f"{zero} of {n} questions"),
    ]


def write_design(path: str | Path, criteria: list[Criterion], ids: list[str]) -> None:
    """Write the criteria (and the questions they were measured on) as JSON, atomically."""
    record = {"format": DESIGN_FORMAT, "questions": ids,
              "met": sum(c.met for c in criteria), "criteria": [asdict(c) for c in criteria]}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as handle:
        handle.write(json.dumps(record, indent=2, allow_nan=True) + "\n")


def read_design(path: str | Path) -> list[Criterion]:
    """Criteria written by :func:`write_design`; :class:`DataError` naming a malformed file."""
    record = read_json_object(path, "design checks file")
    try:
        if record.get("format") != DESIGN_FORMAT:
            raise KeyError("format")
        return [Criterion(**c) for c in record["criteria"]]
    except (KeyError, TypeError) as err:
        raise DataError(f"{path}: not a zerogap design checks file ({err})") from None
