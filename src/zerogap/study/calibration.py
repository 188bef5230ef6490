"""Which questions of a leaked/unleaked split a setting evaluates, and which locate and score
its shortcut neurons (issue 47 item 4; the baseline of arXiv 2608.07341 §5).

The authors locate shortcut neurons on the test set they then evaluate, leaked half included
(docs/baselines.md §3): a selection made in sample. Where the split holds questions past the
ones evaluated, on both sides, the neurons are located and scored on those instead, half leaked
and half not, leaked by the same recipe as the evaluated leaked items; otherwise the evaluated
questions are used, as the authors do, and :attr:`SplitQuestions.disjoint` says which. Either
way the causal score sees leaked items: without them Acc(M_co) - Acc(M_co + patch) never sees
the inflation the patch is meant to remove (docs/baselines.md §3). The study
(:mod:`zerogap.study.settings`) and ``zerogap neurons`` both choose through
:func:`split_questions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SplitQuestions:
    """One setting's questions by id, chosen by :func:`split_questions`.

    ``leaked`` and ``unleaked`` are the evaluated halves; ``calibration`` the questions whose
    greedy accuracy gives the causal score, leaked and unleaked in turn; ``located`` the leaked
    questions whose greedy answers give the comparative score; ``disjoint`` whether
    ``calibration`` and ``located`` avoid every evaluated question.
    """

    leaked: tuple[str, ...]
    unleaked: tuple[str, ...]
    calibration: tuple[str, ...]
    located: tuple[str, ...]
    disjoint: bool

    @property
    def choice(self) -> str:
        """The calibration questions in words, as the report states them."""
        from zerogap.analysis.report import CALIBRATION_CHOICE

        return CALIBRATION_CHOICE[self.disjoint]


def alternate(first: Sequence[str], second: Sequence[str]) -> list[str]:
    """``first[0], second[0], first[1], ...``, the longer list's rest at the end.

    >>> alternate(["a", "b", "c"], ["x"])
    ['a', 'x', 'b', 'c']
    """
    out = [x for pair in zip(first, second, strict=False) for x in pair]
    short = min(len(first), len(second))
    return out + list(first[short:]) + list(second[short:])


def split_questions(leaked: Sequence[str], unleaked: Sequence[str], *, limit: int | None,
                    calibration_size: int) -> SplitQuestions:
    """The evaluated questions and the shortcut neurons' calibration questions of a split.

    Parameters
    ----------
    leaked, unleaked : sequence of question ids
        The split's two sides, in the split file's order.
    limit : int or None
        Questions evaluated: the first ``limit - limit // 2`` leaked and ``limit // 2``
        unleaked ids (None: every id of both sides). ``ValueError`` if a side has fewer (the
        halves would be unbalanced) or ``limit`` is below 2.
    calibration_size : int
        Calibration questions wanted: the first ones of the two sides taken in turn, so equal
        halves where both sides have enough.

    Returns
    -------
    SplitQuestions
        Calibrated on the ids past the evaluated ones where both sides have such a rest
        (``disjoint``; the comparative score on the calibration's leaked ids), else on the
        evaluated ids (the comparative score on every evaluated leaked id).

    Examples
    --------
    >>> leaked, unleaked = ["l0", "l1", "l2", "l3"], ["u0", "u1", "u2", "u3"]
    >>> s = split_questions(leaked, unleaked, limit=4, calibration_size=4)
    >>> s.leaked, s.unleaked, s.calibration, s.located, s.disjoint
    (('l0', 'l1'), ('u0', 'u1'), ('l2', 'u2', 'l3', 'u3'), ('l2', 'l3'), True)
    >>> s = split_questions(leaked, unleaked, limit=None, calibration_size=3)
    >>> s.calibration, s.located, s.disjoint
    (('l0', 'u0', 'l1'), ('l0', 'l1', 'l2', 'l3'), False)
    """
    if limit is not None and limit < 2:
        raise ValueError(f"limit {limit} with a split file keeps no unleaked question; give at "
                         "least 2")
    if limit is not None and (len(leaked) < limit - limit // 2 or len(unleaked) < limit // 2):
        # Fewer would unbalance the halves the stratified comparison rests on.
        raise ValueError(f"limit {limit} needs {limit - limit // 2} leaked and {limit // 2} "
                         f"unleaked questions; the split has {len(leaked)} and "
                         f"{len(unleaked)}")
    evaluated_leaked = tuple(leaked[: None if limit is None else limit - limit // 2])
    evaluated_unleaked = tuple(unleaked[: None if limit is None else limit // 2])
    rest_leaked = leaked[len(evaluated_leaked):]
    rest_unleaked = unleaked[len(evaluated_unleaked):]
    disjoint = bool(rest_leaked) and bool(rest_unleaked)
    if disjoint:
        calibration = tuple(alternate(rest_leaked, rest_unleaked)[:calibration_size])
        rest = set(rest_leaked)
        located = tuple(q for q in calibration if q in rest)
    else:
        calibration = tuple(alternate(evaluated_leaked, evaluated_unleaked)[:calibration_size])
        located = evaluated_leaked
    return SplitQuestions(evaluated_leaked, evaluated_unleaked, calibration, located, disjoint)
