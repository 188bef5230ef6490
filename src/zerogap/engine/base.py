"""The backend contract: what any sampling engine (HF today, vLLM next) offers the runs.

A backend decodes prompts under a :class:`SamplingSpec` (the one owner of m, temperature,
top-k/top-p, seed, token limit and stop strings) with backend-neutral intervention specs
built by the strategies, and says through :class:`Capabilities` which kinds of intervention it
can run, so that a strategy it cannot run is refused before any model loads. Torch-free.

Protocol of the evaluation (arXiv 2608.07341, §5.1): m = 50 samples per question at T = 0.7.

>>> SamplingSpec(m=8, temperature=0.7, max_new_tokens=48).to_dict()["top_p"] is None
True
>>> SamplingSpec(m=0)
Traceback (most recent call last):
...
zerogap.errors.UserError: SamplingSpec.m must be an integer >= 1 and <= 65536, got 0
>>> SamplingSpec(temperature=float("inf"))
Traceback (most recent call last):
...
zerogap.errors.UserError: SamplingSpec.temperature must be a number >= 0.01 and <= 10.0, got inf
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from zerogap.config import JsonConfig

# The temperatures a run accepts. Below 0.01 a logit gap of 0.1 already means odds of e^10, so
# sampling is practically greedy decoding (``zerogap greedy`` does that), and near float32's
# smallest numbers logits / T overflow to inf and every draw is garbage; above 10 the
# next-token distribution is close to uniform, so responses are random text. Neither end says
# anything about a model; the paper samples at 0.7 (arXiv 2608.07341, §5.1).
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 10.0
# Above this, a run is legal but almost surely a typo: the command line warns.
WARN_TEMPERATURE = 2.0


@dataclass(frozen=True)
class SamplingSpec(JsonConfig):
    """What a run draws; every field is part of the run's identity in its store."""

    # Upper bounds refuse sizes no run can hold before anything is allocated or recorded: m up
    # to 2^16 (vLLM's per-question seed range, engine/vllm.py), responses up to 2^20 tokens
    # (beyond any model's context; the model's own context is checked once it is loaded).
    m: int = field(default=50, metadata={"help": "samples per question", "min": 1,
                                         "max": 1 << 16})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature tau",
                                                      "min": MIN_TEMPERATURE,
                                                      "max": MAX_TEMPERATURE})
    max_new_tokens: int = field(default=256, metadata={"help": "token limit per response",
                                                       "min": 1, "max": 1 << 20})
    seed: int = field(default=0, metadata={"help": "seed of every sample's noise", "min": 0})
    top_k: int | None = field(default=None, metadata={"help": "keep the k most likely tokens",
                                                      "min": 1})
    top_p: float | None = field(default=None, metadata={"help": "nucleus probability mass",
                                                        "gt": 0, "max": 1})
    stop: tuple[str, ...] = field(default=(), metadata={"help": "strings that end a response"})


@dataclass(frozen=True)
class Capabilities:
    """Kinds of intervention a backend can run.

    ``logits``: per-step logits edits (RailCap, LNE-blocking); ``patching``: activation patching
    from a second model (shortcut neurons); ``entropies``: full-vocabulary entropies of greedy
    decodes (LNE-blocking's input).
    """

    logits: bool
    patching: bool
    entropies: bool

    def missing(self, needed: Sequence[str]) -> list[str]:
        """The capabilities in ``needed`` this backend lacks."""
        return [name for name in needed if not getattr(self, name)]


class Backend(Protocol):
    """A sampling engine. ``name`` and ``noise`` are recorded in every run store: a run is
    resumed only by the backend (and noise scheme) that started it."""

    name: str
    noise: str
    capabilities: Capabilities

    def sample(self, prompts: Sequence[str], spec: SamplingSpec, *, question_ids: Sequence[str],
               intervention: Any = None, patch: Any = None, progress: bool = False,
               on_question: Callable[[int, list], None] | None = None) -> list[list]:
        """``spec.m`` generations per prompt, in prompt order."""
        ...

    def greedy(self, prompts: Sequence[str], spec: SamplingSpec, *, entropies: bool = False,
               patch: Any = None, progress: bool = False,
               on_question: Callable[[int, Any], None] | None = None) -> list:
        """One greedy generation per prompt (``spec.max_new_tokens``, ``spec.stop``)."""
        ...
