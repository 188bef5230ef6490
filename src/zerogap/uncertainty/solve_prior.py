"""What a model's true solve probabilities look like across questions, learned from its counts.

Every uncertainty statement about SA-PPG needs, for each question, a plausible true solve
probability ``p`` behind the observed ``c`` correct of ``m`` samples. The plug-in ``c / m`` says a
question seen at 0/m or m/m can never vary, and a fixed prior (Jeffreys, Beta(1/2, 1/2)) says
every such question varies as much as a coin seen once, which on a benchmark where a third of
the questions are never solved made the simulated noise floor three times the one a second batch
measures (issue 19). The honest middle is to let the benchmark say how its questions are spread:
an empirical-Bayes prior, the nonparametric maximum-likelihood estimate of the mixing
distribution of ``p`` over questions (Kiefer and Wolfowitz 1956; computed on a grid by EM, as
Jiang and Zhang 2009 and Koenker and Mizera 2014 do), and each question's posterior under it.
A benchmark whose questions really sit at 0 puts prior mass at 0 and keeps them there; one whose
0/m questions are hard-but-solvable puts mass just above 0 and lets them move.

Pure numpy. Shapes: ``N`` questions, ``G`` grid points (101 by default, steps of 0.01).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRID_POINTS = 101
_EM_STEPS = 500
_EM_TOLERANCE = 1e-10


@dataclass(frozen=True)
class SolvePrior:
    """A fitted prior over solve probabilities and each question's posterior under it.

    ``grid`` (G,) are the support points and ``weights`` (G,) the prior mass on each. Questions
    with the same counts share a posterior: ``counts`` (P, 2) are the distinct ``(c, m)`` pairs,
    ``group_posterior`` (P, G) their posteriors and ``group`` (N,) each question's pair.
    """

    grid: np.ndarray
    weights: np.ndarray
    counts: np.ndarray
    group_posterior: np.ndarray
    group: np.ndarray

    @property
    def posterior(self) -> np.ndarray:
        """(N, G) each question's posterior mass on each grid point."""
        return self.group_posterior[self.group]

    @property
    def posterior_mean(self) -> np.ndarray:
        """(N,) each question's posterior mean solve probability."""
        return (self.group_posterior @ self.grid)[self.group]

    def draw_second_batch(self, rng: np.random.Generator, size: int,
                          other_samples: int | np.ndarray | None = None) -> np.ndarray:
        """(size, N) counts of a new batch of every question, ``size`` times.

        Each question's count of ``other_samples`` new samples (one number for every question,
        an (N,) array of them, or by default its own m) is drawn from its posterior predictive:
        a solve probability from its posterior, then a binomial count, in one step from the
        exact predictive distribution (one table per group of questions that share counts and
        new m), by one uniform and one sorted search per draw.
        """
        own = self.counts[self.group, 1]
        new_m = own if other_samples is None else np.broadcast_to(other_samples, own.shape)
        keys, table_of = np.unique(np.stack([self.group, new_m], axis=1), axis=0,
                                   return_inverse=True)
        table_of = table_of.ravel()
        tables = []
        for group, m2 in keys:
            pmf = self.group_posterior[group] @ binomial_likelihood(
                np.arange(m2 + 1), np.full(m2 + 1, m2), self.grid).T  # (m2 + 1,)
            tables.append(np.cumsum(pmf) / pmf.sum())
        sizes = np.array([t.size for t in tables])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        # Table k's CDF shifted to [k, k + 1]: one sorted array serves every draw.
        flat = np.concatenate([t + k for k, t in enumerate(tables)])
        u = rng.random((size, self.group.size)) + table_of  # (size, N)
        index = np.searchsorted(flat, u, side="right") - starts[table_of]
        return np.minimum(index, sizes[table_of] - 1)


def binomial_likelihood(correct: np.ndarray, samples: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """(N, G) probability of each question's count under each grid solve probability."""
    c = np.asarray(correct, np.int64)[:, None]
    m = np.asarray(samples, np.int64)[:, None]
    log_factorial = np.array([math.lgamma(k + 1) for k in range(int(m.max()) + 1)])
    log_choose = log_factorial[m] - log_factorial[c] - log_factorial[m - c]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_p = np.where(c > 0, c * np.log(grid), 0.0)
        log_q = np.where(m - c > 0, (m - c) * np.log1p(-grid), 0.0)
    return np.exp(log_choose + log_p + log_q)


def fit_solve_prior(correct, samples, *, grid_points: int = GRID_POINTS) -> SolvePrior:
    """The nonparametric maximum-likelihood prior of solve probabilities, and the posteriors.

    Parameters
    ----------
    correct, samples : array-like of int, shape (n_questions,)
        One run's counts; ``samples`` may differ by question.
    grid_points : int, default=101
        Support points, evenly spaced on [0, 1] (0 and 1 included, so questions that truly
        never or always succeed can be represented exactly).

    Returns
    -------
    SolvePrior

    Examples
    --------
    >>> prior = fit_solve_prior([0] * 30 + [5] * 10, [10] * 40)
    >>> mean = prior.posterior_mean
    >>> bool(mean[0] < 0.05 and abs(mean[-1] - 0.5) < 0.1)
    True
    """
    if grid_points < 2:
        raise ValueError(f"grid_points must be at least 2, got {grid_points!r}")
    grid = np.linspace(0.0, 1.0, grid_points)
    # Questions with the same counts share a likelihood row and a posterior: EM runs on the
    # distinct (c, m) pairs weighted by how many questions have each (at most m + 1 rows).
    pairs, inverse, multiplicity = np.unique(
        np.stack([np.asarray(correct, np.int64), np.asarray(samples, np.int64)], axis=1),
        axis=0, return_inverse=True, return_counts=True)
    likelihood = binomial_likelihood(pairs[:, 0], pairs[:, 1], grid)  # (P, G)
    share = multiplicity / multiplicity.sum()  # (P,)
    weights = np.full(grid_points, 1.0 / grid_points)
    for _ in range(_EM_STEPS):
        joint = likelihood * weights  # (P, G)
        updated = share @ (joint / joint.sum(axis=1, keepdims=True))
        converged = np.abs(updated - weights).max() < _EM_TOLERANCE
        weights = updated
        if converged:
            break
    joint = likelihood * weights
    return SolvePrior(grid, weights, pairs, joint / joint.sum(axis=1, keepdims=True),
                      inverse.ravel())
