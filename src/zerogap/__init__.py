"""zerogap: restoration metrics and step-wise mitigation for contaminated benchmarks.

The metrics (`zerogap.metrics`, `zerogap.uncertainty`) need numpy only; everything that samples
from a model needs the ``hf`` extra (torch, transformers).
"""

__version__ = "0.1.0"
