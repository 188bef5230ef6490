"""Student's t distribution: its CDF and quantiles, for the paired interval under the weak null.

zerogap's core is numpy-only, so the t reference of :func:`zerogap.uncertainty.compare`'s
``null="mean"`` is computed here rather than taken from scipy. With ``x = sqrt(df) tan θ`` the
density becomes proportional to ``cos(θ) ** (df - 1)`` on (-π/2, π/2), a smooth integrand whose
normaliser is ``sqrt(π) Γ(df/2) / Γ((df+1)/2)`` in closed form, so the CDF is one Simpson sum
and a quantile Newton's method on it (both accurate to about 1e-10 for df >= 1).

Pure math and numpy.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

_NODES = 801  # Simpson's rule needs an odd count; 801 keeps the error near 1e-12 at df = 1.


def _check_df(df: float) -> None:
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df!r}")


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for T ~ Student's t with ``df`` degrees of freedom.

    Examples
    --------
    >>> round(t_cdf(0.0, 5), 12), round(t_cdf(1.0, 1), 12)
    (0.5, 0.75)
    """
    _check_df(df)
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    upper = math.atan(abs(x) / math.sqrt(df))
    theta = np.linspace(0.0, upper, _NODES)
    density = np.cos(theta) ** (df - 1)
    step = upper / (_NODES - 1)
    area = step / 3 * (density[0] + density[-1] + 4 * density[1:-1:2].sum()
                       + 2 * density[2:-1:2].sum())
    log_norm = 0.5 * math.log(math.pi) + math.lgamma(df / 2) - math.lgamma((df + 1) / 2)
    half = float(area) / math.exp(log_norm)
    return 0.5 + half if x >= 0 else 0.5 - half


def t_pdf(x: float, df: float) -> float:
    """The density of Student's t with ``df`` degrees of freedom at ``x``.

    Examples
    --------
    >>> round(t_pdf(0.0, 1), 6)  # the Cauchy density at 0: 1 / pi
    0.31831
    """
    _check_df(df)
    log_norm = 0.5 * math.log(df * math.pi) + math.lgamma(df / 2) - math.lgamma((df + 1) / 2)
    return math.exp(-log_norm - (df + 1) / 2 * math.log1p(x * x / df))


def t_quantile(prob: float, df: float) -> float:
    """The ``prob`` quantile of Student's t with ``df`` degrees of freedom, by Newton's method.

    For ``prob > 1/2`` the start is the normal quantile, at or below the t quantile (t's tails
    are heavier), and the CDF is concave above 0, so every Newton step lands between the last
    iterate and the root: the iterates rise to it without overshooting, a few t_cdf calls where
    a bisection takes eighty.

    Examples
    --------
    >>> round(t_quantile(0.975, 7), 4), round(t_quantile(0.75, 1), 6)
    (2.3646, 1.0)
    """
    _check_df(df)
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob must lie strictly between 0 and 1, got {prob!r}")
    if prob < 0.5:
        return -t_quantile(1.0 - prob, df)
    x = NormalDist().inv_cdf(prob)
    for _ in range(200):
        step = (prob - t_cdf(x, df)) / t_pdf(x, df)
        x += max(step, 0.0)  # rounding near the root must not step back past it
        if step <= 1e-13 * max(1.0, x):
            break
    return x
