"""The sampling engine: batched, shared-prefix, batch-independent sampling and greedy decoding.

``sample`` and ``greedy`` take a transformers model and tokenizer (see :mod:`zerogap.models`);
strategies plug in through :mod:`zerogap.engine.hooks`.
"""

from zerogap.engine.base import Backend, Capabilities, SamplingSpec
from zerogap.engine.hf import Generation, HFBackend, greedy, sample
from zerogap.engine.hooks import Intervention, Patch

__all__ = ["Backend", "Capabilities", "Generation", "HFBackend", "Intervention", "Patch",
           "SamplingSpec", "greedy", "sample"]
