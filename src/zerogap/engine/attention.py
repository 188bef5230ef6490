"""Shared-prefix ("cascade") attention, plugged into transformers' attention registry.

For one decode step a row's query attends over the few-shot prefix that every row shares and
over the row's own keys (its question and generated tokens). The two parts are computed
separately and merged exactly through their maxima and log-sum-exp: with ``a_p`` and ``a_s``
the scaled scores against the prefix and the row's own keys and ``m`` their common maximum,

    o = (exp(a_p - m) V_p + exp(a_s - m) V_s) / (sum exp(a_p - m) + sum exp(a_s - m)),

which is softmax attention over the concatenation ``[prefix ; own keys]``. The prefix half for
all rows is one matrix product per KV head, so the prefix keys and values are stored once and
read once per step for the whole batch (Hydragen, Juravsky et al. 2024; FlashInfer's cascade
attention). This is what lets the engine run many rows of an 8-shot prompt at once: sampling m
responses per question is the cost centre of the protocol (arXiv 2608.07341, §4).

The function is registered under :data:`NAME`. It computes cascade attention when the forward
call carries the engine's :class:`~zerogap.engine.cache.RowCache` as ``zerogap_rows``, and
plain SDPA otherwise (the prefix and question encodes, which run on an ordinary cache).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

NAME = "zerogap_prefix"
ROWS_KWARG = "zerogap_rows"


def cascade(query: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor,
            own_k: torch.Tensor, own_v: torch.Tensor, visible: torch.Tensor,
            scaling: float) -> torch.Tensor:
    """Attention of each row's queries over the shared prefix and the row's own keys.

    Parameters
    ----------
    query : (R, H, n, D)
        Queries after RoPE; head ``h`` uses KV head ``h // (H / Hkv)`` (grouped-query attention).
    prefix_k, prefix_v : (1, Hkv, P, D)
        The shared prefix (P may be 0).
    own_k, own_v : (R, Hkv, W, D)
        Each row's own keys and values, left-aligned; slots at or past a row's length hold
        stale values that ``visible`` masks.
    visible : (R, n) long
        How many of its own slots query ``i`` of row ``r`` sees (causal, at least 1).
    scaling : float
        Score scale, usually ``D ** -0.5``.

    Returns
    -------
    (R, n, H, D)
        In ``query``'s dtype; the layout transformers' attention functions return.
    """
    rows, heads, n, dim = query.shape
    kv_heads, width, prefix_len = own_k.shape[1], own_k.shape[2], prefix_k.shape[2]
    group = heads // kv_heads
    q = query.reshape(rows, kv_heads, group * n, dim)
    # The row's own part (short: question and generated tokens): the rows are the batch.
    hidden = torch.arange(width, device=q.device) >= visible[:, :, None]  # (R, n, W)
    if n > 1:
        hidden = hidden[:, None].expand(rows, group, n, width).reshape(rows, group * n, width)
    o_s, lse_s = _attend_with_lse(q, own_k, own_v, scaling, hidden[:, None])
    if prefix_len == 0:
        return o_s.reshape(rows, heads, n, dim).transpose(1, 2).to(query.dtype)
    # All rows' queries of one KV head form one (R*G*n, D) matrix against that head's keys.
    q_all = q.transpose(0, 1).reshape(1, kv_heads, rows * group * n, dim)
    o_p, lse_p = _attend_with_lse(q_all, prefix_k, prefix_v, scaling)
    o_p = o_p[0].view(kv_heads, rows, group * n, dim).transpose(0, 1)
    lse_p = lse_p[0].view(kv_heads, rows, group * n, 1).transpose(0, 1)
    lse_s = lse_s[..., None]
    top = torch.maximum(lse_p, lse_s)
    w_p, w_s = (lse_p - top).exp_(), (lse_s - top).exp_()
    out = (o_p.float() * w_p + o_s.float() * w_s).div_(w_p + w_s)
    return out.reshape(rows, heads, n, dim).transpose(1, 2).to(query.dtype)


def _attend_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float,
                     hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of (B, Hkv, L, D) queries over (B, Hkv, S, D) keys: the normalised output
    (B, Hkv, L, D) and the float32 log-sum-exp of the scores (B, Hkv, L).

    ``hidden`` (B, 1, L, S) bool marks keys a query must not see (every query sees at least
    one). On a CPU this is PyTorch's flash-attention kernel, which returns the log-sum-exp and
    reads the keys in cache-sized blocks (several times faster than the explicit product here,
    and more so in bfloat16); elsewhere the explicit product in float32.
    """
    if q.device.type == "cpu":
        mask = None
        if hidden is not None:  # the kernel takes an additive mask in the queries' dtype
            mask = torch.zeros(hidden.shape, dtype=q.dtype).masked_fill_(hidden, float("-inf"))
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=mask, scale=scaling)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)).mul_(scaling)
    if hidden is not None:
        scores.masked_fill_(hidden, float("-inf"))
    lse = scores.logsumexp(-1)
    return torch.matmul(scores.sub_(lse[..., None]).exp_(), v.float()), lse


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The registered attention function (transformers' calling convention)."""
    rows = kwargs.pop(ROWS_KWARG, None)
    if rows is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      scaling=scaling, dropout=dropout, **kwargs)
    layer = rows.layers[module.layer_idx]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = cascade(query, layer.prefix_k, layer.prefix_v, key, value, rows.visible, scale)
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
