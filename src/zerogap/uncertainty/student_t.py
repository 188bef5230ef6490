"""Student's t distribution: its CDF and quantiles, for the paired interval under the weak null.

zerogap's core is numpy-only, so the t reference of :func:`zerogap.uncertainty.compare`'s
``null="mean"`` is computed here rather than taken from scipy. With ``x = sqrt(df) tan θ`` the
density becomes proportional to ``cos(θ) ** (df - 1)`` on (-π/2, π/2), a smooth integrand whose
normaliser is ``sqrt(π) Γ(df/2) / Γ((df+1)/2)`` in closed form, so the CDF is one Simpson sum
and a quantile a bisection over it (both accurate to about 1e-10 for df >= 1).

Pure math and numpy.
"""

from __future__ import annotations

import math

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


def t_quantile(prob: float, df: float) -> float:
    """The ``prob`` quantile of Student's t with ``df`` degrees of freedom, by bisection.

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
    low, high = 0.0, 1.0
    while t_cdf(high, df) < prob:
        high *= 2
    for _ in range(80):
        mid = (low + high) / 2
        if t_cdf(mid, df) < prob:
            low = mid
        else:
            high = mid
    return (low + high) / 2
