"""Standard ``transformers.LogitsProcessor`` adapters for RailCap and LNE-blocking.

For users of plain transformers: pass them to ``model.generate(..., logits_processor=[...])``.
Both work on the batch as ``generate`` lays it out: prompts left-padded to one length
``prompt_length`` (so every row has generated ``input_ids.shape[1] - prompt_length`` tokens), and
with ``num_return_sequences = m`` row ``b`` belongs to prompt ``b // m``. Sampling and greedy
search only (beam search reorders rows).

Example
-------
>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> from zerogap.decoding.hf import RailCapLogitsProcessor
>>> from zerogap.decoding.settings import RailCapConfig
>>> _ = torch.manual_seed(0)
>>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
>>> prompt = torch.tensor([[1, 5, 7]])
>>> greedy = model.generate(prompt, do_sample=False, max_new_tokens=8, pad_token_id=0)[0, 3:]
>>> cap = RailCapLogitsProcessor([greedy.tolist()], RailCapConfig(n=2, mode="ban"),
...                              prompt_length=3)
>>> out = model.generate(prompt, do_sample=False, max_new_tokens=8, pad_token_id=0,
...                      logits_processor=[cap])[0, 3:]
>>> bool(out[:2].equal(greedy[:2])), bool(out[2] != greedy[2])  # banned after 2 tokens on it
(True, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import LogitsProcessor

from zerogap.config import require_int
from zerogap.decoding.blocking import block_argmax
from zerogap.decoding.railcap import (
    answer_slot_markers,
    ends_with_marker,
    pad_trajectories,
    railcap_apply,
)
from zerogap.decoding.settings import RailCapConfig


def _check_layout(owner: str, prompt_length: int, num_return_sequences: int) -> None:
    require_int(owner, "prompt_length", prompt_length, 0)
    require_int(owner, "num_return_sequences", num_return_sequences, 1)


def trajectories_from_sequences(
    sequences: Tensor, prompt_length: int, eos_token_id: int | list[int]
) -> list[list[int]]:
    """Greedy trajectories from ``generate``'s output: each row's new tokens up to its first EOS.

    Examples
    --------
    >>> trajectories_from_sequences(torch.tensor([[9, 9, 4, 5, 2, 2], [9, 9, 6, 2, 7, 2]]), 2, 2)
    [[4, 5], [6]]
    """
    eos = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)
    out = []
    for row in sequences[:, prompt_length:].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        out.append(row[:cut])
    return out


class RailCapLogitsProcessor(LogitsProcessor):
    """RailCap as a transformers logits processor.

    Parameters
    ----------
    trajectories : list of list of int
        Greedy trajectory (generated token ids only) of each prompt in the batch.
    config : RailCapConfig
        ``n`` and ``mode`` are used here; the temperature goes to ``generate`` as usual.
    prompt_length : int
        ``input_ids.shape[1]`` of the (left-padded) batch given to ``generate``.
    num_return_sequences : int
        As given to ``generate``.
    answer_markers : sequence of sequence of int
        The task's answer marker as token sequences, for ``config.protect == "answer"``
        (:func:`zerogap.decoding.specs.answer_marker_ids` makes them from a tokenizer).

    Attributes
    ----------
    on_trajectory, interventions : (B,) long tensors
        Per generated row, steps on the trajectory and steps whose logits were changed, summed
        over the last ``generate`` call (reset when a call starts at ``prompt_length``).
    """

    def __init__(
        self,
        trajectories: list[list[int]],
        config: RailCapConfig | None = None,
        *,
        prompt_length: int,
        num_return_sequences: int = 1,
        answer_markers: Sequence[Sequence[int]] = (),
    ) -> None:
        _check_layout("RailCapLogitsProcessor", prompt_length, num_return_sequences)
        self.config = config or RailCapConfig()
        self.prompt_length = prompt_length
        self.num_return_sequences = num_return_sequences
        self.trajectory, self.traj_len = pad_trajectories(trajectories)  # (Q, L), (Q,)
        self.markers = answer_slot_markers(self.config, answer_markers)  # (P, K) or None
        self.on_trajectory = torch.zeros(0, dtype=torch.long)
        self.interventions = torch.zeros(0, dtype=torch.long)
        self.past_marker = torch.zeros(0, dtype=torch.bool)  # (B,) rows past a marker
        self.checked = 0  # generated positions searched for a marker so far

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        rows, generated = input_ids.shape[0], input_ids.shape[1] - self.prompt_length
        if generated == 0:
            self.on_trajectory = torch.zeros(rows, dtype=torch.long, device=scores.device)
            self.interventions = torch.zeros(rows, dtype=torch.long, device=scores.device)
        protected = None
        if self.markers is not None:  # before any early return: every step is checked
            self.markers = self.markers.to(scores.device)
            protected = self._past_marker(input_ids[:, self.prompt_length:], self.markers)
        n = self.config.n
        if generated < n:
            return scores
        self.trajectory = self.trajectory.to(scores.device)
        self.traj_len = self.traj_len.to(scores.device)
        question = torch.arange(rows, device=scores.device) // self.num_return_sequences  # (B,)
        scores, on, hit = railcap_apply(
            scores, input_ids[:, -n:], self.trajectory, self.traj_len,
            mode=self.config.mode, rows=question, protected=protected,
        )
        self.on_trajectory += on
        self.interventions += hit
        return scores

    def _past_marker(self, generated: Tensor, markers: Tensor) -> Tensor:
        """(B,) bool: rows whose generated tokens hold an answer marker. Each end position is
        checked once (one per step in ``generate``; all of them on a first call that starts
        past the prompt), and the result is kept."""
        rows, length = generated.shape
        if length == 0 or self.past_marker.shape[0] != rows:
            self.past_marker = torch.zeros(rows, dtype=torch.bool, device=generated.device)
            self.checked = 0
        for end in range(self.checked + 1, length + 1):
            self.past_marker |= ends_with_marker(
                generated, torch.full((rows,), end, device=generated.device), markers)
        self.checked = length
        return self.past_marker


class LNEBlockingLogitsProcessor(LogitsProcessor):
    """LNE-blocking as a transformers logits processor.

    Parameters
    ----------
    counts : (Q,) long tensor or list of int
        Blocking count of each prompt (``zerogap.decoding.blocking.blocking_counts``).
    prompt_length, num_return_sequences : int
        As for :class:`RailCapLogitsProcessor`.
    """

    def __init__(
        self, counts: Tensor | list[int], *, prompt_length: int, num_return_sequences: int = 1
    ) -> None:
        _check_layout("LNEBlockingLogitsProcessor", prompt_length, num_return_sequences)
        self.counts = torch.as_tensor(counts, dtype=torch.long)  # (Q,)
        self.prompt_length = prompt_length
        self.num_return_sequences = num_return_sequences

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        rows, generated = input_ids.shape[0], input_ids.shape[1] - self.prompt_length
        self.counts = self.counts.to(scores.device)
        question = torch.arange(rows, device=scores.device) // self.num_return_sequences  # (B,)
        lengths = torch.full((rows,), generated, device=scores.device)  # (B,)
        return block_argmax(scores, lengths, self.counts.index_select(0, question))[0]
