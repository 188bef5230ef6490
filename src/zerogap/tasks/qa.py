"""What the numeric question-answering tasks (gsm8k, arith, jsonl) share.

A subclass says where its rows come from (:meth:`NumericQATask._load`); this class turns them
into questions with stable ids, builds the k-shot prompt and grades responses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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


@dataclass(frozen=True)
class PromptConfig:
    """How a task prompts and grades.

    Examples
    --------
    >>> PromptConfig(k=2).to_dict()
    {'k': 2, 'seed': 0, 'exemplars': None, 'mode': 'anchor'}
    >>> PromptConfig(k=-1)
    Traceback (most recent call last):
    ...
    zerogap.errors.UserError: k must be an integer >= 0, got -1
    """

    k: int = field(
        default=8, metadata={"help": "number of exemplars in the prompt (0 = zero-shot)"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the exemplar selection from train"})
    exemplars: str | None = field(
        default=None, metadata={"help": "JSONL file of exemplars; its first k rows replace train's"}
    )
    mode: str = field(default="anchor", metadata={"help": "grading mode (see tasks.extract)"})

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise UserError(f"k must be an integer >= 0, got {self.k!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise UserError(f"seed must be an integer, got {self.seed!r}")
        if self.exemplars is not None:
            object.__setattr__(self, "exemplars", str(self.exemplars))
        check_mode(self.mode)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Row:
    """One raw item: question, answer text (GSM8K-style or a number), where it came from."""

    question: str
    answer: str
    where: str


class NumericQATask:
    """Base of the numeric tasks: questions ``"{split}-{row index}"``, CoT prompt, exact grader."""

    name = ""
    stop: tuple[str, ...] = STOP

    def __init__(self, prompt: PromptConfig):
        self.prompt_config = prompt
        self._rows: dict[str, list[Row]] = {}
        self._questions: dict[str, list[Question]] = {}
        self._prefix: str | None = None

    def _load(self, split: str) -> list[Row]:
        """The rows of ``split``, in their stable order. Subclasses implement this."""
        raise NotImplementedError

    def _options(self) -> dict:
        """JSON-serialisable options of the subclass, for :meth:`config`."""
        return {}

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
        cfg = self.prompt_config
        if cfg.exemplars is not None:
            given = load_exemplars(cfg.exemplars)
            if cfg.k > len(given):
                raise UserError(f"k={cfg.k} but {cfg.exemplars} holds {len(given)} exemplars")
            return given[: cfg.k]
        if cfg.k == 0:
            return []
        chosen = select_exemplars(self.rows("train"), cfg.k, cfg.seed)
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
        return grade_response(
            response, question.answer, mode=self.prompt_config.mode, stop=self.stop
        )

    def config(self) -> dict:
        return {"task": self.name, **self._options(), **self.prompt_config.to_dict()}
