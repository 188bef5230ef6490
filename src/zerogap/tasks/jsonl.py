"""``jsonl``: any JSONL benchmark with a question field and a numeric answer field.

``path`` is a folder holding ``train.jsonl`` and ``test.jsonl`` (the GSM8K release layout), or a
single file, which is the test split. The answer field holds a number (JSON number or string),
a GSM8K-style answer ending ``#### N``, or a solution ending "The answer is N."; k-shot prompts
need the train split (a folder) or an exemplar file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zerogap.errors import DataError, UserError
from zerogap.io.jsonlines import read_jsonl
from zerogap.tasks.base import register_task
from zerogap.tasks.qa import K_HELP, NumericQATask, PromptConfig, Row, paths_as_text


def split_file(path: str, split: str) -> Path:
    """The file holding ``split`` under ``path`` (a folder, or one file: the test split); errors
    say what layout is expected."""
    root = Path(path)
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


def read_rows(path: str, split: str, question_field: str = "question",
              answer_field: str = "answer") -> list[Row]:
    """The rows of ``split`` under ``path``; errors name the file, the line and the problem."""
    file = split_file(path, split)
    rows = []
    for line_no, record in read_jsonl(file):
        where = f"{file}:{line_no}"
        for name in (question_field, answer_field):
            if name not in record:
                raise DataError(f"{where}: missing field {name!r}")
        rows.append(Row(str(record[question_field]).strip(), str(record[answer_field]), where))
    return rows


@dataclass(frozen=True, kw_only=True)
class JsonlConfig(PromptConfig):
    """Options of the jsonl task: where its rows are and which fields hold question and answer.

    >>> JsonlConfig(path="data.jsonl", answer_field="target").k
    0
    """

    path: str = field(metadata={"help": "folder with {train,test}.jsonl, or one JSONL file (test)"})
    question_field: str = field(default="question", metadata={"help": "field with the question"})
    answer_field: str = field(default="answer", metadata={"help": "field with the gold answer"})
    k: int = field(default=0, metadata=K_HELP)

    def __post_init__(self) -> None:
        paths_as_text(self, "path")
        super().__post_init__()
        for name in ("question_field", "answer_field"):
            if not getattr(self, name):
                raise UserError(f"{type(self).__name__}.{name} must be a non-empty string")


@register_task("jsonl")
class JsonlTask(NumericQATask):
    """Questions and numeric gold answers from JSONL files whose field names the user gives.

    Question ids are ``"{split}-{row index}"`` (blank lines are skipped and not counted).
    """

    name = "jsonl"
    config_class = JsonlConfig
    options: JsonlConfig

    def _load(self, split: str) -> list[Row]:
        o = self.options
        return read_rows(o.path, split, o.question_field, o.answer_field)
