"""Locating shortcut neurons (Zhu et al., ACL 2025; arXiv 2608.07341 §5 compares against it):
the offline pipeline, run once per architecture and benchmark; the ranked list is saved as JSON
and read by the shortcut strategy (:mod:`zerogap.decoding.shortcut`).

* comparative score ``S``: teacher-force the contaminated model's own greedy answers to leaked
  items through the contaminated and the uncontaminated model; ``S = sqrt(mean (a_un - a_con)^2)``
  over all completion tokens pooled across items (the code's variant);
* causal score ``C``: for each block of ``block_size`` contiguous neurons of a layer, patch the
  block from the uncontaminated model into the base and the contaminated model and measure
  greedy accuracy on a calibration subset:
  ``C = [Acc(base+patch) - Acc(base)] + [Acc(con) - Acc(con+patch)]``, given to every neuron
  of the block (a proposal: the calibration subset replaces all of GSM8K, its size a
  parameter);
* ranking by ``S + C``, top ``K``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from zerogap.decoding.shortcut import (
    NEURONS_FORMAT,
    Neuron,
    NeuronPatch,
    down_proj_hooks,
    mlp_width,
)
from zerogap.errors import UserError
from zerogap.io.files import atomic_write


def comparative_scores(
    contaminated: nn.Module,
    uncontaminated: nn.Module,
    items: Sequence[tuple[Sequence[int], Sequence[int]]],
) -> Tensor:
    """``S`` for every ranked neuron, ``(L-1, d_ff)`` float32.

    Parameters
    ----------
    contaminated, uncontaminated : Llama-style models with equal shapes
    items : sequence of (prompt token ids, completion token ids)
        The completions are the contaminated model's greedy answers to leaked items.
    """
    num_layers, d_ff = mlp_width(contaminated)
    if mlp_width(uncontaminated) != (num_layers, d_ff):
        raise UserError("contaminated and uncontaminated models differ in MLP shape")
    device = next(contaminated.parameters()).device
    total = torch.zeros(num_layers - 1, d_ff, dtype=torch.float64, device=device)
    count = 0
    for prompt, completion in items:
        if not completion:
            continue
        ids = torch.tensor([list(prompt) + list(completion)], device=device)  # (1, T)
        # Activations at positions whose next token is a completion token, i.e. the steps that
        # produced the completion.
        steps = slice(len(prompt) - 1, len(prompt) - 1 + len(completion))
        acts = []
        for model in (contaminated, uncontaminated):
            taken: dict[int, Tensor] = {}

            def keep(layer, a, taken=taken):
                taken[layer] = a[0]  # (T, d_ff)

            with down_proj_hooks(model, keep):
                model(input_ids=ids, use_cache=False)
            ranked = [taken[i][steps].double() for i in range(num_layers - 1)]
            acts.append(torch.stack(ranked))  # (L-1, C, d_ff)
        total += ((acts[1] - acts[0]) ** 2).sum(1)
        count += len(completion)
    if count == 0:
        raise ValueError("comparative scores need at least one non-empty completion")
    return (total / count).sqrt().float()


def causal_scores(
    base: nn.Module,
    contaminated: nn.Module,
    uncontaminated: nn.Module,
    accuracy: Callable[[nn.Module, Callable | None], float],
    *,
    block_size: int,
) -> Tensor:
    """``C`` for every ranked neuron, ``(L-1, d_ff)`` float32; constant within each block.

    Parameters
    ----------
    base, contaminated, uncontaminated : Llama-style models with equal shapes
    accuracy : callable
        ``accuracy(model, patch)`` -> greedy accuracy on the calibration subset, where ``patch``
        is None or a :class:`NeuronPatch` (the engine's patch hook).
    block_size : int
        Neurons per block; must divide ``d_ff``.
    """
    num_layers, d_ff = mlp_width(contaminated)
    if d_ff % block_size:
        raise UserError(f"block_size {block_size} does not divide the MLP width {d_ff}")
    acc_base = accuracy(base, None)
    acc_con = accuracy(contaminated, None)
    scores = torch.zeros(num_layers - 1, d_ff)
    for layer in range(num_layers - 1):
        for start in range(0, d_ff, block_size):
            block = [(layer, i) for i in range(start, start + block_size)]
            patch = NeuronPatch(uncontaminated, block)
            gain = accuracy(base, patch) - acc_base
            drop = acc_con - accuracy(contaminated, patch)
            scores[layer, start : start + block_size] = gain + drop
    return scores


def rank_neurons(scores: Tensor, k: int) -> list[Neuron]:
    """The ``k`` highest-scoring ``(layer, index)`` pairs, best first (ties: lower layer, index).

    Examples
    --------
    >>> rank_neurons(torch.tensor([[0.1, 0.9], [0.5, 0.9]]), 3)
    [(0, 1), (1, 1), (1, 0)]
    """
    flat = scores.flatten().double()
    order = sorted(range(flat.numel()), key=lambda j: (-float(flat[j]), j))[:k]
    width = scores.shape[1]
    return [(j // width, j % width) for j in order]


def save_neurons(path: str | Path, neurons: Sequence[Neuron], meta: dict) -> None:
    """Write a neuron list with its provenance (models, data, scores' settings) as JSON."""
    record = {"format": NEURONS_FORMAT, "neurons": [list(n) for n in neurons], "meta": meta}
    with atomic_write(path) as handle:
        handle.write(json.dumps(record, indent=1) + "\n")


def locate_neurons(
    base: nn.Module,
    contaminated: nn.Module,
    uncontaminated: nn.Module,
    tokenizer,
    task,
    leaked: Sequence,
    calibration: Sequence,
    *,
    block_size: int = 512,
    max_new_tokens: int = 256,
    progress: bool = False,
) -> tuple[list[Neuron], dict]:
    """Rank every neuron of layers ``0 .. L-2`` by ``S + C`` (Phase A of the method).

    Parameters
    ----------
    base, contaminated, uncontaminated : Llama-style models sharing ``tokenizer``
    task : zerogap task (``prompt``, ``grade``, ``stop``)
    leaked : sequence of Question
        Items the contaminated model saw (comparative score).
    calibration : sequence of Question
        The subset on which greedy accuracy gives the causal score.
    block_size : int
        Neurons per causal block; a model narrower than it is scored one layer per block.

    Returns
    -------
    ranking : list of (layer, index)
        All ranked neurons, best first (save it whole; ``top_k`` picks the head).
    meta : dict
        Accuracies and sizes, for the saved file's provenance.
    """
    from zerogap.engine import greedy

    _, d_ff = mlp_width(contaminated)
    block = min(block_size, d_ff)
    leak_prompts = [task.prompt(q) for q in leaked]
    answers = greedy(contaminated, tokenizer, leak_prompts, max_new_tokens=max_new_tokens,
                     stop=task.stop, progress=progress)
    items = [(tokenizer(p)["input_ids"], a.token_ids)
             for p, a in zip(leak_prompts, answers, strict=True)]
    comparative = comparative_scores(contaminated, uncontaminated, items)
    cal_prompts = [task.prompt(q) for q in calibration]
    names = {id(base): "base", id(contaminated): "contaminated"}
    accuracies: dict[str, float] = {}  # unpatched accuracies, also the meta's record

    def accuracy(model, patch):
        if patch is None and names[id(model)] in accuracies:
            return accuracies[names[id(model)]]
        out = greedy(model, tokenizer, cal_prompts, max_new_tokens=max_new_tokens,
                     stop=task.stop, patch=patch)
        grades = [task.grade(q, g.text).correct for q, g in zip(calibration, out, strict=True)]
        value = sum(grades) / len(grades)
        if patch is None:
            accuracies[names[id(model)]] = value
        return value

    causal = causal_scores(base, contaminated, uncontaminated, accuracy, block_size=block)
    ranking = rank_neurons(comparative + causal, comparative.numel())
    meta = {
        "leaked": len(leaked), "calibration": len(calibration), "block_size": block,
        "max_new_tokens": max_new_tokens, "accuracy": accuracies,
    }
    return ranking, meta
