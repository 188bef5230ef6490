"""The keys and values a decode starts from: the prompts' shared prefix, encoded once (or read
back), and each question's own tokens encoded on top of it, several questions in one
left-padded forward call (step 1 and 2 of :mod:`zerogap.engine.hf`)."""

from __future__ import annotations

import logging
import weakref

import torch

from zerogap.engine.attention import cache_kwarg
from zerogap.engine.hooks import Patch
from zerogap.engine.prefix_cache import PrefixCache, weights_state

_log = logging.getLogger("zerogap.engine")

_PREFIXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def kv_heads(cfg) -> int:
    """Key/value heads per layer of a text config (grouped-query attention has fewer than its
    query heads)."""
    return getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads


def head_dim(cfg) -> int:
    """Width of one attention head of a text config."""
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


class Prefill:
    """Encodes on ``model`` for one engine call; ``prefixes`` is this machine's file of encoded
    prefixes for it (:mod:`zerogap.engine.prefix_cache`), or None."""

    def __init__(self, model, prefixes: PrefixCache | None):
        self.model, self.prefixes = model, prefixes
        self.device = next(model.parameters()).device
        self.cache_arg = cache_kwarg(model)

    def _cache(self, kv):
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cache = DynamicCache(config=self.model.config)
        while len(cache.layers) < len(kv):  # a patch's source model keeps its kv as extra layers
            cache.layers.append(DynamicLayer())
        for layer, (k, v) in zip(cache.layers, kv, strict=True):
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
        return cache

    def encode(self, sequences: list[list[int]], kv, start: int):
        """Run each of ``sequences`` on top of the same ``kv`` (batch 1, ``start`` tokens), in
        one forward call; return their last logits (B, V) float32 and, per sequence, its keys
        and values past ``start``: one (1, Hkv, n_i, D) pair per layer.

        The sequences are left-padded to the longest, the pads hidden by the attention mask,
        so every row's last logits are the call's last position. A pad's query must still see
        a key, which is why the caller batches only on top of a non-empty ``kv``.
        """
        cfg = self.model.config.get_text_config(decoder=True)
        if kv is None:
            kv = [
                (torch.empty(1, kv_heads(cfg), 0, head_dim(cfg),
                             dtype=self.model.dtype, device=self.device),) * 2
                for _ in range(cfg.num_hidden_layers)
            ]
        width = max(len(x) for x in sequences)
        if not width:
            return None, [kv]
        batch = len(sequences)
        cache = self._cache([(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1))
                             for k, v in kv])
        pads = torch.tensor([width - len(x) for x in sequences], device=self.device)
        steps = torch.arange(width, device=self.device)
        # The last position as an index tensor, not ``logits_to_keep=1``: the slice that the int
        # makes is a strided view, on which PyTorch's linear (frozen weights) takes a batched
        # product over the output matrix copied once per row, 0.9 GB for 16 rows of
        # SmolLM2's 49,152 x 576 (1.6 s against 13 ms in bfloat16); the index gathers a
        # contiguous (B, 1, hidden) and the product is one plain matrix product.
        last = torch.tensor([width - 1], device=self.device)
        out = self.model(
            input_ids=torch.tensor([[0] * (width - len(x)) + list(x) for x in sequences],
                                   device=self.device),
            attention_mask=torch.cat([torch.ones(batch, start, dtype=torch.long,
                                                 device=self.device),
                                      (steps >= pads[:, None]).long()], dim=1),
            position_ids=start + (steps - pads[:, None]).clamp_(min=0),
            use_cache=True, logits_to_keep=last, **{self.cache_arg: cache},
        )
        per_row = []
        for i, first in enumerate((start + pads).tolist()):
            own = [(layer.keys[i : i + 1, :, first:], layer.values[i : i + 1, :, first:])
                   for layer in cache.layers]
            # Batched, they are copied so that the call's keys (the prefix once per row) go.
            per_row.append([(k.clone(), v.clone()) for k, v in own] if batch > 1 else own)
        return out.logits[:, -1].float(), per_row

    def prefix(self, tokens: list[int], patch: Patch | None) -> list:
        """The shared prefix's keys and values: the previous call's on this model, this
        machine's file of them (:mod:`zerogap.engine.prefix_cache`), or encoded.

        A run calls the engine several times with one prompt prefix (greedy decodes, then
        samples; a study's strategies one after another), and on W the prefix is 1,170 tokens,
        about 3.5 s of one core each time. Its keys are reused while the same tokens meet the
        same weights: every parameter and buffer at the same address and version (an
        in-place update bumps the version) and the same forward hooks; a patch (which changes
        the activations) or weights without version counters always encode afresh. The
        encode is deterministic, so reuse changes no draw. Only the latest prefix per model
        is kept in memory; on disk, while the weights are still the ones fingerprinted at
        load, so that the next command with this prefix skips the encode.
        """
        state = None if patch is not None else weights_state(self.model)
        if state is None:
            return self.encode([tokens], None, 0)[1][0]
        key = (tuple(tokens), state)
        known = _PREFIXES.get(self.model)
        if known is not None and known[0] == key:
            return known[1]
        disk = self.prefixes if tokens and self.prefixes and self.prefixes.holds(state) else None
        kv, path = disk.load(self.model, tokens) if disk else (None, None)
        if kv is not None:
            _log.info("prefix of %d tokens read from %s", len(tokens), path,
                      extra={"engine": {"prefix_file": str(path)}})
        else:
            kv = self.encode([tokens], None, 0)[1][0]
            if disk and (path := disk.save(self.model, tokens, kv)) is not None:
                _log.info("prefix of %d tokens written to %s", len(tokens), path,
                          extra={"engine": {"prefix_file": str(path)}})
        _PREFIXES[self.model] = (key, kv)
        return kv
