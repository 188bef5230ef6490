"""The noise floor: the gap two independent sample batches of the *same* model read, simulated
from the empirical-Bayes posteriors (see :mod:`zerogap.uncertainty`).

Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zerogap.metrics import DEFAULT_BINS, strata
from zerogap.uncertainty.intervals import _CHUNK, _check_counts, _check_level, _per_question
from zerogap.uncertainty.solve_prior import fit_solve_prior
from zerogap.uncertainty.stratification import _stratified_means


@dataclass(frozen=True)
class NoiseFloor:
    """What two independent sample batches of the same model read (mean and upper quantile).

    ``samples`` is the second batch's m when it is one number for every question given
    explicitly; None when it is the run's own m or differs by question.
    """

    sa_ppg: float
    sa_ppg_upper: float
    a_ppg: float
    a_ppg_upper: float
    quantile: float
    n_sim: int
    samples: int | None
    prior: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def noise_floor(
    correct,
    samples,
    *,
    other_samples: int | np.ndarray | None = None,
    bins: int = DEFAULT_BINS,
    n_sim: int = 2000,
    quantile: float = 0.95,
    prior: str = "empirical",
    seed: int = 0,
) -> NoiseFloor:
    """The gap two independent sample batches of the *same* model would read.

    The observed run plays the first batch (it defines the strata, as in a measurement); each
    simulation draws a second batch of ``m'`` samples per question (``other_samples`` or the
    run's own m) from the question's posterior predictive and computes SA-PPG and A-PPG
    between the two; the result is the mean over simulations and the ``quantile`` upper point:
    what a second batch of the same model would read, given this one. The posterior comes
    from ``prior``:

    * ``"empirical"`` (default): the benchmark's own spread of solve probabilities
      (:func:`~zerogap.uncertainty.solve_prior.fit_solve_prior`). Its mean matches a measured
      second batch in expectation (simulated in tests/uncertainty/test_calibration.py across N
      and m).
    * ``"jeffreys"``: Beta(c + 1/2, m - c + 1/2) per question, which lets every question seen at
      0/m or m/m vary like a coin seen once and overstates the floor where many questions sit
      there (0.117 simulated against 0.039 measured in a demo with 40% of questions at 0 or 1).
    * ``"plugin"``: ``p = c / m``, no noise at all on questions seen at 0/m or m/m.

    Assumes samples independent given the question (temperature sampling with per-row
    randomness).

    Parameters
    ----------
    correct, samples : array-like of int, shape (n_questions,)
        Counts of the clean run.
    other_samples : int or array-like of int, shape (n_questions,), optional
        Samples per question of the run to be compared (default: the clean run's own ``m``);
        an array when that run's m differs by question (an allocated study's strategies).

    Examples
    --------
    >>> floor = noise_floor([25] * 200, [50] * 200, n_sim=200, prior="plugin", seed=0)
    >>> 0.04 < floor.a_ppg < 0.07   # E|X / 50 - 0.5| for X ~ Bin(50, 0.5) is about 0.056
    True
    """
    if prior not in ("empirical", "jeffreys", "plugin"):
        raise ValueError(f"prior must be 'empirical', 'jeffreys' or 'plugin', got {prior!r}")
    _check_level(quantile)
    if isinstance(n_sim, bool) or not isinstance(n_sim, int | np.integer) or n_sim < 1:
        raise ValueError(f"n_sim must be a positive integer, got {n_sim!r}")
    (c,), (m,) = _check_counts(correct, samples, "clean")
    m_other = m if other_samples is None else _per_question(other_samples, c.size, "other_samples")
    rng = np.random.default_rng(seed)
    posterior = fit_solve_prior(c, m) if prior == "empirical" else None
    r1 = c / m
    stratum = strata(r1, bins=bins)
    sa, aa = [], []
    for start in range(0, n_sim, _CHUNK):
        size = min(_CHUNK, n_sim - start)
        if posterior is not None:
            c2 = posterior.draw_second_batch(rng, size, m_other)
        else:
            p = (rng.beta(c + 0.5, m - c + 0.5, size=(size, c.size)) if prior == "jeffreys"
                 else np.broadcast_to(r1, (size, c.size)))
            c2 = rng.binomial(m_other, p)
        gap = np.abs(c2 / m_other - r1)  # (C, N)
        sa.append(_stratified_means(np.broadcast_to(stratum, gap.shape), gap, bins))
        aa.append(gap.mean(axis=1))
    sa_all, aa_all = np.concatenate(sa), np.concatenate(aa)
    return NoiseFloor(
        sa_ppg=float(sa_all.mean()),
        sa_ppg_upper=float(np.quantile(sa_all, quantile)),
        a_ppg=float(aa_all.mean()),
        a_ppg_upper=float(np.quantile(aa_all, quantile)),
        quantile=float(quantile),
        n_sim=int(n_sim),
        samples=(None if other_samples is None or np.unique(m_other).size > 1
                 else int(m_other[0])),
        prior=prior,
    )
