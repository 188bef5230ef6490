"""TED (Dong et al., 2024; ``docs/baselines.md`` §1): drop samples near the greedy output.

For one question: the greedy output ``g`` and ``m`` samples, each as token ids of its stripped
response text (re-encoded without special tokens). Samples are visited in generation order; a
sample is dropped if its text equals an already kept one (exact duplicate), or if the token
edit distance between ``g[:L]`` (``L = 100``) and the sample truncated to that same length is at
most ``tau`` (absolute edits, default 2). The readout is correct kept / kept, and 0 when nothing
is kept; the greedy output itself is never scored.

Adaptation (docs/baselines.md §1): on GSM8K the distance runs over the chain-of-thought response;
samples are drawn at the protocol's temperature (0.7, like every strategy in the paper's
comparison) rather than TED's original 0.8.

``tau`` counts absolute edits, set for GSM8K-length answers; on shorter answers the same 2 edits
are a larger share of the text. :func:`scaled_tau` carries it to another task by its solution
length (:mod:`zerogap.decoding.length_scale`), the rule of the ``ted-scaled`` ablation row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rapidfuzz.distance import Levenshtein

from zerogap.config import JsonConfig
from zerogap.decoding.length_scale import length_scaled

CODE_TAU = 2  # TED's released code: samples within 2 token edits of the greedy output drop


@dataclass(frozen=True)
class TEDConfig(JsonConfig):
    """TED's parameters."""

    tau: int = field(default=CODE_TAU, metadata={
        "help": "drop samples within this many token edits", "min": 0})
    max_tokens: int = field(default=100, metadata={"help": "greedy prefix length compared",
                                                   "min": 1})
    dedup: bool = field(default=True, metadata={"help": "drop exact duplicates of kept samples"})


def scaled_tau(solution_words: float) -> int:
    """TED's ``tau`` for a task whose reference solutions average ``solution_words`` words:
    the code's 2 edits scaled by length against GSM8K's, at least 0. At 0 only samples whose
    first tokens copy the greedy output (and duplicates of kept samples) drop.

    Examples
    --------
    >>> scaled_tau(54.8), scaled_tau(16.2), scaled_tau(10.0), scaled_tau(110.0)
    (2, 1, 0, 4)
    """
    return length_scaled(CODE_TAU, solution_words, minimum=0)


def ted_keep(
    greedy: Sequence[int],
    samples: Sequence[Sequence[int]],
    texts: Sequence[str] | None = None,
    *,
    tau: int = 2,
    max_tokens: int = 100,
    dedup: bool = True,
) -> list[bool]:
    """Which samples TED keeps, in generation order.

    Parameters
    ----------
    greedy : sequence of int
        Token ids of the greedy response.
    samples : sequence of sequences of int, length m
        Token ids of each sampled response.
    texts : sequence of str, length m, optional
        The responses' texts, for exact-duplicate removal; default: the token sequences.
    tau, max_tokens, dedup
        See :class:`TEDConfig`.

    Returns
    -------
    list of bool, length m

    Examples
    --------
    >>> ted_keep([1, 2, 3, 4], [[1, 2, 3, 9], [5, 6, 7, 8], [5, 6, 7, 8], [5, 6]], tau=1)
    [False, True, False, True]
    """
    if texts is not None and len(texts) != len(samples):
        raise ValueError(f"TED: {len(samples)} samples but {len(texts)} texts")
    keys = texts if texts is not None else [tuple(s) for s in samples]
    ref = list(greedy[:max_tokens])
    kept_keys: set = set()
    keep = []
    for sample, key in zip(samples, keys, strict=True):
        near = Levenshtein.distance(ref, list(sample[: len(ref)]), score_cutoff=tau) <= tau
        duplicate = dedup and key in kept_keys
        keep.append(not (near or duplicate))
        if keep[-1]:
            kept_keys.add(key)
    return keep


def ted_readout(keep: Sequence[bool], correct: Sequence[bool]) -> float:
    """Correct kept / kept; 0.0 when no sample is kept.

    Examples
    --------
    >>> ted_readout([True, False, True], [True, True, False])
    0.5
    >>> ted_readout([False, False], [True, True])
    0.0
    """
    if len(keep) != len(correct):
        raise ValueError(f"TED: {len(keep)} keep flags but {len(correct)} grades")
    kept = sum(bool(k) for k in keep)
    hits = sum(bool(k) and bool(c) for k, c in zip(keep, correct, strict=True))
    return hits / kept if kept else 0.0
