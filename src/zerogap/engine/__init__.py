"""The sampling engine: batched, shared-prefix, batch-independent sampling and greedy decoding.

:mod:`zerogap.engine.base` is the backend contract (``SamplingSpec``, ``Capabilities``,
``Generation``, the intervention specs, ``Backend`` and the backend registry) and imports no
torch; ``sample``, ``greedy`` and ``HFBackend`` run a transformers model
(:mod:`zerogap.engine.hf`) and are loaded, with torch, on first use.
"""

from importlib import import_module
from typing import Any

from zerogap.engine.base import Backend, Capabilities, Generation, SamplingSpec

_LAZY = {"HFBackend": "hf", "greedy": "hf", "sample": "hf", "noise": "noise",
         "Intervention": "hooks", "Patch": "hooks"}

__all__ = ["Backend", "Capabilities", "Generation", "SamplingSpec", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'zerogap.engine' has no attribute {name!r}")
    module = import_module(f"zerogap.engine.{_LAZY[name]}")
    return module if name == _LAZY[name] else getattr(module, name)
