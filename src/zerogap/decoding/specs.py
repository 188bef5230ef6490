"""The torch-free half of each decoding intervention: its settings and its backend-neutral spec.

A strategy's settings are validated (and listed by ``zerogap strategy``) without torch; what a
strategy prepares for one engine call is plain data here (greedy trajectories, blocking counts,
a neuron list), which each backend turns into its own form: the pure-torch hooks of
:mod:`zerogap.decoding.railcap`, :mod:`~zerogap.decoding.blocking` and
:mod:`~zerogap.decoding.shortcut` (imported when a hook is built), or the per-request arguments
of the vLLM logits processors (:mod:`zerogap.decoding.vllm`).

>>> edit = RailCapEdit(((5, 6, 7), (8,)), RailCapConfig(n=2))
>>> edit.request_args(1)
{'railcap': {'trajectory': [8], 'n': 2, 'mode': 'cap'}}
>>> BlockingEdit((0, 3)).request_args(1)
{'lne_blocking': {'count': 3}}
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from zerogap.config import JsonConfig
from zerogap.engine.base import ActivationPatch, LogitsEdit

Mode = Literal["cap", "ban"]
MODES = typing.get_args(Mode)

# The SamplingParams.extra_args keys the vLLM logits processors read.
RAILCAP_KEY = "railcap"
BLOCKING_KEY = "lne_blocking"

Neuron = tuple[int, int]  # (layer, index)


@dataclass(frozen=True)
class RailCapConfig(JsonConfig):
    """RailCap's parameters (paper defaults: n = 4, cap; tau = 0.7 is the run's SamplingSpec)."""

    n: int = field(default=4, metadata={"help": "n-gram length that signals a fall-back",
                                        "min": 1})
    mode: Mode = field(default="cap", metadata={"help": "'cap' to the runner-up, or 'ban' (-inf)"})


@dataclass(frozen=True)
class LNEBlockingConfig(JsonConfig):
    """LNE-blocking's parameters."""

    t_task: int = field(default=7, metadata={"help": "task threshold: 7 for math, 4 for code",
                                             "min": 0})
    beta: float = field(default=2.0, metadata={"help": "LNE normaliser (LNE typically in [0, 2])",
                                               "gt": 0})


@dataclass(frozen=True)
class ShortcutConfig(JsonConfig):
    """Shortcut-neuron patching's parameters while sampling (locating has its own, recorded in
    the neuron list's ``meta``)."""

    neurons: str = field(default="", metadata={"help": "neuron list JSON (zerogap neurons)"})
    base: str = field(default="", metadata={"help": "model spec of the patch source (base)"})
    top_k: int = field(default=0, metadata={"help": "neurons patched; 0 = 4000 scaled to size",
                                            "min": 0})


@dataclass(frozen=True)
class RailCapEdit(LogitsEdit):
    """RailCap (arXiv 2608.07341, §4) against each question's greedy trajectory.

    ``trajectories[q]``: the generated token ids of question ``q``'s greedy decode, in the
    order of the engine call's questions.
    """

    trajectories: tuple[tuple[int, ...], ...]
    config: RailCapConfig

    def torch_hook(self, *, samples_per_question: int, device: Any) -> Any:
        from zerogap.decoding.railcap import RailCapHook

        return RailCapHook([list(t) for t in self.trajectories], self.config,
                           samples_per_question=samples_per_question, device=device)

    def request_args(self, question: int) -> dict[str, Any]:
        return {RAILCAP_KEY: {"trajectory": list(self.trajectories[question]),
                              "n": self.config.n, "mode": self.config.mode}}


@dataclass(frozen=True)
class BlockingEdit(LogitsEdit):
    """LNE-blocking: ban the argmax at the first ``counts[q]`` generated positions of question
    ``q`` (``reference/baselines.md`` §2)."""

    counts: tuple[int, ...]

    def torch_hook(self, *, samples_per_question: int, device: Any) -> Any:
        import torch

        from zerogap.decoding.blocking import LNEBlockingHook

        return LNEBlockingHook(torch.tensor(self.counts, dtype=torch.long), device=device)

    def request_args(self, question: int) -> dict[str, Any]:
        return {BLOCKING_KEY: {"count": self.counts[question]}}


@dataclass(frozen=True)
class NeuronPatchSpec(ActivationPatch):
    """Shortcut-neuron patching (``reference/baselines.md`` §3): ``neurons`` of the evaluated
    model overwritten with those of ``source`` (a loaded model of the same shapes) at every
    forward pass. Only an in-process backend can run it."""

    source: Any
    neurons: tuple[Neuron, ...]

    def torch_patch(self) -> Any:
        from zerogap.decoding.shortcut import NeuronPatch

        return NeuronPatch(self.source, self.neurons)
