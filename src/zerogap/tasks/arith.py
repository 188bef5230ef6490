"""``arith``: grade-school word problems that zerogap generates, the embedded default task.

Every item is a function of ``(seed, split, row index)`` alone, so a split of any size is
reproducible and a larger split extends a smaller one. An item has one to three steps (the
difficulty mix ``step_weights``): an optional first step that multiplies (packs of objects), add
and subtract steps, and an optional last step that divides (equal shares); every intermediate
and final result is a whole number >= 2. Names, objects, phrasings and the number range
(``number_ranges``, one drawn per item) vary. Prompts and grading are those of every numeric
task ("Q: ...\\nA: ... The answer is N."), with exemplars chosen by :meth:`ArithTask.exemplars`.

The default mix was tuned on the embedded SmolLM2-135M (2-shot, T = 0.7), whose per-question
solve probabilities then spread over [0, 1]; see the README's "Tasks and grading" section.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

from zerogap.errors import UserError
from zerogap.tasks.base import register_task
from zerogap.tasks.prompt import Exemplar
from zerogap.tasks.qa import K_HELP, NumericQATask, PromptConfig, Row

NAMES = (
    "Tom", "Mia", "Sam", "Lily", "Ben", "Emma", "Jack", "Zoe", "Omar", "Nina",
    "Leo", "Ava", "Ravi", "Sara", "Max", "Ella", "Ken", "Rosa", "Ivan", "Lena",
)  # fmt: skip
OBJECTS = (
    "pens", "apples", "stickers", "marbles", "cookies", "books", "shells", "coins",
    "cards", "balloons", "pencils", "crayons", "stamps", "beads", "oranges", "eggs",
)  # fmt: skip
CONTAINERS = (("boxes", "box"), ("bags", "bag"), ("packs", "pack"), ("jars", "jar"))
START = ("{N} has {x} {o}.", "{N} starts the day with {x} {o}.")
PACKS = "{N} has {p} {cs} of {o} with {s} {o} in each {c}."
ADD = ("{N} buys {b} more {o}.", "{F} gives {N} {b} more {o}.", "{N} finds {b} more {o}.")
SUB = ("{N} gives {b} {o} to {F}.", "{N} loses {b} {o}.", "{N} sells {b} {o}.")
SHARE = (
    "{N} shares the {o} equally among {d} friends. How many {o} does each friend get?",
    "{N} puts the {o} into {d} equal groups. How many {o} are in each group?",
)
ASK = "How many {o} does {N} have now?"
ASK_PACKS = "How many {o} does {N} have in all?"

# The difficulty mix, tuned on the embedded SmolLM2-135M (2-shot, T = 0.7, 8 samples per item):
# it solves small one-step items with probabilities from 0 to about 0.9 (best on products, worst
# on differences, which it often adds) and multi-step items rarely. This mix put 31 of 80 test
# items at 0 and the rest from 0.125 to 0.875; (0.6, 0.25, 0.15) with a (10, 60) range added put
# 23 of 40 at 0 and none above 0.625 (README, "Tasks and grading").
DEFAULT_STEP_WEIGHTS = (0.8, 0.15, 0.05)
DEFAULT_NUMBER_RANGES = ((2, 10), (5, 20))


@dataclass(frozen=True, kw_only=True)
class ArithConfig(PromptConfig):
    """Options of the arith task: the prompt's, the seed, split sizes and the difficulty mix.

    Examples
    --------
    >>> ArithConfig(step_weights=(1, 0, 0)).step_weights
    (1.0, 0.0, 0.0)
    >>> ArithConfig(number_ranges=((5, 2),))
    Traceback (most recent call last):
    ...
    zerogap.errors.UserError: ArithConfig.number_ranges entries must be [low, high] with ...
    """

    seed: int = field(default=0, metadata={
        "help": "seed of the items and of the exemplar selection from train"})
    k: int = field(default=2, metadata=K_HELP)
    n_train: int = field(default=1000, metadata={"help": "items in the train split", "min": 0})
    n_test: int = field(default=200, metadata={"help": "items in the test split", "min": 0})
    step_weights: tuple[float, float, float] = field(
        default=DEFAULT_STEP_WEIGHTS,
        metadata={"help": "relative frequency of one-, two- and three-step items"},
    )
    number_ranges: tuple[tuple[int, int], ...] = field(
        default=DEFAULT_NUMBER_RANGES,
        metadata={"help": "operand ranges [[low, high], ...]; each item draws one uniformly"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        where = type(self).__name__
        weights = self.step_weights
        if len(weights) != 3 or not all(isinstance(w, int | float) and not isinstance(w, bool)
                                        and math.isfinite(w) and w >= 0 for w in weights) \
                or sum(weights) <= 0:
            raise UserError(f"{where}.step_weights must be three weights >= 0 with a positive "
                            f"sum, got {list(weights)}")
        object.__setattr__(self, "step_weights", tuple(float(w) for w in weights))
        if not self.number_ranges:
            raise UserError(f"{where}.number_ranges must hold at least one [low, high] range")
        for r in self.number_ranges:
            if not isinstance(r, tuple) or len(r) != 2 \
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in r) \
                    or not 2 <= r[0] <= r[1]:
                shown = list(r) if isinstance(r, tuple) else r
                raise UserError(f"{where}.number_ranges entries must be [low, high] with "
                                f"2 <= low <= high, got {shown!r}")


def _sub_operand(rng: random.Random, x: int, low: int, high: int) -> int:
    """A subtrahend in [low, high] leaving at least 2, or in [1, x - 2] when the range cannot."""
    top = min(high, x - 2)
    return rng.randint(low, top) if top >= low else rng.randint(1, x - 2)


def make_item(rng: random.Random, n_steps: int, low: int, high: int) -> tuple[str, str, int]:
    """One word problem with ``n_steps`` operations on numbers from [low, high].

    Returns
    -------
    (question, solution, answer)
        The solution is one line of equations ending "The answer is N."; N = answer.

    Examples
    --------
    >>> q, s, a = make_item(random.Random(1), 2, 2, 10)
    >>> s.endswith(f"The answer is {a}.") and a >= 2
    True
    """
    name, friend = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    while True:  # redraw until every step comes out whole and >= 2 (most draws do)
        ops = [
            rng.choice(
                ["add", "sub"] + (["mul"] if i == 0 else []) + (["div"] if i == n_steps - 1 else [])
            )
            for i in range(n_steps)
        ]
        sentences, steps = [], []
        if ops[0] == "mul":
            containers, container = rng.choice(CONTAINERS)
            p, s = rng.randint(2, 9), rng.randint(low, high)
            x = p * s
            sentences.append(PACKS.format(N=name, p=p, cs=containers, o=obj, s=s, c=container))
            steps.append(f"{p} * {s} = {x}, so {name} has {x} {obj}.")
        else:
            x = rng.randint(max(low, 2), high)
            sentences.append(rng.choice(START).format(N=name, x=x, o=obj))
        ending = ASK_PACKS if ops == ["mul"] else ASK
        for op in ops:  # a "mul" is the opening sentence, written above
            if op == "add":
                b = rng.randint(low, high)
                sentences.append(rng.choice(ADD).format(N=name, F=friend, b=b, o=obj))
                steps.append(f"{x} + {b} = {x + b}, so {name} has {x + b} {obj}.")
                x += b
            elif op == "sub":
                if x < 3:
                    break
                b = _sub_operand(rng, x, low, high)
                sentences.append(rng.choice(SUB).format(N=name, F=friend, b=b, o=obj))
                steps.append(f"{x} - {b} = {x - b}, so {name} has {x - b} {obj}.")
                x -= b
            elif op == "div":
                divisors = [d for d in range(2, 10) if x % d == 0 and x // d >= 2]
                if not divisors:
                    break
                d = rng.choice(divisors)
                ending = rng.choice(SHARE).replace("{d}", str(d))
                steps.append(f"{x} / {d} = {x // d}, so each gets {x // d} {obj}.")
                x //= d
        else:
            question = " ".join([*sentences, ending.format(N=name, o=obj)])
            return question, " ".join([*steps, f"The answer is {x}."]), x


EXEMPLAR_OPS = ("+", "*", "-", "/")
_EQUATION = re.compile(r"\d+ ([-+*/]) \d+ = \d+")


def _one_step_op(solution: str) -> str | None:
    """The operation of a one-step solution, None for a multi-step one."""
    ops = _EQUATION.findall(solution)
    return ops[0] if len(ops) == 1 else None


@register_task("arith")
class ArithTask(NumericQATask):
    """Generated one- to three-step word problems from a seed, whole-number results.

    How items are drawn: the module docstring.

    Examples
    --------
    >>> task = ArithTask(n_test=3, k=1)
    >>> [q.id for q in task.questions("test")]
    ['test-0', 'test-1', 'test-2']
    >>> task.prompt(task.questions()[0]).count("Q: ")
    2
    """

    name = "arith"
    config_class = ArithConfig
    options: ArithConfig

    def _load(self, split: str) -> list[Row]:
        sizes = {"train": self.options.n_train, "test": self.options.n_test}
        if split not in sizes:
            raise UserError(f"arith has splits 'train' and 'test', not {split!r}")
        rows = []
        for index in range(sizes[split]):
            # A string seed is hashed with SHA-512 by random.Random: stable across runs.
            rng = random.Random(f"arith/{self.options.seed}/{split}/{index}")
            n_steps = rng.choices((1, 2, 3), weights=self.options.step_weights)[0]
            low, high = rng.choice(self.options.number_ranges)
            question, solution, _ = make_item(rng, n_steps, low, high)
            rows.append(Row(question, solution, f"arith {split}-{index}"))
        return rows

    def exemplars(self) -> list[Exemplar]:
        """One-step train items, one per operation in turn (+, *, -, /, +, ...).

        The rule: shuffle the train split with ``random.Random(seed)``; exemplar i is the first
        unused one-step item whose operation is the i-th of that cycle. Measured on the embedded
        SmolLM2-135M: with multi-step exemplars it copies their extra steps into one-step answers
        and solves almost nothing; one-step exemplars of different operations give the spread of
        solve probabilities that SA-PPG's strata need. A user's exemplar file still wins.
        """
        cfg = self.options
        if cfg.exemplars is not None:
            return super().exemplars()
        rows = list(self.rows("train"))
        random.Random(cfg.seed).shuffle(rows)
        chosen: list[Row] = []
        for i in range(cfg.k):
            op = EXEMPLAR_OPS[i % len(EXEMPLAR_OPS)]
            row = next((r for r in rows if r not in chosen and _one_step_op(r.answer) == op), None)
            if row is None:
                raise UserError(
                    f"k={cfg.k}: the train split ({len(rows)} items) has too few one-step "
                    f"{op!r} items for the exemplars; raise n_train"
                )
            chosen.append(row)
        return [Exemplar(r.question, r.answer) for r in chosen]
