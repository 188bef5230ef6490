"""Readouts: a run's stored samples -> per-question counts ``(correct, samples)``.

The solve probability of a question is ``r(q) = c_q / m_q`` (arXiv 2608.07341, §3.1). Which
samples count depends on the strategy's readout kind, recorded in the run store as ``readout``:

==========  =================================================================================
kind        counts of one question
==========  =================================================================================
plain       correct samples of all samples
ted-kept    correct samples among those TED kept, of the kept ones; ``(0, m)`` when none is kept
            (TED's readout is then 0; Dong et al., 2024, as summarised in the paper's §5)
zero        ``(0, m)``: the All-Zero reference, whose readout is 0 for every question
==========  =================================================================================

Torch-free: reading, scoring and reporting a run never load a model library.

>>> question_counts("ted-kept", [True, True, False], [{"ted_kept": k} for k in (1, 0, 1)])
(1, 2)
>>> question_counts("zero", [True, True], [{}, {}])
(0, 2)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from zerogap.errors import StoreError
from zerogap.store import RunStore

Readout = Literal["plain", "ted-kept", "zero"]
READOUTS: tuple[str, ...] = get_args(Readout)

# Stores written before the readout kind was recorded name only their strategy; these are the
# built-in strategies whose readout is not plain (a test checks this against the registry).
LEGACY_READOUTS = {"ted": "ted-kept", "all-zero": "zero"}


def question_counts(kind: str, correct: Sequence[bool], stats: Sequence[Mapping[str, Any]]
                    ) -> tuple[int, int]:
    """One question's ``(correct, samples)`` under readout ``kind`` (see the module docstring)."""
    if kind == "plain":
        return sum(bool(c) for c in correct), len(correct)
    if kind == "zero":
        return 0, max(len(correct), 1)
    if kind == "ted-kept":
        try:
            kept = [bool(s["ted_kept"]) for s in stats]
        except KeyError:
            raise StoreError("TED counts need each sample's 'ted_kept' statistic") from None
        n_kept = sum(kept)
        if n_kept == 0:
            return 0, len(correct)
        return sum(k and bool(c) for k, c in zip(kept, correct, strict=True)), n_kept
    raise StoreError(f"unknown readout kind {kind!r}; known: {', '.join(READOUTS)}")


def readout_of(config: Mapping[str, Any]) -> str:
    """The readout kind a stored run configuration declares (or implies, for older stores)."""
    if "readout" in config:
        return str(config["readout"])
    return LEGACY_READOUTS.get(str(config.get("strategy", "identity")), "plain")


def run_counts(store: RunStore) -> list[dict[str, Any]]:
    """Per-question ``{"id", "correct", "samples", "first"}`` of a run, under its readout.

    ``correct / samples`` is the question's readout; ``first`` grades one response, the
    one-draw readout G-AP uses: sample 0, or under ``ted-kept`` the first sample TED kept (0 when
    it kept none, as its readout), and 0 under ``zero``. Questions in stored order. This is
    ``zerogap score``'s counts shape, and what ``zerogap runs show`` summarises.
    """
    kind = readout_of(store.config())
    grouped: dict[str, list] = {}
    for row in store.samples():
        grouped.setdefault(row.question_id, []).append(row)
    out = []
    for qid, rows in grouped.items():
        correct, samples = question_counts(kind, [r.correct for r in rows],
                                           [r.stats for r in rows])
        first = _first_correct(kind, rows)
        out.append({"id": qid, "correct": correct, "samples": samples, "first": first})
    return out


def _first_correct(kind: str, rows: Sequence[Any]) -> int:
    """The single-draw readout of one question: sample 0's grade; under ``ted-kept`` the
    first kept sample's (0 when TED kept none, as its readout); 0 under ``zero``."""
    if kind == "zero":
        return 0
    if kind == "ted-kept":
        kept = [r for r in rows if r.stats.get("ted_kept")]
        return int(kept[0].correct) if kept else 0
    return int(rows[0].correct)
