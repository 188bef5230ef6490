"""RailCap and LNE-blocking as vLLM logits processors (V1 interface), driven per request.

vLLM users need nothing else from zerogap: with zerogap installed, vLLM finds both classes
through the ``vllm.logits_processors`` entry point (or pass them as
``LLM(..., logits_processors=[RailCapProcessor])``), and a request opts in through
``SamplingParams.extra_args``; every other request in the batch is left untouched:

* ``extra_args={"railcap": {"trajectory": [token ids], "n": 4, "mode": "cap"}}``: RailCap
  (arXiv 2608.07341, §4) against the question's greedy trajectory (generated token ids only);
  ``n`` and ``mode`` default to 4 and ``"cap"``. Sample at the paper's tau with
  ``temperature=0.7``. ``"answer_markers": [[token ids], ...]`` (the task's answer marker as
  token sequences, :func:`zerogap.decoding.specs.answer_marker_ids`) exempts the answer slot:
  once a sample has written one of them it is never capped again (``protect="answer"``).
* ``extra_args={"lne_blocking": {"count": k}}``: ban the argmax at the first ``k`` generated
  positions (LNE-blocking; ``zerogap.decoding.blocking.blocking_counts`` gives ``k``).

With ``n = m`` in ``SamplingParams`` each of the m child requests carries the same arguments.

Both reuse the pure-torch batched cores (:func:`~zerogap.decoding.railcap.railcap_apply`,
:func:`~zerogap.decoding.blocking.block_argmax`): ``apply`` makes a few batched tensor calls per
group of rows sharing the same settings, never a Python loop over rows. Rows joining, leaving and
moving inside vLLM's persistent batch arrive through ``update_state``'s ``BatchUpdate``
(processed in vLLM's order: removed, added, moved); each step there reads the last ``n``
generated tokens of the rows that opted in from vLLM's by-reference output lists.

This is vLLM's V1 ``LogitsProcessor`` interface, the one the V1 model runner loads. vLLM 0.32's
Model Runner V2 rejects V1 classes; it is chosen only where Triton is available (not on CPU
builds), and ``VLLM_USE_V2_MODEL_RUNNER=0`` forces V1 on GPUs (zerogap's vLLM backend sets it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from zerogap.decoding.blocking import block_argmax
from zerogap.decoding.railcap import pad_trajectories, railcap_apply
from zerogap.decoding.settings import MODES
from zerogap.decoding.specs import BLOCKING_KEY, RAILCAP_KEY


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _arguments(params: SamplingParams, key: str) -> dict | None:
    extra = params.extra_args or {}
    if key not in extra:
        return None
    args = extra[key]
    if not isinstance(args, dict):
        raise ValueError(f"extra_args[{key!r}] must be a dict, got {type(args).__name__}")
    return args


Markers = tuple[tuple[int, ...], ...]


def _token_ids(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(_is_int(t) and t >= 0 for t in value)


def railcap_settings(params: SamplingParams) -> tuple[list[int], int, str, Markers] | None:
    """``(trajectory, n, mode, answer_markers)`` a request asks for, or None; ``ValueError``
    naming the field."""
    args = _arguments(params, RAILCAP_KEY)
    if args is None:
        return None
    unknown = sorted(set(args) - {"trajectory", "n", "mode", "answer_markers"})
    if unknown:
        raise ValueError(f"extra_args['railcap'] has unknown keys {unknown}; "
                         "known: trajectory, n, mode, answer_markers")
    trajectory = args.get("trajectory")
    if not _token_ids(trajectory):
        raise ValueError("extra_args['railcap']['trajectory'] must be a list of token ids")
    markers = args.get("answer_markers", [])
    if not isinstance(markers, list) or not all(_token_ids(m) and m for m in markers):
        raise ValueError("extra_args['railcap']['answer_markers'] must be a list of non-empty "
                         "token id lists")
    n, mode = args.get("n", 4), args.get("mode", "cap")
    if not _is_int(n) or n < 1:
        raise ValueError(f"extra_args['railcap']['n'] must be an integer >= 1, got {n!r}")
    if mode not in MODES:
        raise ValueError(f"extra_args['railcap']['mode'] must be one of {MODES}, got {mode!r}")
    return trajectory, n, mode, tuple(tuple(m) for m in markers)


def blocking_settings(params: SamplingParams) -> int | None:
    """The blocking count a request asks for, or None; ``ValueError`` naming the field."""
    args = _arguments(params, BLOCKING_KEY)
    if args is None:
        return None
    count = args.get("count", -1)
    if set(args) != {"count"} or not _is_int(count) or count < 0:
        raise ValueError("extra_args['lne_blocking'] must be {'count': integer >= 0}, "
                         f"got {args!r}")
    return count


class _BatchRows:
    """Batch indices of the rows a processor changes, read and written as one block.

    When the indices are consecutive (the usual batch: every request opted in) the block is a
    view of the logits, so nothing is copied out and back; otherwise a copy. Built on the host
    from the sorted indices, so ``apply`` never waits for the device to decide which.
    """

    def __init__(self, indices: list[int], device: torch.device) -> None:
        self.index = torch.tensor(indices, dtype=torch.long, device=device)  # (A,)
        consecutive = bool(indices) and indices[-1] - indices[0] + 1 == len(indices)
        self.span = (indices[0], len(indices)) if consecutive else None

    def take(self, logits: torch.Tensor) -> torch.Tensor:
        """(A, V): the rows, a view where possible."""
        if self.span is not None:
            return logits.narrow(0, *self.span)
        return logits.index_select(0, self.index)

    def put(self, logits: torch.Tensor, rows: torch.Tensor) -> None:
        """Write ``rows`` from :meth:`take` back (nothing to do for a view)."""
        if self.span is None:
            logits.index_copy_(0, self.index, rows)


@dataclass
class _Row:
    """One opted-in request: its settings and vLLM's live list of its generated tokens.

    ``scanned`` and ``marker_seen``: how far RailCap has searched ``output`` for an answer
    marker, and whether it found one (each step reads only the tokens added since).
    """

    settings: Any
    output: list[int]
    scanned: int = 0
    marker_seen: bool = False

    def seen(self, markers: Markers) -> bool:
        """Whether ``output`` holds one of ``markers`` (token sequences) anywhere."""
        if markers and not self.marker_seen:
            width = max(len(m) for m in markers)
            tail = self.output[max(0, self.scanned - width + 1):]
            self.marker_seen = any(tail[i : i + len(m)] == list(m)
                                   for m in markers for i in range(len(tail) - len(m) + 1))
            self.scanned = len(self.output)
        return self.marker_seen


class _PerRequestProcessor(LogitsProcessor):
    """Keeps ``{batch index: _Row}`` for the requests that opted in, following vLLM's batch."""

    settings_of: Callable[[SamplingParams], Any]

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self.device = device
        self.rows: dict[int, _Row] = {}
        self.changed = False

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        cls.settings_of(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False  # both change which token is the argmax

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None:
            self._follow(batch_update)
        if self.rows:
            self.prepare_step()

    def _follow(self, update: BatchUpdate) -> None:
        for index in update.removed:
            self.changed |= self.rows.pop(index, None) is not None
        for index, params, _prompt, output in update.added:
            settings = type(self).settings_of(params)
            if settings is None:
                self.changed |= self.rows.pop(index, None) is not None
            else:
                self.rows[index] = _Row(settings, output)
                self.changed = True
        for a, b, direction in update.moved:
            row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if row_a is not None:
                self.rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self.rows[a] = row_b
            self.changed |= row_a is not None or row_b is not None

    def prepare_step(self) -> None:
        """Build this step's tensors from ``self.rows`` (reset ``self.changed`` when rebuilt)."""
        raise NotImplementedError


class RailCapProcessor(_PerRequestProcessor):
    """RailCap for requests whose ``extra_args`` hold ``"railcap"`` (see the module docstring)."""

    settings_of = staticmethod(railcap_settings)

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        # (n, mode, markers) -> (batch rows (A,), trajectories (A, L), their lengths (A,))
        self.batches: dict[tuple[int, str, Markers],
                           tuple[_BatchRows, torch.Tensor, torch.Tensor]] = {}
        self.recent: dict[tuple[int, str, Markers], torch.Tensor] = {}  # -> (A, n) long
        # -> (A,) bool, rows past an answer marker; only for groups that protect the slot
        self.protected: dict[tuple[int, str, Markers], torch.Tensor] = {}

    def prepare_step(self) -> None:
        # Rows sharing (n, mode, markers): one core call.
        groups: dict[tuple[int, str, Markers], list[int]] = {}
        for index in sorted(self.rows):
            _, n, mode, markers = self.rows[index].settings
            groups.setdefault((n, mode, markers), []).append(index)
        if self.changed:
            self.batches = {}
            for key, indices in groups.items():
                trajectory, lengths = pad_trajectories(
                    [self.rows[i].settings[0] for i in indices], self.device
                )
                self.batches[key] = (_BatchRows(indices, self.device), trajectory, lengths)
            self.changed = False
        # The last n generated tokens, -1 where a row has fewer (such rows never match).
        self.recent = {
            key: torch.tensor(
                [([-1] * key[0] + self.rows[i].output[-key[0]:])[-key[0]:] for i in indices],
                dtype=torch.long, device=self.device,
            )
            for key, indices in groups.items()
        }
        self.protected = {
            key: torch.tensor([self.rows[i].seen(key[2]) for i in indices], dtype=torch.bool,
                              device=self.device)
            for key, indices in groups.items() if key[2]
        }

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        for key, (batch_rows, trajectory, lengths) in self.batches.items():
            rows = batch_rows.take(logits)  # (A, V)
            railcap_apply(rows, self.recent[key], trajectory, lengths, mode=key[1],
                          sparse=rows.device.type == "cpu", protected=self.protected.get(key))
            batch_rows.put(logits, rows)
        return logits


class LNEBlockingProcessor(_PerRequestProcessor):
    """LNE-blocking for requests whose ``extra_args`` hold ``"lne_blocking"``."""

    settings_of = staticmethod(blocking_settings)

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        empty = torch.zeros(0, dtype=torch.long, device=device)
        self.batch_rows = _BatchRows([], device)
        self.counts, self.lengths = empty, empty  # (A,) each

    def prepare_step(self) -> None:
        indices = sorted(self.rows)
        if self.changed:
            self.batch_rows = _BatchRows(indices, self.device)
            self.counts = torch.tensor([self.rows[i].settings for i in indices],
                                       dtype=torch.long, device=self.device)
            self.changed = False
        self.lengths = torch.tensor([len(self.rows[i].output) for i in indices],
                                    dtype=torch.long, device=self.device)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        rows = self.batch_rows.take(logits)  # (A, V)
        block_argmax(rows, self.lengths, self.counts)
        self.batch_rows.put(logits, rows)
        return logits
