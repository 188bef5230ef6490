"""Readouts: a run's stored samples -> per-question counts ``(correct, samples)``.

The solve probability of a question is ``r(q) = c_q / m_q`` (arXiv 2608.07341, §3.1). Which
samples count depends on the readout kind each strategy carries, recorded in the run store as
``readout``; the kinds are shapes, and name no strategy:

============  ===============================================================================
kind          counts of one question
============  ===============================================================================
plain         correct samples of all samples
NAME-kept     correct samples among those whose statistic ``NAME_kept`` is true, of those kept;
              ``(0, m)`` when none is kept (TED's ``ted-kept``: its readout is then 0; Dong et
              al., 2024, as summarised in the paper's §5)
zero          ``(0, m)``: a synthetic reference whose readout is 0 for every question (All-Zero)
============  ===============================================================================

Torch-free: reading, scoring and reporting a run never load a model library.

>>> question_counts("ted-kept", [True, True, False], [{"ted_kept": k} for k in (1, 0, 1)])
(1, 2)
>>> question_counts("zero", [True, True], [{}, {}])
(0, 2)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from zerogap.errors import StoreError
from zerogap.store import LEGACY_READOUTS, RunStore

_KEPT = re.compile(r"([a-z][a-z0-9]*(?:_[a-z0-9]+)*)-kept")


def kept_statistic(kind: str) -> str | None:
    """The per-sample statistic that marks a kept sample under ``kind`` (None if not a kept kind).

    >>> kept_statistic("ted-kept"), kept_statistic("plain")
    ('ted_kept', None)
    """
    match = _KEPT.fullmatch(kind)
    return None if match is None else f"{match.group(1)}_kept"


def check_readout(kind: str) -> str:
    """``kind`` if it is a readout kind, else a :class:`StoreError` naming the known shapes."""
    if kind in ("plain", "zero") or kept_statistic(kind) is not None:
        return kind
    raise StoreError(f"unknown readout kind {kind!r}; known: plain, zero, NAME-kept")


def question_counts(kind: str, correct: Sequence[bool], stats: Sequence[Mapping[str, Any]]
                    ) -> tuple[int, int]:
    """One question's ``(correct, samples)`` under readout ``kind`` (see the module docstring)."""
    if check_readout(kind) == "plain":
        return sum(bool(c) for c in correct), len(correct)
    if kind == "zero":
        return 0, max(len(correct), 1)
    key = str(kept_statistic(kind))
    try:
        kept = [bool(s[key]) for s in stats]
    except KeyError:
        raise StoreError(f"{kind} counts need each sample's {key!r} statistic") from None
    n_kept = sum(kept)
    if n_kept == 0:
        return 0, len(correct)
    return sum(k and bool(c) for k, c in zip(kept, correct, strict=True)), n_kept


def readout_of(config: Mapping[str, Any]) -> str:
    """The readout kind a stored run configuration declares (or implies, for older stores)."""
    if "readout" in config:
        return str(config["readout"])
    return LEGACY_READOUTS.get(str(config.get("strategy", "identity")), "plain")


def run_counts(store: RunStore, limit: Mapping[str, int] | None = None
               ) -> list[dict[str, Any]]:
    """Per-question ``{"id", "correct", "samples", "first", "truncated"}`` of a run, under its
    readout; with ``limit`` (question id -> m_q), of each listed question's first m_q samples
    only (an allocated study scores the m_q it planned, whatever a run holds beyond them).

    ``correct / samples`` is the question's readout; ``first`` grades one response, the
    one-draw readout G-AP uses: sample 0, or under a ``NAME-kept`` kind the first sample kept (0
    when none is kept, as its readout), and 0 under ``zero``; ``truncated`` counts the samples
    among those ``samples`` that were cut at the token limit (graded on what they wrote, so a
    run whose answers do not fit its limit reads as wrong). Questions in stored order. This is
    ``zerogap score``'s counts shape, and what ``zerogap runs show`` summarises.
    """
    kind = readout_of(store.config())
    grouped: dict[str, list] = {}
    for row in store.samples():
        if limit is None or row.sample < limit.get(row.question_id, row.sample + 1):
            grouped.setdefault(row.question_id, []).append(row)
    out = []
    for qid, rows in grouped.items():
        correct, samples = question_counts(kind, [r.correct for r in rows],
                                           [r.stats for r in rows])
        first = _first_correct(kind, rows)
        out.append({"id": qid, "correct": correct, "samples": samples, "first": first,
                    "truncated": sum(r.finish == "length" for r in _counted(kind, rows))})
    return out


def _counted(kind: str, rows: Sequence[Any]) -> Sequence[Any]:
    """The samples a question's readout counts: under a ``NAME-kept`` kind the kept ones (all
    of them when none is kept, as :func:`question_counts` counts), else every sample."""
    key = kept_statistic(kind)
    kept = [r for r in rows if key is not None and r.stats.get(key)]
    return kept or rows


def _first_correct(kind: str, rows: Sequence[Any]) -> int:
    """The single-draw readout of one question: sample 0's grade; under a ``NAME-kept`` kind the
    first kept sample's (0 when none is kept, as its readout); 0 under ``zero``."""
    if kind == "zero":
        return 0
    key = kept_statistic(kind)
    if key is not None:
        kept = [r for r in rows if r.stats.get(key)]
        return int(kept[0].correct) if kept else 0
    return int(rows[0].correct)
