"""Shared-prefix ("cascade") attention, plugged into transformers' attention registry.

For one decode step a row's query attends over the few-shot prefix that every row shares,
over its question's tokens (shared by the question's m samples) and over the row's own
generated keys. The parts are computed separately and merged exactly through their
log-sum-exps: with ``a_i`` the scaled scores against part ``i`` and ``m`` their common maximum,

    o = sum_i exp(a_i - m) V_i / sum_i sum exp(a_i - m),

which is softmax attention over the concatenation ``[prefix ; question ; own keys]``. The
prefix part for all rows is one matrix product per KV head, so the prefix keys and values are
stored once and read once per step for the whole batch (Hydragen, Juravsky et al. 2024;
FlashInfer's cascade attention); a question's part is one product for its rows, so its keys
are read once per step per question, not per sample. This is what lets the engine run many
rows of an 8-shot prompt at once: sampling m responses per question is the cost centre of the
protocol (arXiv 2608.07341, §4).

The function is registered under :data:`NAME`. It computes cascade attention when the forward
call carries the engine's :class:`~zerogap.engine.cache.RowCache` as ``zerogap_rows``, and
plain SDPA otherwise (the prefix and question encodes, which run on an ordinary cache, and the
row cache's dense layers).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import NamedTuple

import torch

NAME = "zerogap_prefix"
ROWS_KWARG = "zerogap_rows"


class Questions(NamedTuple):
    """The middle level of the cascade: keys that a group of rows shares (a question's tokens,
    read once for its m samples). See :class:`~zerogap.engine.cache.Layout` for the layout."""

    keys: torch.Tensor  # (S, Hkv, L, D): one slot per group
    values: torch.Tensor  # (S, Hkv, L, D)
    mask: torch.Tensor  # (S, 1, 1, L) additive: -inf past each slot's question
    row_slot: torch.Tensor  # (R,) long: each row's place in the padded (S * members) layout
    members: int  # most rows of one group


def key_mask(lengths: torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, 1, width) additive mask: 0 over the first ``lengths[b]`` keys, ``-inf`` after
    (the flash kernel takes an additive mask in the queries' dtype; it broadcasts over heads
    and queries)."""
    hidden = torch.arange(width, device=lengths.device) >= lengths[:, None]
    mask = torch.zeros(hidden.shape, dtype=dtype, device=lengths.device)
    return mask.masked_fill_(hidden, float("-inf"))[:, None, None]


def cascade(query: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor,
            own_k: torch.Tensor, own_v: torch.Tensor, own_mask: torch.Tensor, scaling: float,
            questions: Questions | None = None) -> torch.Tensor:
    """Attention of each row's queries over the shared prefix, its group's question keys and
    the row's own keys: softmax over their concatenation, merged exactly from the parts'
    log-sum-exps.

    Parameters
    ----------
    query : (R, H, n, D)
        Queries after RoPE; head ``h`` uses KV head ``h // (H / Hkv)`` (grouped-query attention).
        All ``n`` queries of a row see the same keys (the engine decodes one token per row).
    prefix_k, prefix_v : (1, Hkv, P, D)
        The shared prefix (P may be 0).
    own_k, own_v : (R, Hkv, W, D)
        Each row's own keys and values, left-aligned; slots past a row's length hold stale
        values that ``own_mask`` hides.
    own_mask : (R, 1, 1, W)
        Additive mask (:func:`key_mask`); every row sees at least one own key.
    scaling : float
        Score scale, usually ``D ** -0.5``.
    questions : Questions, optional
        The middle level; every group sees at least one of its keys.

    Returns
    -------
    (R, n, H, D)
        In ``query``'s dtype; the layout transformers' attention functions return.
    """
    rows, heads, n, dim = query.shape
    kv_heads = own_k.shape[1]
    per_row = heads // kv_heads * n
    q = query.reshape(rows, kv_heads, per_row, dim)
    shared = []
    if questions is not None:
        shared.append(_question_part(q, questions, scaling))
    if prefix_k.shape[2]:
        # All rows' queries of one KV head form one (R*G*n, D) matrix against that head's keys.
        q_all = q.transpose(0, 1).reshape(1, kv_heads, rows * per_row, dim)
        o_p, lse_p = _attend_with_lse(q_all, prefix_k, prefix_v, scaling)
        shared.append((o_p[0].view(kv_heads, rows, per_row, dim).transpose(0, 1),
                       lse_p[0].view(kv_heads, rows, per_row).transpose(0, 1)))
    out = _own_part(q, own_k, own_v, own_mask, scaling, shared)
    return out.reshape(rows, heads, n, dim).transpose(1, 2).to(query.dtype)


