"""The running batch of one decode: each row's state on the device, the next logits, and the
:class:`~zerogap.engine.cache.RowCache` that holds the rows' keys (steps 3 and 4 of
:mod:`zerogap.engine.hf`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from zerogap.engine.cache import RowCache, question_share


@dataclass
class Rows:
    """Per-row state of the running batch (device tensors; row r is the same row in each)."""

    tokens: torch.Tensor  # (R, max_new) long, -1 padded
    lengths: torch.Tensor  # (R,) long
    question: torch.Tensor  # (R,) long
    sample: torch.Tensor  # (R,) long
    keys: torch.Tensor  # (R,) int32 noise keys
    position: torch.Tensor  # (R,) long position id of the next input token

    def select(self, idx: torch.Tensor) -> Rows:
        return Rows(*(t[idx] for t in self._fields()))

    def cat(self, other: Rows) -> Rows:
        pairs = zip(self._fields(), other._fields(), strict=True)
        return Rows(*(torch.cat([a, b]) for a, b in pairs))

    def _fields(self):
        return (self.tokens, self.lengths, self.question, self.sample, self.keys, self.position)


class Batch:
    """The rows decoding now (:attr:`rows`), their next logits (:attr:`logits`, (R, V)
    float32) and their :attr:`cache`, for one call whose shared prefix is ``prefix_kv``
    (``prefix_len`` tokens); each row holds ``max_new`` generated and its question's
    ``max_question`` tokens at most. The cache's layers from ``dense_from`` on read densely
    (:class:`~zerogap.engine.cache.RowCache`); ``rows_per_group``: the call's rows per question
    on average, which sizes the cache's question slots
    (:func:`~zerogap.engine.cache.question_share`)."""

    def __init__(self, prefix_kv: list, *, prefix_len: int, max_new: int, max_question: int,
                 dense_from: int | None, device: torch.device, rows_per_group: float = 1.0):
        self.prefix_kv, self.prefix_len = prefix_kv, prefix_len
        self.max_new, self.max_question = max_new, max_question
        self.rows_per_group = rows_per_group
        self.dense_from, self.device = dense_from, device
        self.rows: Rows | None = None
        self.logits: torch.Tensor | None = None
        self.cache: RowCache | None = None

    @property
    def live(self) -> int:
        """Rows decoding now."""
        return 0 if self.rows is None else len(self.rows.lengths)

    def _layer_prefix(self, kv) -> list:
        """The shared prefix per cache layer; empty for layers the prefix encode did not see
        (a patch adds its source's layers on the first forward when the prefix is empty)."""
        return [self.prefix_kv[i] if i < len(self.prefix_kv) else
                (k[:, :, :0], v[:, :, :0]) for i, (k, v) in enumerate(kv)]

    def join(self, groups: Sequence[tuple], keys: Callable[[int, int], int],
             capacity: int) -> None:
        """Append rows for ``groups`` of (question, sample list, first logits, question kv);
        the row cache is made (or grown) for ``capacity`` rows when they do not fit."""
        if self.cache is None:
            shared = math.ceil(capacity * question_share(self.rows_per_group))
            self.cache = RowCache(self._layer_prefix(groups[0][3]), self.dense_from,
                                  capacity=capacity, slots=self.max_new,
                                  question_slots=self.max_question,
                                  groups=max(shared, len(groups)))
        elif self.cache.rows + sum(len(g[1]) for g in groups) > self.cache.capacity:
            self.cache.grow(capacity)
        device = self.device
        new_logits, new_rows = [], []
        for q, samples, logits, kv in groups:
            n, s_len = len(samples), kv[0][0].shape[2]
            self.cache.add(kv, n)
            new_logits.append(logits.expand(n, -1))
            new_rows.append(Rows(
                tokens=torch.full((n, self.max_new), -1, dtype=torch.long, device=device),
                lengths=torch.zeros(n, dtype=torch.long, device=device),
                question=torch.full((n,), q, dtype=torch.long, device=device),
                sample=torch.tensor(samples, dtype=torch.long, device=device),
                keys=torch.tensor([keys(q, s) for s in samples], dtype=torch.int32,
                                  device=device),
                position=torch.full((n,), self.prefix_len + s_len, dtype=torch.long,
                                    device=device),
            ))
        if self.rows is not None and self.live:
            new_logits.insert(0, self.logits)
            new_rows.insert(0, self.rows)
        self.logits = torch.cat(new_logits)
        rows = new_rows[0]
        for part in new_rows[1:]:
            rows = rows.cat(part)
        self.rows = rows

    def remove(self, finished: Sequence[int]) -> tuple[list[int], torch.Tensor]:
        """Drop rows ``finished``; returns ``order``: new row ``i`` is old row ``order[i]``
        (:meth:`RowCache.remove`), as a list and as a device tensor, to apply to per-row state
        kept elsewhere."""
        assert self.cache is not None and self.rows is not None
        order = self.cache.remove(finished)
        keep = torch.tensor(order, dtype=torch.long, device=self.device)
        self.rows = self.rows.select(keep)
        return order, keep

    def clear(self) -> None:
        """Drop every row and the row cache (memory ran short: the rows start again)."""
        self.rows = self.logits = self.cache = None
