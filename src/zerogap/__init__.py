"""zerogap: restoration metrics and step-wise mitigation for contaminated benchmarks.

The metrics (`zerogap.metrics`, `zerogap.uncertainty`) need numpy only; everything that samples
from a model needs the ``hf`` extra (torch, transformers). `zerogap.api` is ``zerogap score`` in
Python: ``load``, ``align`` and ``score``.
"""

__version__ = "0.1.0"
