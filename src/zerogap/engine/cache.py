"""The engine's decode cache: one shared prefix, each question's tokens once, each row's own
generated keys in preallocated buffers.

Layout per layer (a transformers ``Cache`` with its own layer class, so the model code is
unchanged):

* ``prefix_k``, ``prefix_v``: ``(1, Hkv, P, D)``, the common few-shot prefix, stored once;
* ``question_k``, ``question_v``: ``(groups, Hkv, question_slots, D)``, one slot per group
  of rows that start from the same question tokens (a question's m samples, or those of them
  admitted together), its tokens left-aligned; ``groups`` follows the groups live at once
  (about the rows over m), not the rows, and grows when a new group finds no free slot;
* ``keys``, ``values``: ``(capacity, Hkv, slots, D)``, row ``r``'s generated tokens
  left-aligned in slots ``0 .. length[r]-1``.

This is the three-level cascade of the shared-prefix scheme (prefix, question, sample): the
attention of :mod:`zerogap.engine.attention` reads the prefix once for all rows, a question's
tokens once for its rows, and only each row's generated tokens per row.

Rows ``0 .. rows-1`` are live. A decode step writes each row's new key in place at its own
length (no concatenation of the cache); :meth:`RowCache.remove` moves the last live rows into
the slots of finished ones (only their generated keys move), so the live rows stay contiguous
and queued samples take the free slots at the end. A group's slot is free once its last row
has left; new groups take the lowest free slot, so the slots read per step stay few.

Layers past the model's own hold the keys of a model a patch runs beside it (the shortcut
patch's source, :class:`zerogap.decoding.shortcut.NeuronPatch`). A source that reads them with
the same cascade attention (:func:`zerogap.engine.hooks.reads_row_cache`) gets them as the
model's own layers are; for any other, layers from ``dense_from`` on are read densely: ``update``
returns the ``[prefix ; question ; own]`` keys and :meth:`RowCache.padding_mask` the matching
2-D mask, as an ordinary cache would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from zerogap.engine.attention import key_mask

KV = tuple[torch.Tensor, torch.Tensor]

# Question slots per row over the rows per group (a question's samples): the rows of a question
# admitted in two parts (the batch filled up between them) make two groups, so a quarter more
# slots than whole questions would need. Past them the question buffers grow (doubling).
GROUP_SLACK = 1.25


def question_share(rows_per_group: float) -> float:
    """Question slots a row costs when ``rows_per_group`` rows (on average) share a question:
    ``min(1, GROUP_SLACK / rows_per_group)`` (1 for greedy decodes, each row its own)."""
    return min(1.0, GROUP_SLACK / max(1.0, rows_per_group))


@dataclass(frozen=True)
class Layout:
    """Where each live row reads its keys during one decode step (shared by all layers).

    ``own_mask`` (R, 1, 1, width + 1): additive mask over the rows' generated slots.
    ``group_slots`` and ``question_width``: the question slots ``0 .. group_slots-1`` and their
    first ``question_width`` keys are what the step reads; ``group_mask`` (group_slots, 1, 1,
    question_width) hides each slot's keys past its question's length. ``members``: most rows
    of one group; ``row_slot`` (R,) long: row ``r`` is query row ``row_slot[r]`` of the padded
    (group_slots * members) layout in which a group's rows attend to their question together.
    """

    own_mask: torch.Tensor
    group_mask: torch.Tensor
    row_slot: torch.Tensor
    members: int
    group_slots: int
    question_width: int


class _RowLayer(CacheLayerMixin):
    is_sliding = False

    def __init__(self, owner: RowCache, prefix: KV, capacity: int, slots: int, groups: int,
                 question_slots: int, dense: bool):
        super().__init__()
        self.owner, self.dense = owner, dense
        self.prefix_k, self.prefix_v = prefix
        _, kv_heads, _, dim = self.prefix_k.shape
        # Zeros, not empty: masked slots still enter the product with V, and 0 * NaN is NaN.
        self.keys = self.prefix_k.new_zeros(capacity, kv_heads, slots, dim)
        self.values = self.prefix_v.new_zeros(capacity, kv_heads, slots, dim)
        self.question_k = self.prefix_k.new_zeros(groups, kv_heads, question_slots, dim)
        self.question_v = self.prefix_v.new_zeros(groups, kv_heads, question_slots, dim)
        self.device = self.keys.device
        self.is_initialized = True

    def grow(self, capacity: int) -> None:
        """Reallocate the rows' buffers for ``capacity`` rows, keeping the live ones."""
        self._grow(("keys", "values"), capacity, self.owner.rows, self.owner.width)

    def grow_groups(self, groups: int) -> None:
        """Reallocate the question buffers for ``groups`` groups, keeping the live ones."""
        owner = self.owner
        self._grow(("question_k", "question_v"), groups, len(owner.group_live),
                   owner.question_width)

    def _grow(self, names: tuple[str, str], size: int, first: int, width: int) -> None:
        for name in names:
            old = getattr(self, name)
            new = old.new_zeros(size, *old.shape[1:])
            new[:first, :, :width] = old[:first, :, :width]  # the slots written so far
            setattr(self, name, new)

    def lazy_initialization(self, key_states, value_states) -> None:
        """Buffers are allocated up front; nothing to do."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> KV:
        """Write the step's ``(R, Hkv, 1, D)`` keys and values at each row's length."""
        owner = self.owner
        rows, width = owner.rows, owner.width + 1
        if key_states.shape[0] != rows or key_states.shape[2] != 1:
            raise ValueError(f"the row cache takes one token for each of its {rows} rows, got "
                             f"{tuple(key_states.shape[:3:2])}")
        if width > self.keys.shape[2]:  # index_copy_ would spill into the next row's buffer
            raise ValueError(f"a row outgrew the row cache's {self.keys.shape[2]} slots")
        at = owner.write_index(self.keys.shape[1])
        dim = self.keys.shape[3]
        self.keys.view(-1, dim).index_copy_(0, at, key_states.reshape(-1, dim))
        self.values.view(-1, dim).index_copy_(0, at, value_states.reshape(-1, dim))
        keys, values = self.keys[:rows, :, :width], self.values[:rows, :, :width]
        if self.dense:
            group, q_width = owner.group[:rows], owner.question_width
            keys = torch.cat([self.prefix_k.expand(rows, -1, -1, -1),
                              self.question_k[group, :, :q_width], keys], dim=2)
            values = torch.cat([self.prefix_v.expand(rows, -1, -1, -1),
                                self.question_v[group, :, :q_width], values], dim=2)
        return keys, values

    def questions(self, layout: Layout) -> KV:
        """The question keys and values one step reads, ``(group_slots, Hkv, width, D)``."""
        return (self.question_k[: layout.group_slots, :, : layout.question_width],
                self.question_v[: layout.group_slots, :, : layout.question_width])

    def get_seq_length(self) -> int:
        return self.owner.prefix_len + self.owner.question_width + self.owner.width

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return self.owner.prefix_len + self.question_k.shape[2] + self.keys.shape[2]


class RowCache(Cache):
    """Shared prefix, per-group question keys and per-row buffers for up to ``capacity`` rows.

    Parameters
    ----------
    prefix : list of (k, v), each (1, Hkv, P, D)
        The shared prefix's keys and values, one pair per cache layer.
    dense_from : int or None
        The first layer read densely (see module note); None: every layer reads the cascade.
    capacity : int
        Most rows.
    slots : int
        Most generated tokens per row.
    question_slots : int
        Most question tokens (a prompt's tokens after the prefix) per group.
    groups : int or None
        Groups the question buffers hold at first (None: ``capacity``, one a row); they grow
        when a group finds no free slot.
    """

    def __init__(self, prefix: Sequence[KV], dense_from: int | None, *, capacity: int,
                 slots: int, question_slots: int, groups: int | None = None):
        self.prefix_len = prefix[0][0].shape[2]
        self.rows, self.width = 0, 0
        device = prefix[0][0].device
        self.lengths = torch.zeros(capacity, dtype=torch.long, device=device)
        self.group = torch.zeros(capacity, dtype=torch.long, device=device)
        self.member = torch.zeros(capacity, dtype=torch.long, device=device)
        groups = capacity if groups is None else max(1, groups)
        self.group_lengths = torch.zeros(groups, dtype=torch.long, device=device)
        self.row_index = torch.arange(capacity, device=device)
        self.host_lengths: list[int] = []
        self.host_groups: list[int] = []  # group slot of each live row
        self.group_size: list[int] = []  # per group slot: rows it started with
        self.group_live: list[int] = []  # per group slot: rows still live (0: free)
        self.group_len: list[int] = []  # per group slot: question tokens
        self._index: tuple[int, torch.Tensor] | None = None
        self._layout: dict[torch.dtype, Layout] = {}
        self._groups: tuple | None = None  # the step-independent part of the layout
        super().__init__(layers=[_RowLayer(self, kv, capacity, slots, groups, question_slots,
                                           dense_from is not None and i >= dense_from)
                                 for i, kv in enumerate(prefix)])

    @property
    def capacity(self) -> int:
        return len(self.lengths)

    @property
    def group_slots(self) -> int:
        """Question slots up to the last one in use."""
        return max((g + 1 for g, n in enumerate(self.group_live) if n), default=0)

    @property
    def question_width(self) -> int:
        """Most question tokens of a live group."""
        return max((n for n, live in zip(self.group_len, self.group_live, strict=True) if live),
                   default=0)

    def grow(self, capacity: int) -> None:
        """Make room for ``capacity`` rows (live rows keep their slots); never shrinks."""
        if capacity <= self.capacity:
            return
        for name in ("lengths", "group", "member"):
            setattr(self, name, _grown(getattr(self, name), capacity))
        self.row_index = torch.arange(capacity, device=self.lengths.device)
        for layer in self.layers:
            layer.grow(capacity)
        self._changed(groups=True)

    def _grow_groups(self, groups: int) -> None:
        """Make room for ``groups`` question slots (live groups keep theirs)."""
        self.group_lengths = _grown(self.group_lengths, groups)
        for layer in self.layers:
            layer.grow_groups(groups)

    def _changed(self, groups: bool) -> None:
        self._index, self._layout = None, {}
        if groups:
            self._groups = None

    @property
    def visible(self) -> torch.Tensor:
        """(R,) long: generated slots each row's query sees during a step (its length plus
        one: the step's own token)."""
        return self.lengths[: self.rows] + 1

    def layout(self, dtype: torch.dtype) -> Layout:
        """The step's :class:`Layout`, with masks in ``dtype`` (computed once per step)."""
        if dtype not in self._layout:
            if self._groups is None:
                slots, width = self.group_slots, self.question_width
                members = max((self.group_size[g] for g in set(self.host_groups)), default=1)
                row_slot = self.group[: self.rows] * members + self.member[: self.rows]
                self._groups = slots, width, members, row_slot
            slots, width, members, row_slot = self._groups
            self._layout[dtype] = Layout(
                own_mask=key_mask(self.visible, self.width + 1, dtype),
                group_mask=key_mask(self.group_lengths[:slots], width, dtype),
                row_slot=row_slot, members=members, group_slots=slots, question_width=width)
        return self._layout[dtype]

    @property
    def needs_mask(self) -> bool:
        """Whether some layer is read densely, so the forward call needs :meth:`padding_mask`."""
        return any(layer.dense for layer in self.layers)

    def write_index(self, kv_heads: int) -> torch.Tensor:
        """(R * Hkv,) long: where the step's keys go in a layer's buffer seen as rows of D
        (one ``index_copy_`` per layer; advanced-index assignment was several times slower)."""
        if self._index is None or self._index[0] != kv_heads:
            slots = self.layers[0].keys.shape[2]
            heads = torch.arange(kv_heads, device=self.lengths.device)
            first = (self.row_index[: self.rows, None] * kv_heads + heads) * slots
            self._index = kv_heads, (first + self.lengths[: self.rows, None]).reshape(-1)
        return self._index[1]

    def padding_mask(self) -> torch.Tensor:
        """(R, P + question_width + width + 1) long: the dense layers' 2-D mask for the next
        step."""
        device = self.lengths.device
        own = torch.arange(self.width + 1, device=device) <= self.lengths[: self.rows, None]
        question_len = self.group_lengths[self.group[: self.rows], None]
        question = torch.arange(self.question_width, device=device) < question_len
        prefix = own.new_ones(self.rows, self.prefix_len)
        return torch.cat([prefix, question, own], dim=1).long()

    def add(self, kv: Sequence[KV], count: int) -> None:
        """Append ``count`` rows that start from the same question keys ``kv`` ((1, Hkv, n, D)
        each): the keys go once into a free group slot, the rows start with no own keys."""
        n = kv[0][0].shape[2]
        start, end = self.rows, self.rows + count
        if end > self.capacity or n > self.layers[0].question_k.shape[2]:
            raise ValueError(f"row cache full: {end} rows of {n} question tokens do not fit "
                             f"{self.capacity} x {self.layers[0].question_k.shape[2]}")
        g = next((g for g, live in enumerate(self.group_live) if not live), len(self.group_live))
        if g == len(self.group_live):
            if g == len(self.group_lengths):  # every question slot is taken: double them
                self._grow_groups(2 * g)
            self.group_size.append(0)
            self.group_live.append(0)
            self.group_len.append(0)
        for layer, (k, v) in zip(self.layers, kv, strict=True):
            layer.question_k[g, :, :n] = k[0]
            layer.question_v[g, :, :n] = v[0]
        self.group_size[g], self.group_live[g], self.group_len[g] = count, count, n
        self.group_lengths[g] = n
        self.lengths[start:end] = 0
        self.group[start:end] = g
        self.member[start:end] = torch.arange(count, device=self.lengths.device)
        self.host_lengths.extend([0] * count)
        self.host_groups.extend([g] * count)
        self.rows = end
        self._changed(groups=True)

    def advance(self) -> None:
        """Count the token every live row wrote in the step just run."""
        self.lengths[: self.rows] += 1
        self.host_lengths = [n + 1 for n in self.host_lengths]
        self.width += 1
        self._changed(groups=False)

    def remove(self, finished: Sequence[int]) -> list[int]:
        """Drop rows ``finished``; the last live rows move into their slots.

        Returns ``order``: new row ``i`` is old row ``order[i]`` (apply it to per-row state).
        """
        gone = set(finished)
        for r in gone:
            self.group_live[self.host_groups[r]] -= 1
        left = self.rows - len(gone)
        holes = [r for r in sorted(gone) if r < left]
        movers = [r for r in range(left, self.rows) if r not in gone]
        order = list(range(left))
        for hole, mover in zip(holes, movers, strict=True):
            order[hole] = mover
        if holes:
            dst = torch.tensor(holes, device=self.lengths.device)
            src = torch.tensor(movers, device=self.lengths.device)
            for layer in self.layers:
                layer.keys[dst, :, : self.width] = layer.keys[src, :, : self.width]
                layer.values[dst, :, : self.width] = layer.values[src, :, : self.width]
            for per_row in (self.lengths, self.group, self.member):
                per_row[dst] = per_row[src]
        self.host_lengths = [self.host_lengths[r] for r in order]
        self.host_groups = [self.host_groups[r] for r in order]
        self.rows = left
        self.width = max(self.host_lengths, default=0)
        self._changed(groups=True)
        return order


def _grown(old: torch.Tensor, size: int) -> torch.Tensor:
    """``old`` (1-D) zero-extended to ``size``."""
    new = old.new_zeros(size)
    new[: len(old)] = old
    return new
