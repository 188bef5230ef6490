"""Batch-independent sampling: Gumbel-max with counter-based noise.

A sampled token is ``argmax_v(logits[v] / T + g(key, step, v))`` where ``g`` is standard Gumbel
noise computed by hashing the row's key (from seed, question id and sample index), the step
(tokens generated so far) and the token id. No generator state is consumed, so the noise of a
sample does not depend on which other rows share its batch, on their order, or on how often the
run was interrupted: only floating-point differences in the logits themselves (different batch
shapes can round matrix products differently) can change a draw, and then only when the two best
perturbed scores lie within that rounding error of each other.

Gumbel-max draws exactly from ``softmax(logits / T)`` (up to the 24-bit resolution of the
uniforms). The noise is bounded, so only tokens within that bound of a row's best score can win;
the draw hashes and compares just those (hundreds to a few thousand of a 49k vocabulary at
T = 0.7 for a small model), which is the full-vocabulary answer: a token further below loses to
the best whatever the noise, and the noise of a token does not depend on which others are
looked at.

Known deviation, kept until the scheme's next version: the largest 24-bit uniform,
``(2**24 - 1 + 0.5) / 2**24``, rounds to exactly 1.0 in float32, so one token hash in 2**24 gets
infinite noise and wins whenever it is among its row's candidates. That moves about
``candidates * 2**-24`` of probability per draw (2e-5 at a few hundred candidates) towards the
candidates, on the order of the uniforms' resolution; removing it changes draws, so it waits for
a new :data:`SCHEME` (stored runs keep resuming under this one).
"""

from __future__ import annotations

import hashlib
import math

import torch

# Recorded with every run: a resumed run must draw with the same scheme to equal an
# uninterrupted one. Change it whenever a draw could change.
SCHEME = "gumbel-max/blake2b-counter/v1"

_MASK24 = 0xFFFFFF


def _s32(c: int) -> int:
    """An unsigned 32-bit constant as the signed int32 with the same bits."""
    return c - (1 << 32) if c >= 1 << 31 else c


_GOLDEN = _s32(0x9E3779B9)
_C1 = _s32(0x85EBCA6B)
_C2 = _s32(0xC2B2AE35)

# Uniforms are (k + 0.5) / 2**24, so the noise lies in [G_MIN, G_MAX]; a token whose scaled logit
# is more than that span (plus a rounding margin) below the row's best can never be drawn.
_G_MIN = -math.log(-math.log(0.5 / 2**24))
_G_MAX = -math.log(-math.log(1 - 0.5 / 2**24))
_SPAN = _G_MAX - _G_MIN + 1.0


def _fmix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int32 tensors (wrapping multiply, logical shifts)."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _C1
    x = x ^ ((x >> 13) & 0x7FFFF)
    x = x * _C2
    return x ^ ((x >> 16) & 0xFFFF)


def row_key(seed: int, question_id: str, sample: int) -> int:
    """The 32-bit key (as a signed int) of one sample's noise stream."""
    digest = hashlib.blake2b(f"{seed}\x00{question_id}\x00{sample}".encode(), digest_size=4)
    return _s32(int.from_bytes(digest.digest(), "little"))


def token_hashes(vocab_size: int, device) -> torch.Tensor:
    """(V,) int32 per-token hash, combined with each row-step key to give its noise."""
    ids = torch.arange(vocab_size, dtype=torch.int32, device=device)
    return _fmix32(ids * _GOLDEN)


def _gumbel(step_keys: torch.Tensor, hashes: torch.Tensor) -> torch.Tensor:
    """Gumbel noise for ``hashes`` (R, K) int32 under per-row ``step_keys`` (R,) int32."""
    x = _fmix32(hashes ^ step_keys[:, None])
    u = ((x >> 8) & _MASK24).float().add_(0.5).mul_(2.0**-24)
    return u.log_().neg_().log_().neg_()


def gumbel_argmax(
    scores: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor, hashes: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Draw one token per row from ``softmax(scores / temperature)``.

    Parameters
    ----------
    scores : (R, V) float32
        Logits (``-inf`` for banned tokens).
    temperature : float
        Only the candidate tokens' scores are divided by it (a few thousand of a row's V), and
        the result equals dividing all of them first: each division is the same float operation,
        and the candidate bound, taken before dividing, has a margin far above its rounding.
    keys : (R,) int32
        Per-sample keys from :func:`row_key`.
    steps : (R,) int
        Number of tokens each row has generated so far.
    hashes : (V,) int32
        :func:`token_hashes` for this vocabulary.

    Returns
    -------
    (R,) long
        The drawn token ids.
    """
    step_keys = _fmix32(keys + steps.to(torch.int32) * _GOLDEN)
    # Every token that can win lies within the noise span of its row's best score.
    best = scores.amax(-1, keepdim=True)  # (R, 1)
    r_i, v_i = (scores >= best - _SPAN * temperature).nonzero(as_tuple=True)  # (C,) each
    # Flat index_select, not scores[r_i, v_i]: the same values, ten times faster on a CPU.
    picked = scores.reshape(-1).index_select(0, r_i * scores.shape[-1] + v_i)
    noise = _gumbel(step_keys.index_select(0, r_i), hashes.index_select(0, v_i)[:, None])[:, 0]
    perturbed = picked / temperature + noise  # (C,)
    rows = scores.shape[0]
    top = perturbed.new_full((rows,), float("-inf")).scatter_reduce(0, r_i, perturbed, "amax")
    win = perturbed == top.index_select(0, r_i)
    # argmax's tie rule: the lowest token id among the maxima
    return v_i.new_full((rows,), scores.shape[-1]).scatter_reduce(0, r_i[win], v_i[win], "amin")


def filter_top_k_top_p(
    scores: torch.Tensor, top_k: int | None, top_p: float | None
) -> torch.Tensor:
    """Set scores outside the top-k / nucleus-p set to ``-inf`` (rows independent, vectorised).

    Parameters
    ----------
    scores : (R, V) float32
        Temperature-scaled logits; modified in place and returned.
    """
    if top_k is not None and top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]
        scores.masked_fill_(scores < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ordered, order = scores.sort(dim=-1, descending=True)
        mass_before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)
        drop = mass_before >= top_p  # the most likely token always stays (mass before it is 0)
        scores.scatter_(1, order, ordered.masked_fill(drop, float("-inf")))
    return scores
