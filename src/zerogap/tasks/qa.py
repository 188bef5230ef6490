"""What the numeric question-answering tasks (gsm8k, arith, jsonl) share.

A subclass says where its rows come from (:meth:`NumericQATask._load`); this class turns them
into questions with stable ids, builds the k-shot prompt and grades responses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from zerogap.config import JsonConfig
from zerogap.errors import DataError, UserError
from zerogap.tasks.base import Grade, Question
from zerogap.tasks.extract import check_mode, grade_response, parse_gold
from zerogap.tasks.prompt import (
    STOP,
    Exemplar,
    cot_solution,
    load_exemplars,
    render_prefix,
    render_question,
    select_exemplars,
)


def paths_as_text(config: object, *names: str) -> None:
    """Store the path-like fields ``names`` of a frozen config as strings (JSON-friendly)."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, os.PathLike):
            object.__setattr__(config, name, os.fspath(value))


K_HELP = {"help": "number of exemplars in the prompt (0 = zero-shot)", "min": 0}
"""The declaration of ``k``, whose default each task sets."""


@dataclass(frozen=True, kw_only=True)
class PromptConfig(JsonConfig):
    """How a numeric task prompts and grades; each numeric task's options extend it.

    Examples
    --------
    >>> PromptConfig(k=2).to_dict()
    {'k': 2, 'seed': 0, 'exemplars': None, 'mode': 'anchor'}
    >>> PromptConfig(k=-1)
    Traceback (most recent call last):
    ...
    zerogap.config.FieldError: PromptConfig.k must be at least 0, got -1
    """

    k: int = field(default=8, metadata=K_HELP)
    seed: int = field(default=0, metadata={"help": "seed of the exemplar selection from train"})
    exemplars: str | None = field(default=None, metadata={
        "help": "JSONL file of exemplars; its first k rows replace train's"})
    mode: str = field(default="anchor", metadata={
        "help": "grading mode ('zerogap task list' lists them)"})

    def __post_init__(self) -> None:
        paths_as_text(self, "exemplars")
        super().__post_init__()
        check_mode(self.mode)


@dataclass(frozen=True)
class Row:
    """One raw item: question, answer text (GSM8K-style or a number), where it came from."""

    question: str
    answer: str
    where: str


class NumericQATask:
    """Base of the numeric tasks: questions ``"{split}-{row index}"``, CoT prompt, exact grader.

    A subclass names its options in ``config_class`` (a :class:`PromptConfig` subclass) and is
    built from them as keyword arguments, which that class validates. Building a task also
    builds its k-shot prefix (:meth:`_check`), so options that cannot give a prompt (an
    exemplar file that is a folder, a train split too small or missing) are refused then,
    before any model is loaded.
    """

    name = ""
    stop: tuple[str, ...] = STOP
    config_class: type[PromptConfig] = PromptConfig

    def __init__(self, **options: Any) -> None:
        self.options = self.config_class(**options)
        self._rows: dict[str, list[Row]] = {}
        self._questions: dict[str, list[Question]] = {}
        self._prefix: str | None = None
        self._check()

    def _check(self) -> None:
        """Refuse options that cannot give a prompt, by building its prefix."""
        self.prefix()

    def _load(self, split: str) -> list[Row]:
        """The rows of ``split``, in their stable order. Subclasses implement this."""
        raise NotImplementedError

    def rows(self, split: str) -> list[Row]:
        if split not in self._rows:
            self._rows[split] = self._load(split)
        return self._rows[split]

    def questions(self, split: str = "test") -> list[Question]:
        if split not in self._questions:
            out = []
            for index, row in enumerate(self.rows(split)):
                try:
                    gold = parse_gold(row.answer)
                except ValueError as err:
                    raise DataError(f"{row.where}: {err}") from None
                out.append(Question(f"{split}-{index}", row.question, gold))
            self._questions[split] = out
        return self._questions[split]

    def exemplars(self) -> list[Exemplar]:
        """The k exemplars of every prompt: the user's file, else the seeded train selection."""
        cfg = self.options
        if cfg.exemplars is not None:
            given = load_exemplars(cfg.exemplars)
            if cfg.k > len(given):
                raise UserError(f"k={cfg.k} but {cfg.exemplars} holds {len(given)} exemplars")
            return given[: cfg.k]
        if cfg.k == 0:
            return []
        try:
            train = self.rows("train")
        except DataError as err:
            raise DataError(f"{err} (the k={cfg.k} exemplars come from the train split; give "
                            "exemplars=FILE or k=0)") from None
        chosen = select_exemplars(train, cfg.k, cfg.seed)
        out = []
        for row in chosen:
            try:
                out.append(Exemplar(row.question, cot_solution(row.answer)))
            except ValueError as err:
                raise DataError(f"{row.where}: {err}") from None
        return out

    def prefix(self) -> str:
        """The k-shot part shared by all prompts of this task."""
        if self._prefix is None:
            self._prefix = render_prefix(self.exemplars())
        return self._prefix

    def prompt(self, question: Question) -> str:
        return self.prefix() + render_question(question.text)

    def grade(self, question: Question, response: str) -> Grade:
        return grade_response(response, question.answer, mode=self.options.mode, stop=self.stop)

    def config(self) -> dict:
        """The task's name and options: ``get_task(**config)`` rebuilds it."""
        return {"task": self.name, **self.options.to_dict()}
