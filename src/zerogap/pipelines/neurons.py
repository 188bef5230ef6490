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

The causal score costs two greedy passes over the calibration subset per block (about 1,300
passes for a 7B model with 512-neuron blocks), so :func:`locate_neurons` reports progress
after every question of every greedy pass (a callback; the command line draws it) and keeps
every question's result in a :class:`Journal` as it is
computed: a rerun after an interruption decodes only what is missing. Where even that is too
slow, ``candidates`` scores causally only the blocks with the highest mean comparative score
(the others keep ``C = 0``, so they rank by ``S`` alone): a proposal, since the authors score
every block.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zerogap.decoding.shortcut import (
    Neuron,
    NeuronPatch,
    down_proj_hooks,
    mlp_width,
)
from zerogap.engine.threads import governed
from zerogap.errors import DataError, UserError
from zerogap.io.files import refused_writes
from zerogap.io.jsonlines import read_jsonl
from zerogap.progress import Progress, ProgressCallback

JOURNAL_FORMAT = "zerogap-neurons-journal"
# Most token positions (padding included) of one teacher-forced forward call of the
# comparative score: its activations are (positions, d_ff) per layer.
_FORCED_TOKENS = 4096


@torch.no_grad()
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
    scored = [(list(p), list(c)) for p, c in items if c]
    with governed("score", device=device) as threads:  # torch's threads follow the free cores
        for chunk in _token_chunks(scored, _FORCED_TOKENS):
            width = max(len(p) + len(c) for p, c in chunk)
            # Right-padded: under causal attention no real position sees the pads after it.
            ids = torch.tensor([p + c + [0] * (width - len(p) - len(c)) for p, c in chunk],
                               device=device)  # (B, T)
            # Positions whose next token is a completion token, i.e. the steps that produced the
            # completion, row by row.
            steps = torch.zeros(ids.shape, dtype=torch.bool, device=device)
            for row, (p, c) in enumerate(chunk):
                steps[row, len(p) - 1 : len(p) - 1 + len(c)] = True
            acts = []
            for model in (contaminated, uncontaminated):
                taken: dict[int, Tensor] = {}

                def keep(layer, a, taken=taken, steps=steps):
                    if layer < num_layers - 1:
                        taken[layer] = a[steps].double()  # (C, d_ff), the chunk's steps in order

                with down_proj_hooks(model, keep):
                    model(input_ids=ids, use_cache=False)
                # (L-1, C, d_ff)
                acts.append(torch.stack([taken[i] for i in range(num_layers - 1)]))
            total += ((acts[1] - acts[0]) ** 2).sum(1)
            count += int(steps.sum())
            threads.step(len(chunk) * width)
    if count == 0:
        raise ValueError("comparative scores need at least one non-empty completion")
    return (total / count).sqrt().float()


def _token_chunks(items: list[tuple[list[int], list[int]]], tokens: int) -> list[list]:
    """``items`` in order, cut into runs whose padded size (rows x longest) is at most
    ``tokens`` (a longer item alone)."""
    chunks: list[list] = []
    width = 0
    for item in items:
        longest = max(width, len(item[0]) + len(item[1]))
        if chunks and longest * (len(chunks[-1]) + 1) <= tokens:
            chunks[-1].append(item)
            width = longest
        else:
            chunks.append([item])
            width = len(item[0]) + len(item[1])
    return chunks


def nearest_block_size(d_ff: int, wanted: int) -> int:
    """The divisor of ``d_ff`` nearest to ``wanted`` (the smaller on a tie): the authors' loop
    strides by a fixed block and needs ``d_ff % B == 0`` (baselines.md §3, A2).

    Examples
    --------
    >>> nearest_block_size(1536, 512), nearest_block_size(11008, 512), nearest_block_size(128, 512)
    (512, 344, 128)
    """
    if wanted < 1:
        raise UserError(f"block size must be at least 1, got {wanted}")
    divisors = [b for b in range(1, d_ff + 1) if d_ff % b == 0]
    return min(divisors, key=lambda b: (abs(b - wanted), b))


