"""How far a solution generator lets samples disperse from a greedy decode, before any model.

The design criteria (:mod:`zerogap.analysis.design`) compare a model's T = 0.7 samples with its
*greedy* decode, which takes the most likely option at every choice. A model that learned a
task's generator is not uniform over its options: it prefers some. This models that: every
choice point of the ``multistep`` writer goes through a :class:`~zerogap.tasks.multistep_varied.
Chooser` that weights option i by ``(i + 1) ** -exponent`` (a Zipf law; 0.5 a mild preference,
1.0 a strong one), the samples drawn at a temperature and the greedy decode as the first option
everywhere. The ROUGE-L median and trigger rate measured this way are what an uncontaminated
model with those preferences would show: a task whose value is past the criteria's limits
leaves no room for the premise (arXiv 2608.07341 §1, Figure 1), whatever the training.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from zerogap.analysis.design import trajectory_stats
from zerogap.tasks.multistep import MultistepTask, write_chosen
from zerogap.tasks.multistep_varied import Chooser


@dataclass(frozen=True)
class Headroom:
    """One preference profile's measures: ROUGE-L median (over questions, of each question's
    mean over its samples) and trigger rate, as the design criteria compute them."""

    exponent: float
    temperature: float
    rouge_l_median: float
    trigger: float
    greedy_tokens: float


def preference_headroom(task: MultistepTask, split: str, questions: int, m: int,
                        exponent: float, tokenize: Callable[[str], Sequence[Hashable]], *,
                        temperature: float = 0.7) -> Headroom:
    """:class:`Headroom` of ``task``'s writer on the first ``questions`` items of ``split``:
    ``m`` draws at ``temperature`` against the greedy-like modal draw, each seeded by the item's
    index (so the figure is a function of its arguments).

    Examples
    --------
    >>> from zerogap.tasks import get_task
    >>> task = get_task("multistep", solutions=2, k=0, n_test=8)
    >>> h = preference_headroom(task, "test", 8, 4, 0.5, str.split)
    >>> 0 < h.rouge_l_median < 1 and 0 <= h.trigger < 1
    True
    """
    version = task.options.solutions
    samples, greedy = [], []
    for index in range(questions):
        problem, _ = task.problem(split, index)
        modal = Chooser(random.Random(f"greedy/{index}"), exponent, 0.0)
        greedy.append(" " + write_chosen(problem, modal, version))
        draw = Chooser(random.Random(f"sample/{index}"), exponent, temperature)
        samples.append([" " + write_chosen(problem, draw, version) for _ in range(m)])
    stats = trajectory_stats(samples, greedy, tokenize)
    return Headroom(exponent, temperature, round(float(np.median(stats.rouge)), 3),
                    round(int(stats.hits.sum()) / max(1, int(stats.steps.sum())), 3),
                    round(float(np.mean([len(tokenize(g)) for g in greedy])), 1))
