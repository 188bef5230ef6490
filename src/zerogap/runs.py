"""Resumable runs: a task's questions through the engine into a run store.

:func:`run_sample` and :func:`run_greedy` record the run's configuration in the store (refusing
a directory that holds a different run), skip the questions already stored, and write each
question's graded results in one transaction as soon as it is complete. Killing a run loses at
most the questions in flight; running the same call again finishes it, and because each
sample's noise depends only on (seed, question id, sample index, step), the resumed run stores
the samples an uninterrupted run would have stored.

Strategies plug in through :func:`strategy_hooks`: a name and its options map to the engine's
``(intervention, patch)`` pair. ``identity`` is the only entry here; the strategies module
registers the others in :data:`STRATEGIES`.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from zerogap import engine
from zerogap.engine.hooks import Intervention, Patch
from zerogap.models import LoadedModel
from zerogap.store import GreedyRow, RunStore, SampleRow
from zerogap.tasks.base import Question, Task


@dataclass(frozen=True)
class SampleSettings:
    """What a sampling run draws; every field is part of the run's identity.

    Raises ``ValueError`` naming the bad value on construction.
    """

    m: int = 50
    temperature: float = 0.7
    max_new_tokens: int = 256
    seed: int = 0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        if self.m < 1:
            raise ValueError(f"m must be at least 1, got {self.m}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StrategyContext:
    """What a strategy may need to prepare its hooks (e.g. greedy decodes of these questions)."""

    loaded: LoadedModel
    task: Task
    questions: Sequence[Question]  # exactly the list the engine call gets, in order
    store: RunStore
    max_new_tokens: int


StrategyBuilder = Callable[[dict, StrategyContext], tuple[Intervention | None, Patch | None]]


def _identity(options: dict, context: StrategyContext):
    if options:
        raise ValueError(f"strategy identity takes no options, got {sorted(options)}")
    return None, None


STRATEGIES: dict[str, StrategyBuilder] = {"identity": _identity}


def check_strategy(name: str) -> StrategyBuilder:
    """The builder registered as ``name``; unknown names raise ``ValueError`` listing the known."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"unknown strategy {name!r}; known strategies: {', '.join(sorted(STRATEGIES))}"
        ) from None


def strategy_hooks(name: str, options: dict, context: StrategyContext):
    """The engine hooks ``(intervention, patch)`` of strategy ``name`` with ``options``."""
    return check_strategy(name)(options, context)


def package_versions() -> dict[str, str]:
    """Versions recorded with every run (not compared on resume)."""
    out = {"python": platform.python_version()}
    for name in ("zerogap", "torch", "transformers", "peft"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def _base_fields(loaded: LoadedModel, task: Task, split: str) -> dict[str, Any]:
    return {
        "model": loaded.spec,
        "model_fingerprint": loaded.fingerprint,
        "task": task.name,
        "task_config": task.config(),
        "split": split,
        "versions": package_versions(),
    }


def run_sample(loaded: LoadedModel, task: Task, questions: Sequence[Question], store: RunStore,
               settings: SampleSettings, *, split: str, strategy: str = "identity",
               strategy_options: dict | None = None, max_batch: int | None = None,
               progress: bool = False) -> int:
    """Sample ``settings.m`` responses for every question not yet in ``store``; grade and store.

    Returns
    -------
    int
        Number of questions sampled by this call (0 when the run was already complete).
    """
    check_strategy(strategy)
    options = dict(strategy_options or {})
    store.check_config({
        **_base_fields(loaded, task, split), **settings.to_dict(),
        "strategy": strategy, "strategy_config": options,
    })
    done = store.completed_questions()
    todo = [q for q in questions if q.id not in done]
    if not todo:
        return 0
    context = StrategyContext(loaded, task, todo, store, settings.max_new_tokens)
    intervention, patch = strategy_hooks(strategy, options, context)

    def write(i: int, generations: list[engine.Generation]) -> None:
        q = todo[i]
        rows = []
        for s, g in enumerate(generations):
            grade = task.grade(q, g.text)
            rows.append(SampleRow(q.id, s, g.text, len(g.token_ids), g.finish, grade.extracted,
                                  grade.correct, g.stats))
        store.add_samples(rows)

    engine.sample(
        loaded.model, loaded.tokenizer, [task.prompt(q) for q in todo], m=settings.m,
        temperature=settings.temperature, max_new_tokens=settings.max_new_tokens,
        question_ids=[q.id for q in todo], seed=settings.seed, stop=task.stop,
        intervention=intervention, patch=patch, top_k=settings.top_k, top_p=settings.top_p,
        max_batch=max_batch, progress=progress, on_question=write,
    )
    return len(todo)


def run_greedy(loaded: LoadedModel, task: Task, questions: Sequence[Question], store: RunStore,
               *, split: str, max_new_tokens: int, strategy: str = "identity",
               strategy_options: dict | None = None, max_batch: int | None = None,
               progress: bool = False) -> int:
    """Greedy-decode (with per-step entropies) every question not yet in the greedy table.

    Its fields are recorded as ``greedy_*`` so that a sampling run and its greedy decodes (which
    RailCap, TED and LNE-blocking reuse) share one run directory. Returns questions decoded.
    """
    check_strategy(strategy)
    options = dict(strategy_options or {})
    store.check_config({
        **_base_fields(loaded, task, split), "greedy_max_new_tokens": max_new_tokens,
        "greedy_strategy": strategy, "greedy_strategy_config": options,
    })
    done = store.completed_greedy()
    todo = [q for q in questions if q.id not in done]
    if not todo:
        return 0
    context = StrategyContext(loaded, task, todo, store, max_new_tokens)
    intervention, patch = strategy_hooks(strategy, options, context)
    if intervention is not None:
        raise ValueError(f"strategy {strategy!r} edits logits; greedy decodes take patches only")

    def write(i: int, g: engine.Generation) -> None:
        q = todo[i]
        grade = task.grade(q, g.text)
        store.add_greedy([GreedyRow(q.id, g.token_ids, g.text, g.finish, grade.extracted,
                                    grade.correct, g.entropies)])

    engine.greedy(
        loaded.model, loaded.tokenizer, [task.prompt(q) for q in todo],
        max_new_tokens=max_new_tokens, stop=task.stop, return_entropy=True, patch=patch,
        max_batch=max_batch, progress=progress, on_question=write,
    )
    return len(todo)
