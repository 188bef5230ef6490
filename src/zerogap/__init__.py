"""zerogap: restoration metrics and step-wise mitigation for contaminated benchmarks.

The metrics (`zerogap.metrics`, `zerogap.uncertainty`) need numpy only; everything that samples
from a model needs the ``hf`` extra (torch, transformers). ``zerogap.load``, ``zerogap.align``
and ``zerogap.score`` are ``zerogap score`` in Python (:mod:`zerogap.api`), imported on first
use so that ``import zerogap`` stays light.
"""

from typing import Any

__version__ = "0.1.0"

_API = ("load", "align", "score")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from zerogap import api

        return getattr(api, name)
    raise AttributeError(f"module 'zerogap' has no attribute {name!r}")