def _own_part(q: torch.Tensor, own_k: torch.Tensor, own_v: torch.Tensor, own_mask: torch.Tensor,
              scaling: float, shared: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """The rows' own part of the cascade, merged with the ``shared`` parts in the same softmax.

    A part already attended to enters as one more key: its log-sum-exp is that key's score and
    its normalised output the key's value, so the softmax over ``[own scores ; lse_1 ; ...]``
    weighs it exactly as the softmax over all the keys it summarises would. ``q`` (R, Hkv, G*n,
    D); ``shared`` holds ((R, Hkv, G*n, D) output, (R, Hkv, G*n) float32 log-sum-exp) pairs;
    returns (R, Hkv, G*n, D) float32.

    Explicit batched products, not the CPU flash kernel: that kernel pays per row and head,
    which for a few queries against a few dozen keys cost two to three times these products
    plus a separate merge (docs/engine.md, "Decode"). On a CPU the products
    run in the cache's dtype (bfloat16 where ``--dtype auto`` chose it because the CPU computes
    it natively; scores rounded as in transformers' eager attention) and the softmax in float32;
    elsewhere in float32, like the other parts there (:func:`_attend_with_lse_explicit`).
    """
    width = own_k.shape[2]
    if q.device.type != "cpu":
        q, own_k, own_v = q.float(), own_k.float(), own_v.float()
    scores = torch.matmul(q, own_k.transpose(-1, -2)).float().mul_(scaling).add_(own_mask)
    if shared:
        scores = torch.cat([scores, *(lse[..., None] for _, lse in shared)], dim=-1)
    probs = scores.softmax(-1)
    out = torch.matmul(probs[..., :width].to(own_v.dtype), own_v).float()
    for i, (o, _) in enumerate(shared):
        out.addcmul_(o, probs[..., width + i, None])
    return out


def _question_part(q: torch.Tensor, questions: Questions,
                   scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each group's rows attend to their question's keys together: the rows' queries are
    placed in a padded (slots, members) layout, one (members*G*n, D) matrix per group and KV
    head, and read back per row. Padding queries are zeros, and their results are never read."""
    rows, kv_heads, per_row, dim = q.shape
    slots, members = questions.keys.shape[0], questions.members
    padded = q.new_zeros(slots * members, kv_heads, per_row, dim)
    padded.index_copy_(0, questions.row_slot, q)
    padded = (padded.view(slots, members, kv_heads, per_row, dim).transpose(1, 2)
              .reshape(slots, kv_heads, members * per_row, dim))
    o, lse = _attend_with_lse(padded, questions.keys, questions.values, scaling, questions.mask)
    o = (o.view(slots, kv_heads, members, per_row, dim).transpose(1, 2)
         .reshape(slots * members, kv_heads, per_row, dim).index_select(0, questions.row_slot))
    lse = (lse.view(slots, kv_heads, members, per_row).transpose(1, 2)
           .reshape(slots * members, kv_heads, per_row).index_select(0, questions.row_slot))
    return o, lse


def _attend_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float,
                     mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of (B, Hkv, L, D) queries over (B, Hkv, S, D) keys: the normalised output
    (B, Hkv, L, D) and the float32 log-sum-exp of the scores (B, Hkv, L).

    ``mask`` (B, 1, 1, S) is additive (:func:`key_mask`). On a CPU this is PyTorch's
    flash-attention kernel, which returns the log-sum-exp and reads the keys in cache-sized
    blocks (several times faster than the explicit product here, and more so in bfloat16);
    elsewhere the explicit product in float32.
    """
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=mask, scale=scaling)
    return _attend_with_lse_explicit(q, k, v, scaling, mask)


def _attend_with_lse_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float,
                              mask: torch.Tensor | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_attend_with_lse` as explicit float32 products, for devices without PyTorch's
    CPU flash kernel (a GPU). The output is float32, which the cascade's merge reads anyway."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)).mul_(scaling)
    if mask is not None:
        scores += mask
    lse = scores.logsumexp(-1)
    return torch.matmul(scores.sub_(lse[..., None]).exp_(), v.float()), lse


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The registered attention function (transformers' calling convention)."""
    rows = kwargs.pop(ROWS_KWARG, None)
    # A dense layer (a patch source's, see zerogap.engine.cache) hands over its whole keys.
    if rows is None or rows.layers[module.layer_idx].dense:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      scaling=scaling, dropout=dropout, **kwargs)
    layer = rows.layers[module.layer_idx]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    layout = rows.layout(query.dtype)
    questions = None
    if layout.group_slots:
        questions = Questions(*layer.questions(layout), layout.group_mask, layout.row_slot,
                              layout.members)
    out = cascade(query, layer.prefix_k, layer.prefix_v, key, value, layout.own_mask, scale,
                  questions)
    return out, None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, _attention)
        # Encodes on an ordinary cache need SDPA's causal mask; on the row cache, decode steps
        # without padding get none (SDPA's own shortcut), and the cascade ignores the mask.
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def check_supported(model) -> None:
    """Raise ``ValueError`` in one line, naming the architecture, unless every layer of
    ``model`` is plain full attention reached through transformers' attention registry."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = base.config.get_text_config(decoder=True)
    arch = (cfg.architectures or [type(base).__name__])[0]
    problem = None
    kinds = sorted(set(getattr(cfg, "layer_types", None) or ["full_attention"]))
    if not getattr(base, "_supports_attention_backend", False):
        problem = "does not route attention through transformers' AttentionInterface"
    elif kinds != ["full_attention"]:
        problem = f"has {', '.join(k for k in kinds if k != 'full_attention')} layers"
    elif (getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)
          and not getattr(cfg, "layer_types", None)):
        problem = f"uses a sliding window of {cfg.sliding_window}"
    elif getattr(cfg, "attn_logit_softcapping", None):
        problem = "caps its attention logits"
    if problem:
        raise ValueError(f"the sampling engine needs full attention in every layer; {arch} "
                         f"{problem}")


def cache_kwarg(module) -> str:
    """The keyword under which ``module.forward`` (a causal LM or its decoder) takes its KV
    cache: ``cache`` in the transformers releases that renamed it, ``past_key_values`` in
    earlier ones (5.19 and the 4.x line among them)."""
    return ("cache" if "cache" in inspect.signature(module.forward).parameters
            else "past_key_values")


@contextlib.contextmanager
def prefix_attention(model) -> Iterator[None]:
    """Switch ``model`` to the cascade attention for the ``with`` block, then restore it."""
    _register()
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved = base.config._attn_implementation
    base.set_attn_implementation(NAME)
    try:
        yield
    finally:
        base.set_attn_implementation(saved)
