"""``jsonl``: any JSONL benchmark with a question field and a numeric answer field.

``path`` is a folder holding ``train.jsonl`` and ``test.jsonl`` (the GSM8K release layout), or a
single file, which is the test split. The answer field holds a number (JSON number or string),
a GSM8K-style answer ending ``#### N``, or a solution ending "The answer is N."; k-shot prompts
need the train split (a folder) or an exemplar file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from zerogap.errors import DataError, UserError
from zerogap.io.jsonlines import read_jsonl
from zerogap.tasks.base import register_task
from zerogap.tasks.qa import NumericQATask, PromptConfig, Row


@dataclass(frozen=True)
class JsonlSource:
    """Where the rows are and which fields hold the question and the answer."""

    path: str = field(metadata={"help": "folder with {train,test}.jsonl, or one JSONL file (test)"})
    question_field: str = field(default="question", metadata={"help": "field with the question"})
    answer_field: str = field(default="answer", metadata={"help": "field with the gold answer"})

    def __post_init__(self):
        object.__setattr__(self, "path", str(self.path))
        for name in ("question_field", "answer_field"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise UserError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def split_file(self, split: str) -> Path:
        """The file holding ``split``; errors say what layout is expected."""
        root = Path(self.path)
        if root.is_dir():
            candidate = root / f"{split}.jsonl"
            if not candidate.is_file():
                raise DataError(f"{root}: no {split}.jsonl in this folder")
            return candidate
        if not root.is_file():
            raise DataError(f"{root}: no such file or folder")
        if split != "test":
            raise UserError(
                f"{root} is one file (the test split); for the {split!r} split pass a folder with "
                f"{split}.jsonl, or give an exemplar file, or use k=0"
            )
        return root

    def read(self, split: str) -> list[Row]:
        """The rows of ``split``; errors name the file, the line and the problem."""
        path = self.split_file(split)
        rows = []
        for line_no, record in read_jsonl(path):
            where = f"{path}:{line_no}"
            for name in (self.question_field, self.answer_field):
                if name not in record:
                    raise DataError(f"{where}: missing field {name!r}")
            rows.append(
                Row(str(record[self.question_field]).strip(), str(record[self.answer_field]), where)
            )
        return rows


@register_task("jsonl")
class JsonlTask(NumericQATask):
    """Questions and numeric gold answers from JSONL files whose field names the user gives.

    Question ids are ``"{split}-{row index}"`` (blank lines are skipped and not counted).
    """

    name = "jsonl"

    def __init__(
        self,
        *,
        path: str,
        question_field: str = "question",
        answer_field: str = "answer",
        k: int = 0,
        seed: int = 0,
        exemplars: str | None = None,
        mode: str = "anchor",
    ):
        super().__init__(PromptConfig(k=k, seed=seed, exemplars=exemplars, mode=mode))
        self.source = JsonlSource(path, question_field, answer_field)

    def _load(self, split: str) -> list[Row]:
        return self.source.read(split)

    def _options(self) -> dict:
        return self.source.to_dict()
