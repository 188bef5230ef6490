"""Design criteria of a study setting, measured on its two models alone (issue 21).

A miniature of the paper's experiment (arXiv 2608.07341 §5) can only test its claims in the
paper's regime, so before any strategy samples, the study measures that regime from the clean
model's two batches, the contaminated model's plain samples (identity) and its greedy decodes:

===================  ===============================================================  ========
criterion            statistic                                                        required
===================  ===============================================================  ========
spread               share of questions whose clean solve probability is in (0, 1)    >= 0.40
no floor             share of questions the clean model never solves                  <= 1/3
collapse (leaked)    share of M_co's samples equal to its greedy decode, leaked       >= 0.70
dispersion           the same share on unleaked questions                             <= 0.30
contamination        exact one-sided sign test, r_co > r_cl on leaked questions       p <= .01
no spill-over        |mean (r_co - r_cl)| on unleaked questions, against the 95% band  <= band
                     two clean batches' mean difference would show there
===================  ===============================================================  ========

The stratification (spread, no floor) is what SA-PPG's strata and Figure 2 need; collapse and
dispersion are the paper's first observation, RailCap's premise (§4); the last two say that
M_co is contaminated on the leaked questions and only there. "Equal to its greedy decode"
compares the stripped response texts. The band of the last criterion is
``1.96 * sd(r_cl' - r_cl) / sqrt(n)`` over the n unleaked questions, ``r_cl'`` the clean
model's second batch: under "M_co behaves as M_cl there", ``r_co - r_cl`` is another such
difference. Each criterion is reported met or not; a study goes on either way.

Torch-free; the study (:mod:`zerogap.study.run`) gathers the arrays and writes the
result beside its runs, the report reads it back.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from zerogap.errors import DataError
from zerogap.io.files import atomic_write
from zerogap.io.jsonlines import read_json_object

DESIGN_FORMAT = "zerogap-design-checks"
SPREAD_MIN = 0.40
FLOOR_MAX = 1 / 3
COLLAPSE_MIN = 0.70
DISPERSION_MAX = 0.30
SIGN_ALPHA = 0.01
BAND_Z = 1.96


@dataclass(frozen=True)
class Criterion:
    """One design criterion: ``value`` compared with ``threshold`` by ``op`` ("<=" or ">=")."""

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


def _criterion(key: str, statistic: str, value: float, op: str, threshold: float,
               detail: str) -> Criterion:
    met = bool(np.isfinite(value)) and (value >= threshold if op == ">=" else value <= threshold)
    return Criterion(key, statistic, float(value), op, float(threshold), met, detail)


def design_criteria(clean, repeat, contaminated, copies, samples, leaked) -> list[Criterion]:
    """The six criteria of the module docstring, in its order.

    Parameters
    ----------
    clean, repeat : array-like of float, shape (n_questions,)
        The clean model's solve probabilities from its two independent batches.
    contaminated : array-like of float, shape (n_questions,)
        The contaminated model's solve probabilities (identity).
    copies, samples : array-like of int, shape (n_questions,)
        Per question, identity samples equal to the contaminated greedy decode, and samples.
    leaked : array-like of bool, shape (n_questions,)

    Examples
    --------
    >>> out = design_criteria([0.5, 0.0, 0.5, 0.5], [0.5, 0.0, 0.5, 1.0], [1.0, 1.0, 0.5, 0.5],
    ...                       [4, 4, 0, 1], [4, 4, 4, 4], [True, True, False, False])
    >>> [(c.key, c.met) for c in out][:4]
    [('spread', True), ('no floor', True), ('collapse (leaked)', True), ('dispersion', True)]
    """
    clean, repeat, co = (np.asarray(a, dtype=float) for a in (clean, repeat, contaminated))
    copies, samples = np.asarray(copies, dtype=int), np.asarray(samples, dtype=int)
    leaked = np.asarray(leaked, dtype=bool)
    n = clean.size
    if not all(a.shape == (n,) for a in (repeat, co, copies, samples, leaked)) or n == 0:
        raise ValueError("design checks need equal-length, non-empty per-question arrays")
    between = int(((clean > 0) & (clean < 1)).sum())
    zero = int((clean == 0).sum())
    out = [
        _criterion("spread", "share of questions with a clean solve probability in (0, 1)",
                   between / n, ">=", SPREAD_MIN, f"{between} of {n} questions"),
        _criterion("no floor", "share of questions the clean model never solves", zero / n,
                   "<=", FLOOR_MAX, f"{zero} of {n} questions"),
    ]
    for key, mask, op, threshold in (("collapse (leaked)", leaked, ">=", COLLAPSE_MIN),
                                     ("dispersion", ~leaked, "<=", DISPERSION_MAX)):
        side = "leaked" if key.startswith("collapse") else "unleaked"
        same, total = int(copies[mask].sum()), int(samples[mask].sum())
        out.append(_criterion(key, f"share of M_co's samples equal to its greedy decode, {side}",
                              same / total if total else math.nan, op, threshold,
                              f"{same} of {total} samples"))
    wins = int((co[leaked] > clean[leaked]).sum())
    losses = int((co[leaked] < clean[leaked]).sum())
    out.append(_criterion("contamination", "exact one-sided sign test p, r_co > r_cl on leaked",
                          sign_test(wins, losses), "<=", SIGN_ALPHA,
                          f"{wins} up, {losses} down, {int(leaked.sum()) - wins - losses} tied"))
    unleaked = ~leaked
    k = int(unleaked.sum())
    shift = float(np.mean(co[unleaked] - clean[unleaked])) if k else math.nan
    spread = float(np.std(repeat[unleaked] - clean[unleaked], ddof=1)) if k > 1 else math.nan
    band = BAND_Z * spread / math.sqrt(k) if k > 1 else math.nan
    out.append(_criterion("no spill-over", "|mean (r_co - r_cl)| on unleaked questions",
                          abs(shift), "<=", band,
                          f"mean shift {shift:+.3f} over {k} questions; band from the clean "
                          "batches"))
    return out


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
