"""Restoration metrics: per-question readouts and the gaps between a mitigated and a clean model.

Pure numpy, no torch. Conventions follow scikit-learn's metrics: data positional (the clean
model's readout first, like ``y_true``), options keyword-only, shapes in the docstrings.

Notation (paper §3): ``r(q) = c_q / m_q`` is a question's solve probability estimated from
``m_q`` samples of which ``c_q`` are correct; ``Δ(q) = r_mitigated(q) - r_clean(q)`` is its
per-question probability gap (PPG). Every gap below is a function of Δ (or, for G-AP, of one 0/1
draw per question); all are 0 for a perfect restoration and larger is worse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

DEFAULT_BINS = 50
# The most strata SA-PPG takes. Strata of width 1e-4 already put every two solve probabilities
# c/m with a common m <= 10,000 in different strata, so finer ones change nothing for such runs,
# while per-stratum arrays grow with B (a billion strata is gigabytes).
MAX_BINS = 10_000

# r * B is rounded to this many decimals before flooring, so that c/m values that sit exactly on
# a stratum boundary (0.58 * 50 = 28.999999999999996 in floats) land in the right stratum.
_BOUNDARY_DECIMALS = 9


def _as_vector(x, name: str, *, dtype=float) -> np.ndarray:
    arr = np.asarray(x, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per question), got shape {arr.shape}")
    if dtype is float and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _check_probabilities(r: np.ndarray, name: str) -> None:
    if r.size and (r.min() < 0 or r.max() > 1):
        raise ValueError(f"{name} must lie in [0, 1], got values in [{r.min()}, {r.max()}]")


def _check_pair(r_clean, r_mitigated) -> tuple[np.ndarray, np.ndarray]:
    r_clean = _as_vector(r_clean, "r_clean")
    r_mitigated = _as_vector(r_mitigated, "r_mitigated")
    if r_clean.shape != r_mitigated.shape:
        raise ValueError(
            f"r_clean and r_mitigated cover different numbers of questions: "
            f"{r_clean.size} vs {r_mitigated.size}"
        )
    if r_clean.size == 0:
        raise ValueError("no questions to score")
    _check_probabilities(r_clean, "r_clean")
    _check_probabilities(r_mitigated, "r_mitigated")
    return r_clean, r_mitigated


def solve_probability(correct, samples) -> np.ndarray:
    """Solve probabilities ``c / m`` from per-question counts.

    Parameters
    ----------
    correct : array-like of int, shape (n_questions,)
        Number of correct samples per question.
    samples : array-like of int, shape (n_questions,)
        Number of samples per question; may differ by question, must be positive.

    Returns
    -------
    ndarray of float, shape (n_questions,)

    Examples
    --------
    >>> solve_probability([3, 0, 50], [10, 10, 50])
    array([0.3, 0. , 1. ])
    """
    c = _as_vector(correct, "correct")
    m = _as_vector(samples, "samples")
    if c.shape != m.shape:
        raise ValueError(f"correct and samples differ in length: {c.size} vs {m.size}")
    if np.any(c != np.round(c)) or np.any(m != np.round(m)):
        raise ValueError("correct and samples must be whole numbers")
    if np.any(m <= 0):
        raise ValueError("every question needs at least one sample")
    if np.any(c < 0) or np.any(c > m):
        raise ValueError("correct must lie between 0 and samples")
    return c / m


def outcome_counts(outcomes) -> tuple[np.ndarray, np.ndarray]:
    """Per-question ``(correct, samples)`` counts from 0/1 sample outcomes.

    Parameters
    ----------
    outcomes : array-like of shape (n_questions, m), or a sequence of 1-D 0/1 sequences
        One row per question; rows may have different lengths (m differing by question).

    Returns
    -------
    correct, samples : ndarray of int, shape (n_questions,)

    Examples
    --------
    >>> outcome_counts([[1, 0, 1], [0, 0]])
    (array([2, 0]), array([3, 2]))
    """
    rows = [np.asarray(row, dtype=float) for row in outcomes]
    for i, row in enumerate(rows):
        if row.ndim != 1 or not np.all((row == 0) | (row == 1)):
            raise ValueError(f"outcomes of question {i} must be a 1-D sequence of 0/1 values")
    correct = np.array([int(row.sum()) for row in rows], dtype=np.int64)
    samples = np.array([row.size for row in rows], dtype=np.int64)
    return correct, samples


def single_draw(correct, samples, *, seed: int | np.random.Generator = 0) -> np.ndarray:
    """The single-draw 0/1 readout (paper eq. 1) when only counts are known.

    Picking one of a question's ``m`` graded samples uniformly at random is a Bernoulli draw with
    probability ``c / m``; this draws it for every question. When per-sample outcomes are known,
    use the first sample's outcome instead (what prior work does).

    Parameters
    ----------
    correct, samples : array-like of int, shape (n_questions,)
    seed : int or numpy Generator, default=0

    Returns
    -------
    ndarray of int, shape (n_questions,), values 0 or 1

    Examples
    --------
    >>> single_draw([0, 10], [10, 10], seed=3)
    array([0, 1])
    """
    r = solve_probability(correct, samples)
    return np.random.default_rng(seed).binomial(1, r)


def strata(r_clean, *, bins: int = DEFAULT_BINS) -> np.ndarray:
    """Stratum index of each question: ``b`` such that ``r_clean`` lies in ``[b/B, (b+1)/B)``
    (the paper's bins D_b, eq. 12, counted from 0).

    The last stratum is closed at 1, so ``r_clean = 1`` falls in stratum ``B - 1``.

    Parameters
    ----------
    r_clean : array-like of float, shape (n_questions,)
        The clean model's solve probabilities.
    bins : int, default=50
        Number of equal-width strata ``B`` on [0, 1], at most :data:`MAX_BINS`.

    Returns
    -------
    ndarray of int, shape (n_questions,), values in ``0 .. bins - 1``

    Examples
    --------
    >>> strata([0.0, 0.5, 0.99, 1.0], bins=2)
    array([0, 1, 1, 1])
    """
    if not isinstance(bins, int | np.integer) or not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins must be an integer from 1 to {MAX_BINS}, got {bins!r}")
    r = _as_vector(r_clean, "r_clean")
    _check_probabilities(r, "r_clean")
    index = np.floor(np.round(r * bins, _BOUNDARY_DECIMALS)).astype(np.int64)
    return np.minimum(index, bins - 1)


def g_ap(draw_clean, draw_mitigated) -> float:
    """Gap of Aggregate Performance (paper eq. 2): ``|mean(d_mit) - mean(d_cl)|`` on 0/1 draws.

    Parameters
    ----------
    draw_clean, draw_mitigated : array-like of 0/1, shape (n_questions,)
        One graded sample per question from each model.

    Examples
    --------
    >>> g_ap([1, 0, 0, 1], [1, 1, 1, 0])
    0.25
    """
    d_clean, d_mitigated = _check_pair(draw_clean, draw_mitigated)
    for name, d in (("draw_clean", d_clean), ("draw_mitigated", d_mitigated)):
        if not np.all((d == 0) | (d == 1)):
            raise ValueError(f"{name} must hold 0/1 values")
    return float(abs(d_mitigated.mean() - d_clean.mean()))


def g_app(r_clean, r_mitigated) -> float:
    """Gap of Aggregate Per-question Probabilities (eq. 7): ``|mean(Δ)|``.

    Examples
    --------
    >>> g_app([0.25, 0.75], [0.5, 0.5])
    0.0
    """
    r_clean, r_mitigated = _check_pair(r_clean, r_mitigated)
    return float(abs(np.mean(r_mitigated - r_clean)))


def a_ppg(r_clean, r_mitigated) -> float:
    """Aggregate of Per-question Probability Gaps (eq. 5): ``mean(|Δ|)``.

    Examples
    --------
    >>> a_ppg([0.25, 0.75], [0.5, 0.5])
    0.25
    """
    r_clean, r_mitigated = _check_pair(r_clean, r_mitigated)
    return float(np.mean(np.abs(r_mitigated - r_clean)))


def sa_ppg(r_clean, r_mitigated, *, bins: int = DEFAULT_BINS) -> float:
    """Stratified Aggregate of Per-question Probability Gaps (eq. 13).

    Mean ``|Δ|`` inside each non-empty stratum of the clean solve probability, then the
    unweighted mean over those strata.

    Examples
    --------
    >>> # Three questions the clean model never solves, one it always solves.
    >>> round(sa_ppg([0, 0, 0, 1], [0, 0, 0, 0.2], bins=50), 6)
    0.4
    """
    return restoration_gaps(r_clean, r_mitigated, bins=bins).sa_ppg


@dataclass(frozen=True)
class RestorationGaps:
    """Every restoration metric of one strategy against the clean model.

    ``a_ppg = delta_plus + delta_minus``, ``g_app = |delta_plus - delta_minus|`` and
    ``sa_ppg = s_delta_plus + s_delta_minus``. ``delta_plus`` (Δ+, the paper's eq. 9) is
    under-suppression (inflated performance left in place), ``delta_minus`` (Δ-, eq. 10)
    over-suppression (performance pushed below the clean model). ``g_ap`` is None unless
    single 0/1 draws were given. ``strata_used`` lists the non-empty strata (0-based),
    ``strata_sizes`` their question counts, and ``stratum_delta_plus`` /
    ``stratum_delta_minus`` the mean Δ+ and Δ- inside each of them (what S-Δ+ and S-Δ-
    average; shape (len(strata_used),)).
    """

    n_questions: int
    bins: int
    g_ap: float | None
    g_app: float
    a_ppg: float
    delta_plus: float
    delta_minus: float
    sa_ppg: float
    s_delta_plus: float
    s_delta_minus: float
    strata_used: tuple[int, ...]
    strata_sizes: tuple[int, ...]
    stratum_delta_plus: tuple[float, ...]
    stratum_delta_minus: tuple[float, ...]

    def to_dict(self) -> dict:
        return asdict(self)


def restoration_gaps(
    r_clean,
    r_mitigated,
    *,
    bins: int = DEFAULT_BINS,
    draw_clean=None,
    draw_mitigated=None,
) -> RestorationGaps:
    """All restoration metrics of one mitigated model against the clean model.

    Parameters
    ----------
    r_clean : array-like of float, shape (n_questions,)
        The clean model's solve probabilities; they also define the strata.
    r_mitigated : array-like of float, shape (n_questions,)
        The mitigated (contaminated + strategy) model's solve probabilities, same question order.
    bins : int, default=50
        Number of equal-width strata of SA-PPG.
    draw_clean, draw_mitigated : array-like of 0/1, shape (n_questions,), optional
        Single-draw readouts for G-AP; give both or neither.

    Returns
    -------
    RestorationGaps

    Examples
    --------
    >>> gaps = restoration_gaps([0.0, 0.0, 1.0], [0.0, 0.3, 0.5], bins=10)
    >>> round(gaps.a_ppg, 4), round(gaps.delta_plus, 4), round(gaps.delta_minus, 4)
    (0.2667, 0.1, 0.1667)
    >>> round(gaps.sa_ppg, 4), gaps.strata_used, gaps.strata_sizes
    (0.325, (0, 9), (2, 1))
    >>> gaps.stratum_delta_plus, gaps.stratum_delta_minus
    ((0.15, 0.0), (0.0, 0.5))
    """
    r_clean, r_mitigated = _check_pair(r_clean, r_mitigated)
    if (draw_clean is None) != (draw_mitigated is None):
        raise ValueError("give both draw_clean and draw_mitigated for G-AP, or neither")
    delta = r_mitigated - r_clean
    over = np.maximum(delta, 0.0)
    under = np.maximum(-delta, 0.0)

    stratum = strata(r_clean, bins=bins)
    used, inverse, sizes = np.unique(stratum, return_inverse=True, return_counts=True)
    # Per-stratum means of the positive and negative parts; SA-PPG is their unweighted average.
    s_over = np.bincount(inverse, weights=over) / sizes
    s_under = np.bincount(inverse, weights=under) / sizes

    return RestorationGaps(
        n_questions=int(r_clean.size),
        bins=int(bins),
        g_ap=None if draw_clean is None else g_ap(draw_clean, draw_mitigated),
        g_app=float(abs(delta.mean())),
        a_ppg=float(np.abs(delta).mean()),
        delta_plus=float(over.mean()),
        delta_minus=float(under.mean()),
        sa_ppg=float((s_over + s_under).mean()),
        s_delta_plus=float(s_over.mean()),
        s_delta_minus=float(s_under.mean()),
        strata_used=tuple(int(b) for b in used),
        strata_sizes=tuple(int(n) for n in sizes),
        stratum_delta_plus=tuple(float(v) for v in s_over),
        stratum_delta_minus=tuple(float(v) for v in s_under),
    )


METRIC_NAMES: Sequence[str] = (
    "g_ap",
    "g_app",
    "a_ppg",
    "delta_plus",
    "delta_minus",
    "sa_ppg",
    "s_delta_plus",
    "s_delta_minus",
)
"""The scalar fields of :class:`RestorationGaps`, in the order tables show them."""

METRIC_LABELS: dict[str, str] = {
    "g_ap": "G-AP",
    "g_app": "G-APP",
    "a_ppg": "A-PPG",
    "delta_plus": "Δ+",
    "delta_minus": "Δ-",
    "sa_ppg": "SA-PPG",
    "s_delta_plus": "S-Δ+",
    "s_delta_minus": "S-Δ-",
}
"""How tables and reports name each metric of :data:`METRIC_NAMES` (the paper's notation)."""
