"""Where a response ends: its end-of-sequence tokens, which tokens can complete a stop string
(so that only rows that draw one have their text's tail decoded), and :class:`Stopping`, which
finds the rows a decode step finished (step 4 of :mod:`zerogap.engine.hf`)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from zerogap.engine.base import Generation


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



class Stopping:
    """Which rows of a batch a step finished, and the text each finished row leaves.

    ``eos``: the ids that end a response; ``stop``: strings that end it (the text is cut just
    before them); ``max_new``: the token limit per row.
    """

    def __init__(self, tokenizer, eos: Sequence[int], stop: Sequence[str], max_new: int):
        self.tokenizer, self.max_new = tokenizer, max_new
        self.eos = frozenset(eos)
        self.stop = tuple(s for s in stop if s)
        # Enough tail to hold any stop string however its characters split into tokens.
        self.tail = 2 * max((len(s) for s in self.stop), default=0) + 4
        self.tokens = stop_tokens(tokenizer, self.stop)

    def advance(self, chosen: Sequence[int], entropy: Sequence[float] | None,
                host_tokens: list[list[int]], host_entropy: list[list[float]]) -> dict[int, str]:
        """Append each row's new token on the host; return {row: finish reason} for rows done.

        Only rows whose newest token can complete a stop string have their tail decoded.
        """
        finished = {}
        stop_rows = []
        for r, t in enumerate(chosen):
            if entropy is not None:
                host_entropy[r].append(entropy[r])
            if t in self.eos:
                finished[r] = "eos"
                continue
            host_tokens[r].append(t)
            if t in self.tokens:
                stop_rows.append(r)
            if len(host_tokens[r]) >= self.max_new:
                finished[r] = "length"
        if stop_rows:
            tails = self.tokenizer.batch_decode([host_tokens[r][-self.tail:] for r in stop_rows])
            for r, tail in zip(stop_rows, tails, strict=True):
                if any(s in tail for s in self.stop):
                    finished[r] = "stop"
        return finished

    def finish(self, tokens: list[int], how: str, entropies, stats) -> Generation:
        """The :class:`Generation` a row that ended ``how`` leaves."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if how == "stop":
            text = text[: min(text.find(s) for s in self.stop if s in text)]
        return Generation(list(tokens), text, how, entropies, stats)
