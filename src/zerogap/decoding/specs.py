"""The backend-neutral specs of the decoding interventions (torch-free; settings in
:mod:`zerogap.decoding.settings`).

What a strategy prepares for one engine call is plain data here (greedy trajectories, blocking
counts, a neuron list), which each backend turns into its own form: the pure-torch hooks of
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

from dataclasses import dataclass
from typing import Any

from zerogap.decoding.settings import Neuron, RailCapConfig
from zerogap.engine.base import ActivationPatch, LogitsEdit

# The SamplingParams.extra_args keys the vLLM logits processors read.
RAILCAP_KEY = "railcap"
BLOCKING_KEY = "lne_blocking"



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
    ``q`` (``docs/baselines.md`` §2)."""

    counts: tuple[int, ...]

    def torch_hook(self, *, samples_per_question: int, device: Any) -> Any:
        import torch

        from zerogap.decoding.blocking import LNEBlockingHook

        return LNEBlockingHook(torch.tensor(self.counts, dtype=torch.long), device=device)

    def request_args(self, question: int) -> dict[str, Any]:
        return {BLOCKING_KEY: {"count": self.counts[question]}}


@dataclass(frozen=True)
class NeuronPatchSpec(ActivationPatch):
    """Shortcut-neuron patching (``docs/baselines.md`` §3): ``neurons`` of the evaluated
    model overwritten with those of ``source`` (a loaded model of the same shapes) at every
    forward pass. Only an in-process backend can run it."""

    source: Any
    neurons: tuple[Neuron, ...]

    def torch_patch(self) -> Any:
        from zerogap.decoding.shortcut import NeuronPatch

        return NeuronPatch(self.source, self.neurons)
