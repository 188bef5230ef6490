"""How far an allocation moves what SA-PPG measures (see docs/uncertainty.md, "Allocated
studies").

SA-PPG's expectation over new samples depends on m: ``|Δ|`` carries a sampling inflation that
shrinks as m grows, and the clean reference's m sets which strata a question can reach. An
allocated study samples each question at its own m, so each strategy's expectation moves from
the one a uniform study at m would target. :func:`allocation_shift` estimates that move by
simulation, as :func:`~zerogap.uncertainty.noise_floor` simulates the floor: true solve
probabilities drawn from each run's empirical-Bayes posteriors, then new counts at the plan
and at uniform m from the same draws.

Pure numpy. Shapes: ``N`` questions, ``K`` strategies.
"""

from __future__ import annotations

import numpy as np

from zerogap.metrics import strata
from zerogap.uncertainty.intervals import _check_counts, _per_question
from zerogap.uncertainty.solve_prior import SolvePrior, fit_solve_prior
from zerogap.uncertainty.stratification import _stratified_means

_CHUNK = 25


def allocation_shift(clean_correct, clean_samples, mitigated_correct, mitigated_samples,
                     samples, reference, m: int, *, bins: int, n_sim: int = 200,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(K,) each strategy's expected SA-PPG at the plan less at uniform m, and (K,) the
    simulation's standard error of it.

    Parameters
    ----------
    clean_correct, clean_samples : array-like of int, shape (N,)
        The clean reference batch as scored.
    mitigated_correct, mitigated_samples : array-like of int, shape (K, N)
    samples, reference : array-like of int, shape (N,) or one number
        The plan: each strategy's m and the reference batch's m per question.
    m : int
        The uniform study's m (strategies and reference).
    bins : int
    n_sim : int, default=200
        Simulated studies; both designs are read on the same draws of the solve probabilities.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p = rng.beta(0.5, 1.5, 200)
    >>> few = np.where(p < 0.05, 2, 20)
    >>> shift, se = allocation_shift(rng.binomial(20, p), [20] * 200, [rng.binomial(20, p)],
    ...                              [[20] * 200], few, 20, 20, bins=5)
    >>> bool(shift[0] > 2 * se[0])  # fewer samples where nothing is solved: more inflation
    True
    """
    (c,), (mc,) = _check_counts(clean_correct, clean_samples, "clean")
    mit_c, mit_m = _check_counts(mitigated_correct, mitigated_samples, "mitigated")
    n = c.size
    plan = _per_question(samples, n, "samples")
    plan_ref = _per_question(reference, n, "reference")
    uniform = _per_question(m, n, "m")
    rng = np.random.default_rng([seed, 61])
    clean_prior = fit_solve_prior(c, mc)
    priors = [fit_solve_prior(mit_c[k], mit_m[k]) for k in range(mit_c.shape[0])]
    moved = []
    for start in range(0, n_sim, _CHUNK):
        size = min(_CHUNK, n_sim - start)
        p_clean = _draw(clean_prior, rng, size)
        designs = []
        for ref_m, strat_m in ((plan_ref, plan), (uniform, uniform)):
            r = rng.binomial(ref_m, p_clean) / ref_m  # (S, N)
            stratum = strata(r.ravel(), bins=bins).reshape(r.shape)
            designs.append((r, stratum, strat_m))
        rows = []
        for prior in priors:
            p = _draw(prior, rng, size)
            reads = [_stratified_means(stratum, np.abs(rng.binomial(strat_m, p) / strat_m - r),
                                       bins) for r, stratum, strat_m in designs]
            rows.append(reads[0] - reads[1])
        moved.append(np.stack(rows, axis=1))  # (S, K)
    out = np.concatenate(moved)
    return out.mean(axis=0), out.std(axis=0, ddof=1) / np.sqrt(out.shape[0])


def _draw(prior: SolvePrior, rng: np.random.Generator, size: int) -> np.ndarray:
    """(size, N) solve probabilities, each question's from its posterior."""
    cdf = np.cumsum(prior.posterior, axis=1)  # (N, G)
    u = rng.random((size, cdf.shape[0], 1))
    index = (cdf[None] < u * cdf[None, :, -1:]).sum(axis=2)
    return prior.grid[np.minimum(index, prior.grid.size - 1)]
