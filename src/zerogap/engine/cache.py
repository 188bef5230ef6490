"""The engine's decode cache: one shared prefix, each row's own keys in preallocated buffers.

Layout per layer (a transformers ``Cache`` with its own layer class, so the model code is
unchanged):

* ``prefix_k``, ``prefix_v``: ``(1, Hkv, P, D)``, the common few-shot prefix, stored once;
* ``keys``, ``values``: ``(capacity, Hkv, slots, D)``, row ``r``'s own keys (its question
  tokens, then its generated tokens) left-aligned in slots ``0 .. length[r]-1``.

Rows ``0 .. rows-1`` are live. A decode step writes each row's new key in place at its own
length (no concatenation of the cache); :meth:`RowCache.remove` moves the last live rows into
the slots of finished ones, so the live rows stay contiguous and queued samples take the free
slots at the end. The attention of :mod:`zerogap.engine.attention` reads the prefix once for
all rows and each row's own part up to the longest live row (``width``).

Layers past the model's own (a shortcut patch's source model keeps its keys there, see
:mod:`zerogap.patching`) are read by that model's own attention function: for them ``update``
returns the dense ``[prefix ; own]`` keys and :meth:`RowCache.padding_mask` the matching 2-D
mask, as an ordinary cache would.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

KV = tuple[torch.Tensor, torch.Tensor]


class _RowLayer(CacheLayerMixin):
    is_sliding = False

    def __init__(self, owner: RowCache, prefix: KV, capacity: int, slots: int, dense: bool):
        super().__init__()
        self.owner, self.dense = owner, dense
        self.prefix_k, self.prefix_v = prefix
        _, kv_heads, _, dim = self.prefix_k.shape
        # Zeros, not empty: masked slots still enter the product with V, and 0 * NaN is NaN.
        self.keys = self.prefix_k.new_zeros(capacity, kv_heads, slots, dim)
        self.values = self.prefix_v.new_zeros(capacity, kv_heads, slots, dim)
        self.device = self.keys.device
        self.is_initialized = True

    def grow(self, capacity: int) -> None:
        """Reallocate the buffers for ``capacity`` rows, keeping the live rows."""
        rows, width = self.owner.rows, self.owner.width
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(capacity, *old.shape[1:])
            new[:rows, :, :width] = old[:rows, :, :width]  # the slots written so far
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
            keys = torch.cat([self.prefix_k.expand(rows, -1, -1, -1), keys], dim=2)
            values = torch.cat([self.prefix_v.expand(rows, -1, -1, -1), values], dim=2)
        return keys, values

    def get_seq_length(self) -> int:
        return self.owner.prefix_len + self.owner.width

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return self.owner.prefix_len + self.keys.shape[2]


class RowCache(Cache):
    """Shared prefix plus per-row buffers for up to ``capacity`` rows of ``slots`` tokens each.

    Parameters
    ----------
    prefix : list of (k, v), each (1, Hkv, P, D)
        The shared prefix's keys and values, one pair per cache layer.
    own_layers : int
        The model's own layer count; layers from here on are read densely (see module note).
    capacity, slots : int
        Most rows, and most tokens of its own (question plus generated) per row.
    """

    def __init__(self, prefix: Sequence[KV], own_layers: int, *, capacity: int, slots: int):
        self.prefix_len = prefix[0][0].shape[2]
        self.rows, self.width = 0, 0
        self.lengths = torch.zeros(capacity, dtype=torch.long, device=prefix[0][0].device)
        self.row_index = torch.arange(capacity, device=self.lengths.device)
        self.host_lengths: list[int] = []
        self._index: tuple[int, torch.Tensor] | None = None
        super().__init__(layers=[_RowLayer(self, kv, capacity, slots, i >= own_layers)
                                 for i, kv in enumerate(prefix)])

    @property
    def capacity(self) -> int:
        return len(self.lengths)

    def grow(self, capacity: int) -> None:
        """Make room for ``capacity`` rows (live rows keep their slots); never shrinks."""
        if capacity <= self.capacity:
            return
        lengths = self.lengths.new_zeros(capacity)
        lengths[: self.rows] = self.lengths[: self.rows]
        self.lengths = lengths
        self.row_index = torch.arange(capacity, device=lengths.device)
        for layer in self.layers:
            layer.grow(capacity)
        self._index = None

    @property
    def visible(self) -> torch.Tensor:
        """(R, 1) long: own slots each row's query sees during a step (its length plus one)."""
        return self.lengths[: self.rows, None] + 1

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
        """(R, P + width + 1) long: the dense layers' 2-D mask for the next step."""
        width = self.width + 1
        own = torch.arange(width, device=self.lengths.device) <= self.lengths[: self.rows, None]
        prefix = own.new_ones(self.rows, self.prefix_len)
        return torch.cat([prefix, own], dim=1).long()

    def add(self, kv: Sequence[KV], count: int) -> None:
        """Append ``count`` rows that start from the same own keys ``kv`` ((1, Hkv, n, D) each)."""
        n = kv[0][0].shape[2]
        start, end = self.rows, self.rows + count
        if end > self.capacity or n > self.layers[0].keys.shape[2]:
            raise ValueError(f"row cache full: {end} rows of {n} tokens do not fit "
                             f"{self.capacity} x {self.layers[0].keys.shape[2]}")
        for layer, (k, v) in zip(self.layers, kv, strict=True):
            layer.keys[start:end, :, :n] = k
            layer.values[start:end, :, :n] = v
        self.lengths[start:end] = n
        self.host_lengths.extend([n] * count)
        self.rows, self.width = end, max(self.width, n)
        self._index = None

    def advance(self) -> None:
        """Count the token every live row wrote in the step just run."""
        self.lengths[: self.rows] += 1
        self.host_lengths = [n + 1 for n in self.host_lengths]
        self.width += 1
        self._index = None

    def remove(self, finished: Sequence[int]) -> list[int]:
        """Drop rows ``finished``; the last live rows move into their slots.

        Returns ``order``: new row ``i`` is old row ``order[i]`` (apply it to per-row state).
        """
        gone = set(finished)
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
            self.lengths[dst] = self.lengths[src]
        self.host_lengths = [self.host_lengths[r] for r in order]
        self.rows = left
        self.width = max(self.host_lengths, default=0)
        self._index = None
        return order
