"""The task protocol: what every benchmark gives the rest of zerogap.

A task owns its questions, its prompt format and its grader, so the engine, the store and the CLI
never special-case a benchmark. Tasks are looked up by name through :func:`get_task`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from zerogap.config import check_names, describe, from_strings
from zerogap.registry import Registry


@dataclass(frozen=True)
class Question:
    """One benchmark item.

    ``id`` is stable across runs and machines (for file-backed tasks: ``"{split}-{row index}"``),
    ``answer`` is the gold answer as the grader compares it (for numeric tasks, a canonical
    decimal string such as ``"18"`` or ``"-2.5"``).
    """

    id: str
    text: str
    answer: str


@dataclass(frozen=True)
class Grade:
    """The grader's verdict on one response: the extracted answer (None if none) and correctness."""

    extracted: str | None
    correct: bool


@runtime_checkable
class Task(Protocol):
    """What a benchmark provides.

    ``prompt(q)`` is the full text fed to the model (k-shot exemplars, then the question); prompts
    of one task share their k-shot part, which the engine detects and encodes once. ``stop`` lists
    strings at which a response is cut (a run-on into the next question).
    """

    name: str
    stop: tuple[str, ...]

    def questions(self, split: str = "test") -> list[Question]: ...

    def prompt(self, question: Question) -> str: ...

    def grade(self, question: Question, response: str) -> Grade: ...

    def config(self) -> dict:
        """JSON-serialisable settings that identify this task instance (recorded with runs)."""
        ...


_TASKS: Registry[Callable[..., Task]] = Registry("task")

register_task = _TASKS.register
"""Class or factory decorator: make a task constructible by ``get_task(name, **options)``."""

registered_task = _TASKS.registered
"""Context manager: ``with registered_task(name, factory):`` the task exists inside only."""

task_names = _TASKS.names
"""Names of the registered tasks, sorted."""


def task_summary(name: str) -> str:
    """Task ``name`` in one line: the first line of its factory's docstring."""
    return ((_TASKS.get(name).__doc__ or "").strip().splitlines() or [""])[0]


def task_config_class(name: str) -> Callable[..., Any]:
    """What declares task ``name``'s options: its factory's ``config_class`` (a config of
    :mod:`zerogap.config`: typed fields with bounds and help), else the factory itself (its
    annotated keyword parameters, for tasks registered without a config class)."""
    factory = _TASKS.get(name)
    return getattr(factory, "config_class", factory)


def get_task(name: str, **options) -> Task:
    """Build the task registered as ``name`` with ``options`` (its config's fields).

    An unknown name, an option the task does not take or a missing required one raises
    :class:`~zerogap.errors.UserError` naming it and listing what the task takes; the config
    refuses a bad value the same way, naming the option and what it accepts.
    """
    check_names(task_config_class(name), options, owner=f"task {name}", option="--task-option")
    return _TASKS.get(name)(**options)


def task_option_values(name: str, options: Mapping[str, str]) -> dict[str, Any]:
    """``--task-option`` strings of task ``name`` as typed keyword arguments (the one
    :func:`~zerogap.config.from_strings` of ``--set``, over the task's config)."""
    return from_strings(task_config_class(name), options, owner=f"task {name}",
                        option="--task-option")


def task_from_strings(name: str, options: Mapping[str, str]) -> Task:
    """Build task ``name`` from ``--task-option`` strings, converted by its config's types."""
    return get_task(name, **task_option_values(name, options))


def task_options(name: str) -> list[str]:
    """Help lines for the options task ``name`` takes (generated from its config)."""
    return describe(task_config_class(name))
