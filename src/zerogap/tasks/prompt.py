"""k-shot chain-of-thought prompts in the paper's format.

A prompt is k exemplars, each ``"Q: {question}\\nA: {solution}\\n\\n"`` with a one-line solution
that ends "The answer is N.", followed by ``"Q: {question}\\nA:"``. Exemplars come from a task's
train split, chosen by :func:`select_exemplars`, or from a user's JSONL file
(:func:`load_exemplars`). All prompts of a task share the exemplar prefix, which the engine
encodes once.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from zerogap.errors import DataError, UserError
from zerogap.io.jsonlines import read_jsonl
from zerogap.tasks.extract import canonical, parse_number

# The harness's gsm8k_cot ``until`` strings: a base model runs on into the next "Q:".
STOP = ("Q:", "</s>", "<|im_end|>")

T = TypeVar("T")

_CALCULATOR = re.compile(r"<<[^>]*>>")
_HASH_LINE = re.compile(r"####\s*(.*)$", re.DOTALL)
_ANSWER_END = re.compile(r"The answer is [^\n]*\.\s*$")
_SENTENCE_END = (".", "!", "?", ":")


@dataclass(frozen=True)
class Exemplar:
    """One worked example: the question and a one-line solution ending "The answer is N."."""

    question: str
    solution: str


def cot_solution(answer: str) -> str:
    """Rewrite a GSM8K-style answer into a one-line solution ending "The answer is N.".

    Calculator annotations ``<<...>>`` are removed, the final ``#### N`` becomes
    "The answer is N." (N canonical: no thousands separators), and lines are joined with spaces,
    each ending with a period if it has no sentence end. An answer that already ends with
    "The answer is N." is only joined onto one line. ``ValueError`` when it has neither.

    Examples
    --------
    >>> cot_solution("He has 3 * 4 = <<3*4=12>>12 pens\\nShe has 2\\n#### 1,012")
    'He has 3 * 4 = 12 pens. She has 2. The answer is 1012.'
    """
    text = _CALCULATOR.sub("", answer)
    hashed = _HASH_LINE.search(text)
    if hashed is not None:
        value = parse_number(hashed.group(1))
        if value is None:
            raise DataError(f"no number after '####' in {answer[-60:]!r}")
        text = f"{text[: hashed.start()]}\nThe answer is {canonical(value)}."
    elif not _ANSWER_END.search(text):
        raise DataError(
            f"solution ends with neither '#### N' nor 'The answer is N.': {answer[-60:]!r}"
        )
    # GSM8K's steps are lines, often without a final period; one line of sentences keeps the
    # model's continuation on one line, as in the paper's exemplars.
    lines = (" ".join(line.split()) for line in text.splitlines())
    return " ".join(line if line.endswith(_SENTENCE_END) else f"{line}." for line in lines if line)


def select_exemplars(pool: Sequence[T], k: int, seed: int) -> list[T]:
    """The documented selection rule: ``random.Random(seed).sample(range(len(pool)), k)``.

    The k pool rows at those indices, in the order drawn. ``ValueError`` when k exceeds the pool.

    Examples
    --------
    >>> select_exemplars([f"q{i}" for i in range(10)], 3, seed=0)
    ['q6', 'q9', 'q0']
    """
    if not 0 <= k <= len(pool):
        raise UserError(f"k={k} exemplars requested but the train split has {len(pool)} items")
    return [pool[i] for i in random.Random(seed).sample(range(len(pool)), k)]


def load_exemplars(path: str | Path) -> list[Exemplar]:
    """Read exemplars from a JSONL file with ``question`` and ``answer`` fields, in file order.

    ``answer`` is either a GSM8K-style answer ending ``#### N`` or a solution ending
    "The answer is N."; errors name the file and line.
    """
    exemplars = []
    for line_no, row in read_jsonl(path):
        try:
            exemplars.append(
                Exemplar(str(row["question"]).strip(), cot_solution(str(row["answer"])))
            )
        except KeyError as err:
            raise DataError(f"{path}:{line_no}: bad exemplar (missing field {err})") from None
        except ValueError as err:
            raise DataError(f"{path}:{line_no}: bad exemplar ({err})") from None
    return exemplars


def render_prefix(exemplars: list[Exemplar]) -> str:
    """The shared k-shot part of every prompt.

    Examples
    --------
    >>> render_prefix([Exemplar("Ann has 2 cats, gets 1?", "2 + 1 = 3. The answer is 3.")])
    'Q: Ann has 2 cats, gets 1?\\nA: 2 + 1 = 3. The answer is 3.\\n\\n'
    """
    return "".join(f"Q: {e.question}\nA: {e.solution}\n\n" for e in exemplars)


def render_question(question: str) -> str:
    """The part of a prompt after the exemplars: ``"Q: {question}\\nA:"``."""
    return f"Q: {question}\nA:"
