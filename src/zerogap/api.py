"""The Python API of ``zerogap score``: load any input, align by question id, score.

Three functions, ``from zerogap.api import load, align, score``, do what the command does, with
its defaults, and need numpy only (the core never imports torch):

* :func:`load` reads one input, whatever it is: a counts file (JSONL or CSV,
  :mod:`zerogap.io.counts`), a run directory (``zerogap sample --out``, read under its
  strategy's readout), or an lm-evaluation-harness sample log or the ``--output_path`` folder
  holding one (its raw responses graded with ``grading``).
* :func:`align` reorders inputs to one question order, for the array functions of
  :mod:`zerogap.metrics` and :mod:`zerogap.uncertainty`, which pair questions by position:
  inputs whose question sets differ are refused in one line naming the file and the ids.
* :func:`score` is ``zerogap score``: every metric of arXiv 2608.07341 §3 with its interval, the
  noise floor, the restoration verdicts and the paired tests, as a
  :class:`~zerogap.analysis.score.Scorecard`. Its settings default to the command's (B from
  the number of questions, :func:`~zerogap.uncertainty.choose_bins`, not the paper's 50), so
  the numbers are the command's on the same files.

A wrong input raises :class:`~zerogap.errors.ZerogapError` (a ``DataError`` naming the file
and line, a ``UserError`` for a bad setting), with the one-line message the command prints.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from zerogap.analysis.score import Scorecard, ScoredRun, ScoreSettings, load_input
from zerogap.analysis.score import score as score_card
from zerogap.errors import UserError
from zerogap.io.counts import QuestionCounts

__all__ = ["align", "load", "score"]


def load(path: str | os.PathLike, *, name: str | None = None,
         grading: str = "anchor") -> ScoredRun:
    """One scoring input from ``path`` (see the module docstring for what it may be), named
    ``name`` (default: the file's stem or the folder's name, as ``--mitigated NAME=PATH``
    names it). ``grading`` grades an lm-evaluation-harness log's raw responses (``zerogap
    score --grading``). ``.counts`` holds the per-question arrays (``ids``, ``correct``,
    ``samples``, ``first``), in the input's order."""
    path = Path(path)
    return load_input(name or (path.name if path.is_dir() else path.stem), path,
                      lmeval_grading=grading)


def align(reference: ScoredRun | QuestionCounts,
          *others: ScoredRun | QuestionCounts) -> tuple[QuestionCounts, ...]:
    """The counts of ``reference`` and of every one of ``others``, each reordered to
    ``reference``'s question order: position i of every array is then the same question.

    Raises :class:`~zerogap.errors.DataError` when a question set differs from the
    reference's, naming the file and how many ids are missing or extra.
    """
    first = _counts(reference)
    return (first, *(_counts(other).aligned_to(first) for other in others))


def score(clean: ScoredRun, *mitigated: ScoredRun, references: tuple[ScoredRun, ...] = (),
          leaked: Collection[str] | None = None, **settings: Any) -> Scorecard:
    """``zerogap score --clean CLEAN --mitigated NAME=... ...``: each of ``mitigated`` (named
    by :func:`load`) scored against ``clean``, questions matched by id whatever their order.

    ``settings`` are :class:`~zerogap.analysis.score.ScoreSettings` fields (``bins``,
    ``resamples``, ``level``, ``noise_sims``, ``seed``, ``margin``, ``paired_null``), each
    defaulting to the command's; ``references`` are scored but never ranked (the command's
    reference rows); ``leaked`` (question ids) adds the leaked and unleaked sub-cards.
    """
    known = set(ScoreSettings.__dataclass_fields__)
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UserError(f"score() has no setting {unknown[0]!r}; known: "
                        f"{', '.join(sorted(known))}")
    return score_card(clean, list(mitigated), replace(ScoreSettings(), **settings),
                      references=references, leaked=leaked)


def _counts(item: ScoredRun | QuestionCounts) -> QuestionCounts:
    return item.counts if isinstance(item, ScoredRun) else item
