"""The variance SA-PPG's strata add: the clean reference batch places each question in its
stratum, so a new batch moves questions between strata and changes the weights, beside each
term's own noise (see :mod:`zerogap.uncertainty.intervals`).

The intervals' analytic variance holds the weights at the observed strata. Where many
questions sit near a stratum's edge (clean solve probabilities just above 0, sparse upper
strata of one or two questions each), moving between strata adds variance the analytic sum
does not see; on a profile of the paper's figures it was a third of SA-PPG's variance.
:func:`strata_variances` estimates that part by simulation: new batches of every run at each
question's observed readout c/m, SA-PPG read with the strata each simulated reference batch
gives and with the observed weights held fixed, on the same draws; the part is the difference
of the two variances (0 where it is negative). The observed readouts, not the posterior means:
a question read 0/m stays in the lowest stratum, where the posterior mean (above 0) would move
it to the next one in some batches and overstate the part (measured on the paper's profile:
1.25x the real spread with the posterior means, 1.1x with the readouts).

Pure numpy. Shapes: ``N`` questions, ``K`` strategies, ``S`` simulated studies.
"""

from __future__ import annotations

import numpy as np

from zerogap.metrics import strata

SIMS = 200
"""Simulated studies per estimate: both variances read on the same draws, so their difference
is steadier than either."""


def strata_variances(clean_mean: np.ndarray, clean_samples: np.ndarray,
                     mitigated_mean: np.ndarray, mitigated_samples: np.ndarray,
                     weights: np.ndarray, bins: int, parts: dict, seed: int,
                     sims: int = SIMS) -> dict[str, np.ndarray]:
    """``{part: (K, K)}``: the strata's part of the variance of each strategy's stratified
    metric (diagonal) and of each pair's difference (off the diagonal), for each per-question
    term ``parts[part]`` (a function of Δ).

    ``clean_mean`` (N,) and ``mitigated_mean`` (K, N) are the solve probabilities simulated
    (the observed readouts), ``clean_samples`` (N,) and ``mitigated_samples`` (K, N) the m of each
    question; ``weights`` (N,) the observed SA-PPG weights.
    """
    rng = np.random.default_rng([seed, 67])
    y = rng.binomial(clean_samples, clean_mean, size=(sims, clean_mean.size)) / clean_samples
    stratum = strata(y.ravel(), bins=bins).reshape(y.shape)
    x = [rng.binomial(m, p, size=y.shape) / m
         for p, m in zip(mitigated_mean, mitigated_samples, strict=True)]
    out = {}
    for part, f in parts.items():
        terms = [f(xk - y) for xk in x]
        full = np.stack([_stratified_means(stratum, t, bins) for t in terms])  # (K, S)
        fixed = np.stack([t @ weights for t in terms])
        k = len(terms)
        extra = np.zeros((k, k))
        for a in range(k):
            for b in range(a, k):
                sign = 0.0 if a == b else 1.0
                moved = np.var(full[a] - sign * full[b], ddof=1)
                held = np.var(fixed[a] - sign * fixed[b], ddof=1)
                extra[a, b] = extra[b, a] = max(float(moved - held), 0.0)
        out[part] = extra
    return out


def _stratified_means(stratum: np.ndarray, values: np.ndarray, bins: int) -> np.ndarray:
    """Per-replicate SA-style mean: average within non-empty strata, then over them.

    stratum: (C, N) int strata per replicate; values: (C, N). Returns (C,).
    """
    chunk, n = stratum.shape
    flat = (np.arange(chunk)[:, None] * bins + stratum).ravel()  # (C*N,)
    sizes = np.bincount(flat, minlength=chunk * bins).reshape(chunk, bins)
    sums = np.bincount(flat, weights=values.ravel(), minlength=chunk * bins).reshape(chunk, bins)
    nonempty = sizes > 0
    means = np.divide(sums, sizes, out=np.zeros_like(sums), where=nonempty)
    return means.sum(axis=1) / nonempty.sum(axis=1)
