"""Where a response ends: its end-of-sequence tokens, and which tokens can complete a stop
string (so that only rows that draw one have their text's tail decoded)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence


def eos_ids(model, tokenizer) -> list[int]:
    """The token ids that end a response: the tokenizer's EOS and the generation config's."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return sorted(i for i in ids if i is not None)


def stop_tokens(tokenizer, stop: Sequence[str]) -> frozenset[int]:
    """Token ids whose text can complete one of ``stop`` (a superset: only rows that draw one
    of them have their tail decoded).

    A token completes ``s`` when ``s`` lies in its text or its text starts with a non-empty
    suffix of ``s``. The text is tried as decoded alone, with a leading space (tokenizers
    that drop a word's leading space when it stands alone) and without its leading spaces (a
    decode that cleans up the space before punctuation); tokens that decode to a partial
    character (U+FFFD) count as candidates too.
    """
    if not stop:
        return frozenset()
    # A run calls the engine once per strategy with the same tokenizer and stop strings, and
    # decoding a 49k vocabulary token by token takes a few tenths of a second: keep the answer.
    known = _STOP_TOKENS.setdefault(tokenizer, {})
    key = (len(tokenizer), tuple(stop))  # tokens added to the tokenizer make a new answer
    if key not in known:
        known[key] = _find_stop_tokens(tokenizer, key[1])
    return known[key]


_STOP_TOKENS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _find_stop_tokens(tokenizer, stop: tuple[str, ...]) -> frozenset[int]:
    single = [[i] for i in range(len(tokenizer))]
    backend = getattr(tokenizer, "_tokenizer", None)  # a fast tokenizer's Rust core
    texts = (backend.decode_batch(single, skip_special_tokens=False) if backend is not None
             else tokenizer.batch_decode(single))

    # Every non-empty proper suffix of every stop string, as one tuple: ``str.startswith`` tests
    # them all in one call (the scan runs over the whole vocabulary three times).
    suffixes = tuple(s[-k:] for s in stop for k in range(1, len(s)))

    def completes(text: str) -> bool:
        return "\ufffd" in text or text.startswith(suffixes) or any(s in text for s in stop)

    return frozenset(i for i, t in enumerate(texts)
                     if completes(t) or completes(" " + t) or completes(t.lstrip()))