def candidate_blocks(comparative: Tensor, block_size: int, count: int) -> list[tuple[int, int]]:
    """The ``count`` blocks ``(layer, first index)`` with the highest mean comparative score,
    best first (all blocks, in layer order, when ``count`` is 0 or covers them all).

    Examples
    --------
    >>> candidate_blocks(torch.tensor([[0.1, 0.1, 0.9, 0.7], [0.5, 0.5, 0.0, 0.0]]), 2, 2)
    [(0, 2), (1, 0)]
    """
    layers, d_ff = comparative.shape
    means = comparative.reshape(layers, d_ff // block_size, block_size).double().mean(-1)
    every = [(layer, b * block_size) for layer in range(layers) for b in range(means.shape[1])]
    if count == 0 or count >= len(every):
        return every
    order = sorted(range(len(every)), key=lambda j: (-float(means.flatten()[j]), j))
    return [every[j] for j in order[:count]]


def causal_scores(
    base: nn.Module,
    contaminated: nn.Module,
    uncontaminated: nn.Module,
    accuracy: Callable[[nn.Module, Callable | None], float],
    *,
    block_size: int,
    blocks: Sequence[tuple[int, int]] | None = None,
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
    blocks : sequence of (layer, first index), optional
        The blocks to score (:func:`candidate_blocks`); the others keep 0. Default: every block.
    """
    num_layers, d_ff = mlp_width(contaminated)
    if d_ff % block_size:
        raise UserError(f"block_size {block_size} does not divide the MLP width {d_ff}")
    acc_base = accuracy(base, None)
    acc_con = accuracy(contaminated, None)
    scores = torch.zeros(num_layers - 1, d_ff)
    if blocks is None:
        blocks = [(layer, start) for layer in range(num_layers - 1)
                  for start in range(0, d_ff, block_size)]
    for layer, start in blocks:
        if start % block_size or not (0 <= layer < num_layers - 1 and 0 <= start < d_ff):
            raise ValueError(f"({layer}, {start}) is not a block of {block_size} neurons of "
                             f"the {num_layers - 1} ranked layers")
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


def journal_path(out: str | os.PathLike) -> Path:
    """Where a neuron location that writes ``out`` keeps its journal until ``out`` is written."""
    out = Path(out)
    return out.with_name(out.name + ".journal.jsonl")


class Journal:
    """Per-question results of one neuron location, appended to a JSON Lines file as computed.

    The first line records the configuration (``{"format", "config"}``), a ``{"models": ...}``
    line the models' weight fingerprints once they are loaded, and every other line one
    question's result in one greedy pass: ``{"pass", "id", "value"}`` (a leaked question's
    greedy token ids, or a calibration question's 0/1 grade under an unpatched or patched
    model). Opening an existing journal resumes it: its configuration must equal ``config``
    (else :class:`UserError` naming the first key that differs), and a last line cut short by
    a killed process is dropped. ``path=None`` keeps the results in memory only; the file
    is created with the first record.
    """

    def __init__(self, path: str | os.PathLike | None, config: dict[str, Any]) -> None:
        self.path = None if path is None else Path(path)
        self.config = json.loads(json.dumps(config))  # as it reads back from the file
        self.results: dict[str, dict[str, Any]] = {}
        self.models: dict[str, str] | None = None
        if self.path is not None and self.path.is_file():
            self._resume()

    def __len__(self) -> int:
        """Question results recorded, over all passes."""
        return sum(len(done) for done in self.results.values())

    def _resume(self) -> None:
        assert self.path is not None
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]  # a killed writer can leave half a line
        if not complete:  # killed before its first line was whole: nothing to resume
            self.path.unlink()
            return
        if len(complete) < len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(len(complete))
        records = iter(read_jsonl(self.path))
        line, head = next(records, (1, {}))
        written = head.get("config")
        if head.get("format") != JOURNAL_FORMAT or not isinstance(written, dict):
            raise DataError(f"{self.path}:{line}: not a zerogap neurons journal")
        differ = [k for k in sorted(set(written) | set(self.config))
                  if written.get(k) != self.config.get(k)]
        if differ:
            raise UserError(f"{self.path}: a journal of another configuration (differs in "
                            f"{differ[0]}); rerun with the same options or remove the file")
        for line, record in records:
            if "models" in record:
                self.models = record["models"]
            elif {"pass", "id", "value"} <= set(record):
                self.results.setdefault(record["pass"], {})[record["id"]] = record["value"]
            else:
                raise DataError(f"{self.path}:{line}: not a journal record")

    def check_models(self, fingerprints: dict[str, str]) -> None:
        """Record the loaded models' fingerprints, or refuse models other than the journal's."""
        if self.models is None:
            self.models = dict(fingerprints)
            self._append({"models": self.models})
            return
        for role, fingerprint in fingerprints.items():
            if self.models.get(role) != fingerprint:
                raise UserError(f"{self.path}: a journal of another {role} model (fingerprint "
                                f"{self.models.get(role)}, loaded {fingerprint}); remove it "
                                "to start afresh")

    def record(self, key: str, question_id: str, value: Any) -> None:
        """Keep one question's result of pass ``key``, on disk before the next one is computed."""
        self.results.setdefault(key, {})[question_id] = value
        self._append({"pass": key, "id": question_id, "value": value})

    def _append(self, record: dict) -> None:
        if self.path is None:
            return
        lines = [] if self.path.is_file() else [{"format": JOURNAL_FORMAT, "config": self.config}]
        # Opened per record: each result is on disk (closed) before the next one is computed.
        with refused_writes(self.path, "the results before are kept; rerun to resume"), \
                open(self.path, "a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in [*lines, record])


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
    candidates: int = 0,
    max_new_tokens: int = 256,
    progress: ProgressCallback | None = None,
    journal: Journal | None = None,
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
        Neurons per causal block; one that does not divide the MLP width becomes the nearest
        divisor (:func:`nearest_block_size`, recorded in ``meta``).
    candidates : int
        Blocks scored causally, those with the highest mean comparative score
        (:func:`candidate_blocks`); 0 scores every block, as the authors do.
    progress : callable, optional
        ``progress(Progress("neuron location", done, total, "decode"))`` over every greedy
        decode of a question (leaked items, then calibration items per model and block): once
        at the start (``done`` counts the journal's results) and after each question of each
        greedy pass, so a long causal scoring advances pass by pass, never block by block.
    journal : Journal, optional
        Where each question's result is kept as it is computed; results already in it are
        not decoded again. Default: an in-memory one.

    Returns
    -------
    ranking : list of (layer, index)
        All ranked neurons, best first (save it whole; ``top_k`` picks the head).
    meta : dict
        Accuracies and sizes, for the saved file's provenance.
    """
    from zerogap.engine import greedy

    journal = journal if journal is not None else Journal(None, {})
    num_layers, d_ff = mlp_width(contaminated)
    block = nearest_block_size(d_ff, block_size)
    every = (num_layers - 1) * (d_ff // block)
    scored = every if candidates == 0 else min(candidates, every)
    passes = 2 + 2 * scored  # unpatched, then two per scored block
    total = len(leaked) + passes * len(calibration)
    def report(done: int, total: int) -> None:
        if progress is not None:
            progress(Progress("neuron location", done, total, "decode"))

    report(min(len(journal), total), total)

    def results(key: str, model: nn.Module, questions: Sequence, value: Callable,
                patch: NeuronPatch | None = None) -> list:
        """Pass ``key``'s result per question, decoding only those the journal lacks."""
        done = journal.results.get(key, {})
        todo = [q for q in questions if q.id not in done]

        def keep(i: int, generation) -> None:
            journal.record(key, todo[i].id, value(todo[i], generation))
            report(min(len(journal), total), total)

        if todo:
            greedy(model, tokenizer, [task.prompt(q) for q in todo],
                   max_new_tokens=max_new_tokens, stop=task.stop, patch=patch, on_question=keep)
        return [journal.results[key][q.id] for q in questions]

    answers = results("leaked", contaminated, leaked, lambda q, g: list(g.token_ids))
    items = [(tokenizer(task.prompt(q))["input_ids"], a)
             for q, a in zip(leaked, answers, strict=True)]
    comparative = comparative_scores(contaminated, uncontaminated, items)
    names = {id(base): "base", id(contaminated): "contaminated"}

    def accuracy(model, patch):
        key = names[id(model)]
        if patch is not None:
            (layer, first), (_, last) = patch.neurons[0], patch.neurons[-1]
            key += f"+{layer}:{first}-{last}"
        grades = results(key, model, calibration,
                         lambda q, g: int(task.grade(q, g.text).correct), patch)
        return sum(grades) / len(grades)

    blocks = candidate_blocks(comparative, block, candidates)
    causal = causal_scores(base, contaminated, uncontaminated, accuracy, block_size=block,
                           blocks=blocks)
    ranking = rank_neurons(comparative + causal, comparative.numel())
    meta = {
        "leaked": len(leaked), "calibration": len(calibration), "block_size": block,
        "blocks_scored": [list(b) for b in blocks], "blocks_total": every,
        "max_new_tokens": max_new_tokens,
        "accuracy": {name: accuracy(model, None) for model, name in
                     ((base, "base"), (contaminated, "contaminated"))},
    }
    return ranking, meta
