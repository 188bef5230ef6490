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
>>> BlockingEdit((0, 3)).request_args(1), BlockingEdit((0, 3)).question_stats(1)
({'lne_blocking': {'count': 3}}, {'blocking_count': 3})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zerogap.decoding.settings import Neuron, RailCapConfig
from zerogap.engine.base import ActivationPatch, LogitsEdit

# The SamplingParams.extra_args keys the vLLM logits processors read.
RAILCAP_KEY = "railcap"
BLOCKING_KEY = "lne_blocking"
# The per-sample statistic holding a blocked sample's count (zerogap.analysis.baselines reads it).
BLOCKING_STAT = "blocking_count"


@dataclass(frozen=True)
class RailCapEdit(LogitsEdit):
    """RailCap (arXiv 2608.07341, §4) against each question's greedy trajectory.

    ``trajectories[q]``: the generated token ids of question ``q``'s greedy decode, in the
    order of the engine call's questions.
    """

    trajectories: tuple[tuple[int, ...], ...]
    config: RailCapConfig
    answer_markers: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.config.protect == "answer" and not self.answer_markers:
            raise ValueError("RailCap with protect='answer' needs the task's answer marker "
                             "tokens")

    def torch_hook(self, *, samples_per_question: int, device: Any) -> Any:
        from zerogap.decoding.railcap import RailCapHook

        return RailCapHook([list(t) for t in self.trajectories], self.config,
                           samples_per_question=samples_per_question, device=device,
                           answer_markers=self.answer_markers)

    def request_args(self, question: int) -> dict[str, Any]:
        args: dict[str, Any] = {"trajectory": list(self.trajectories[question]),
                                "n": self.config.n, "mode": self.config.mode}
        if self.config.protect == "answer":
            args["answer_markers"] = [list(m) for m in self.answer_markers]
        return {RAILCAP_KEY: args}


def answer_marker_ids(tokenizer: Any, forms: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """The token sequences a tokenizer writes each of ``forms`` as, on its own and after a
    space (where most markers sit, and where a BPE tokenizer's first token differs), without
    repeats: what RailCap's ``protect="answer"`` looks for in the generated tokens.

    >>> class Chars:  # one token per character
    ...     def __call__(self, text, add_special_tokens):
    ...         return {"input_ids": [ord(c) for c in text]}
    >>> answer_marker_ids(Chars(), ["is"])
    ((105, 115), (32, 105, 115))
    """
    out: dict[tuple[int, ...], None] = {}
    for form in forms:
        for text in (form, " " + form):
            ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
            if ids:
                out[ids] = None
    return tuple(out)


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

    def question_stats(self, question: int) -> dict[str, Any]:
        return {BLOCKING_STAT: self.counts[question]}


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
