"""``multistep``: generated multi-step word problems whose worked solutions take several paths.

The paper's premise (arXiv 2608.07341 §1, Figure 1) is that on a question it never saw a model's
samples disperse over many ways of writing a solution, while on a leaked question they collapse
onto the one memorised text. That needs a task in which correct solutions differ, as GSM8K's
do. Here every item is a problem (who has what, what happens, what is asked) and its solution is
written by drawing, per item, one of several valid paths:

* **orders**: the independent add/subtract events of a story may be applied in any order whose
  running totals stay positive, and a purchase's two costs in either order;
* **intermediate quantities**: the events may be applied one by one, or the gains and the
  losses summed first (``5 + 7 = 12`` more, then one step), or their net change computed first;
  change from a bill may be computed from the total cost or cost by cost;
* **phrasings**: each step sentence has five phrasings and each opener three.

So two correct solutions of one question need share neither their words nor their equations;
the last sentence is always "The answer is N." for grading. A test item's solution (what a
leaked item is memorised as) is one such draw, fixed by the seed.

Every item is a function of ``(seed, split, row index)`` alone, so a larger split extends a
smaller one. The difficulty mix is the number of steps (``step_weights`` over 2, 3 and 4
arithmetic steps) and the operand ranges (``number_ranges``, one drawn per item).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, fields

from zerogap.errors import UserError
from zerogap.tasks.arith import CONTAINERS, NAMES, OBJECTS, ArithConfig
from zerogap.tasks.base import register_task
from zerogap.tasks.multistep_varied import Chooser, ChooserRandom, write_varied
from zerogap.tasks.prompt import Exemplar
from zerogap.tasks.qa import NumericQATask, Row

GOODS = ("notebooks", "toy cars", "mugs", "kites", "puzzles", "candles", "hats", "plants")

# -- the question's sentences ------------------------------------------------------------------

Q_START = ("{N} has {x} {o}.", "{N} starts the day with {x} {o}.")
Q_PACKS = "{N} has {p} {cs} of {o} with {s} {o} in each {c}."
Q_GAIN = ("{N} buys {b} more {o}.", "{F} gives {N} {b} more {o}.", "{N} finds {b} more {o}.",
          "{N} wins {b} {o} in a game.")
Q_LOSS = ("{N} gives {b} {o} to {F}.", "{N} loses {b} {o}.", "{N} sells {b} {o}.",
          "{N} uses {b} {o} for a project.")
Q_ASK = "How many {o} does {N} have now?"
Q_SHARE = ("{N} then shares the {o} equally among {d} friends. How many {o} does each friend get?",
           "{N} then puts the {o} into {d} equal groups. How many {o} are in each group?")
Q_BUY = "{N} buys {a} {g1} for {p} dollars each and {b} {g2} for {q} dollars each."
Q_BILL = " {N} pays with {bill} dollars. How much change does {N} get?"
Q_SPEND = " How many dollars does {N} spend?"

# -- the solution's sentences: three openers, five phrasings of every step ----------------------

OPEN = ("{N} starts with {x} {o}.", "At first {N} has {x} {o}.", "{N} has {x} {o} to begin with.")
PACKS = (
    "{N} starts with {eq} {o}.",
    "{p} {cs} of {s} make {eq} {o}.",
    "At first {N} has {eq} {o}.",
    "There are {eq} {o} in the {cs}.",
    "The {cs} hold {eq} {o} in all.",
)
GAIN = (
    "After getting {b} more, {N} has {eq} {o}.",
    "{eq}, so {N} now has {y} {o}.",
    "Adding the {b} new {o} gives {eq}.",
    "Then {N} has {eq} {o}.",
    "{N} gains {b} {o}: {eq}.",
)
LOSS = (
    "After {b} are gone, {N} has {eq} {o}.",
    "{eq}, so {N} now has {y} {o}.",
    "Taking away the {b} {o} leaves {eq}.",
    "Then {N} has {eq} {o} left.",
    "{N} gives up {b} {o}: {eq}.",
)
SUM_GAINS = (
    "{N} gets {eq} {o} in all.",
    "The {o} that come in add up to {eq}.",
    "Together the new {o} are {eq}.",
    "In total {N} gains {eq} {o}.",
    "{eq} {o} are added.",
)
SUM_LOSSES = (
    "{N} loses {eq} {o} in all.",
    "The {o} that go away add up to {eq}.",
    "Together the {o} that leave are {eq}.",
    "In total {N} gives up {eq} {o}.",
    "{eq} {o} are taken away.",
)
NET_UP = (
    "The net change is {eq} more {o}.",
    "{N} gains {eq} more than {N} loses.",
    "Overall that is {eq} {o} more.",
    "Gains minus losses: {eq}.",
    "So {N} ends up {eq} {o} ahead.",
)
NET_DOWN = (
    "The net change is {eq} fewer {o}.",
    "{N} loses {eq} more than {N} gains.",
    "Overall that is {eq} {o} fewer.",
    "Losses minus gains: {eq}.",
    "So {N} ends up {eq} {o} behind.",
)
SHARE = (
    "Each share is {eq} {o}.",
    "{eq}, so each gets {y} {o}.",
    "Split {d} ways, that is {eq}.",
    "Dividing by {d} gives {eq} {o}.",
    "So each group has {eq} {o}.",
)
COST = (
    "The {g} cost {eq} dollars.",
    "{a} {g} at {p} dollars is {eq} dollars.",
    "For the {g}, {N} pays {eq} dollars.",
    "{eq} dollars go to the {g}.",
    "The {g} come to {eq} dollars.",
)
TOTAL = (
    "In total {N} spends {eq} dollars.",
    "Together that is {eq} dollars.",
    "{eq} dollars in all.",
    "The whole bill is {eq} dollars.",
    "So {N} pays {eq} dollars.",
)
CHANGE = (
    "The change is {eq} dollars.",
    "{N} gets back {eq} dollars.",
    "{eq} dollars come back.",
    "That leaves {eq} dollars.",
    "So the change is {eq}.",
)
PAY = (
    "After the {g}, {N} has {eq} dollars left.",
    "Paying for the {g} leaves {eq} dollars.",
    "{eq} dollars remain after the {g}.",
    "Then {eq} dollars are left.",
    "Taking off the {g} gives {eq}.",
)
ANSWER = "The answer is {y}."

ARITH_FIELDS = {f.name: f for f in fields(ArithConfig)}
WRITERS = (1, 2)
DEFAULT_STEP_WEIGHTS = (0.3, 0.4, 0.3)
DEFAULT_NUMBER_RANGES = ((2, 12), (5, 20))


@dataclass(frozen=True, kw_only=True)
class MultistepConfig(ArithConfig):
    """Options of the multistep task: arith's (the prompt's, the seed, split sizes, the
    difficulty mix, validated alike) with its own mix of two-, three- and four-step items.

    Examples
    --------
    >>> MultistepConfig(k=0).step_weights, MultistepConfig(step_weights=(0, 1, 0)).step_weights
    ((0.3, 0.4, 0.3), (0.0, 1.0, 0.0))
    """

    seed: int = field(default=0, metadata={
        "help": "seed of the items, their solutions and the exemplar selection from train"})
    step_weights: tuple[float, float, float] = field(default=DEFAULT_STEP_WEIGHTS, metadata={
        "help": "relative frequency of two-, three- and four-step items"})
    number_ranges: tuple[tuple[int, int], ...] = field(
        default=DEFAULT_NUMBER_RANGES, metadata=ARITH_FIELDS["number_ranges"].metadata)
    solutions: int = field(default=1, metadata={
        "help": "solution writer: 1 (five phrasings a step; the texts of builds made before "
                "2) or 2 (many more: equation forms, pronouns, connectives, plan and closing "
                "sentences, a one-equation path; zerogap.tasks.multistep_varied)", "min": 1})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.solutions not in WRITERS:
            raise UserError(f"{type(self).__name__}.solutions must be 1 or 2, "
                            f"got {self.solutions!r}")


# -- problems ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Story:
    """Someone's count of objects: a start (a number, or packs of a size), independent gains
    and losses (signed amounts, in the question's order), an optional final equal split."""

    name: str
    friend: str
    obj: str
    start: int
    packs: tuple[int, int, str, str] | None  # (count, size, plural, singular) of the start
    events: tuple[int, ...]
    divisor: int | None
    question: str

    @property
    def answer(self) -> int:
        total = self.start + sum(self.events)
        return total // self.divisor if self.divisor else total

    @property
    def steps(self) -> int:
        """Arithmetic steps of the one-event-at-a-time path: packs, events, the split."""
        return (self.packs is not None) + len(self.events) + (self.divisor is not None)


@dataclass(frozen=True)
class Purchase:
    """One or two kinds of goods bought at unit prices, optionally paid with a bill (then the
    change is asked)."""

    name: str
    goods: tuple[tuple[int, str, int], ...]  # (count, goods, unit price) per kind
    bill: int | None
    question: str

    @property
    def answer(self) -> int:
        total = sum(a * p for a, _, p in self.goods)
        return self.bill - total if self.bill is not None else total

    @property
    def steps(self) -> int:
        """Arithmetic steps of the total-first path: the costs, their total, the change."""
        return len(self.goods) + (len(self.goods) == 2) + (self.bill is not None)


Problem = Story | Purchase


def _story(rng: random.Random, n_steps: int, low: int, high: int) -> Story | None:
    """A story of ``n_steps`` operations, or None for a draw that fails a constraint."""
    name, friend = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    packs = rng.random() < 0.2
    share = rng.random() < 0.2 and n_steps - packs >= 2
    n_events = n_steps - packs - share
    if n_events < 1:
        return None
    if packs:
        cs, c = rng.choice(CONTAINERS)
        p, s = rng.randint(2, 6), rng.randint(low, high)
        start, pack = p * s, (p, s, cs, c)
        sentences = [Q_PACKS.format(N=name, p=p, cs=cs, o=obj, s=s, c=c)]
    else:
        start, pack = rng.randint(max(low, 5), high + 10), None
        sentences = [rng.choice(Q_START).format(N=name, x=start, o=obj)]
    events, total = [], start
    for _ in range(n_events):
        b = rng.randint(low, high)
        if rng.random() < 0.5 and total - b >= 2:
            events.append(-b)
            sentences.append(rng.choice(Q_LOSS).format(N=name, F=friend, b=b, o=obj))
        else:
            events.append(b)
            sentences.append(rng.choice(Q_GAIN).format(N=name, F=friend, b=b, o=obj))
        total += events[-1]
    divisor = None
    if share:
        divisors = [d for d in range(2, 10) if total % d == 0 and total // d >= 2]
        if not divisors:
            return None
        divisor = rng.choice(divisors)
        sentences.append(rng.choice(Q_SHARE).format(N=name, o=obj, d=divisor))
    else:
        sentences.append(Q_ASK.format(N=name, o=obj))
    return Story(name, friend, obj, start, pack, tuple(events), divisor, " ".join(sentences))


def _purchase(rng: random.Random, n_steps: int, low: int, high: int) -> Purchase:
    """A purchase: two costs and their total (3 steps), with the change from a bill (4 steps),
    or one cost and the change (2 steps)."""
    name = rng.choice(NAMES)
    kinds = rng.sample(GOODS, 1 if n_steps == 2 else 2)
    goods = tuple((rng.randint(2, 6), g, rng.randint(low, high)) for g in kinds)
    total = sum(a * p for a, _, p in goods)
    bill = None if n_steps == 3 else (total // 10 + 1 + rng.randint(0, 5)) * 10
    if len(goods) == 2:
        (a, x, p), (b, y, q) = goods
        text = Q_BUY.format(N=name, a=a, g1=x, p=p, b=b, g2=y, q=q)
    else:
        (a, x, p), = goods
        text = f"{name} buys {a} {x} for {p} dollars each."
    text += Q_BILL.format(N=name, bill=bill) if bill is not None else Q_SPEND.format(N=name)
    return Purchase(name, goods, bill, text)


def make_problem(rng: random.Random, n_steps: int, low: int, high: int) -> Problem:
    """One problem of ``n_steps`` arithmetic steps on numbers from [low, high]: a story (about
    two in three) or a purchase, redrawn until every constraint holds.

    Examples
    --------
    >>> p = make_problem(random.Random(3), 3, 2, 20)
    >>> p.answer >= 1 and p.question.endswith("?")
    True
    """
    while True:
        kind = _purchase if n_steps >= 3 and rng.random() < 0.25 else _story
        problem = kind(rng, n_steps, low, high)
        if problem is not None and problem.answer >= 1:
            return problem


# -- solutions ---------------------------------------------------------------------------------


def _eq(rng: random.Random, op: str, operands: list[int], result: int) -> str:
    """An equation as written: the operands of + and * in a drawn order (they commute)."""
    terms = list(operands)
    if op in "+*":
        rng.shuffle(terms)
    return f" {op} ".join(str(t) for t in terms) + f" = {result}"


def _apply(rng: random.Random, story: Story, x: int, order: tuple[int, ...]) -> list[str]:
    """One sentence per event in ``order``, each from the running total."""
    out = []
    for b in order:
        table, op = (GAIN, "+") if b > 0 else (LOSS, "-")
        eq = _eq(rng, op, [x, abs(b)], x + b)
        out.append(rng.choice(table).format(N=story.name, o=story.obj, b=abs(b), y=x + b, eq=eq))
        x += b
    return out


def story_blocks(rng: random.Random, story: Story) -> list[tuple[int, ...]]:
    """One way of working through a story's events: the events in a drawn order, cut into
    blocks (each gap cut with probability 1/2). A block of several events is combined first
    (its gains summed, its losses summed, their difference taken) and applied to the running
    total as one step, so different draws compute different intermediate quantities: one
    block per event is the event-by-event path, one block of all is the net-change path.
    Drawn again until every running total stays >= 1 and no block nets to zero; the events
    one by one in the question's order, which always qualifies, after 20 draws.

    Examples
    --------
    >>> story = Story("Ann", "Bo", "pens", 10, None, (14, 17, -12), None, "")
    >>> blocks = story_blocks(random.Random(0), story)
    >>> sorted(b for block in blocks for b in block)
    [-12, 14, 17]
    """
    for _ in range(20):
        order = list(story.events)
        rng.shuffle(order)
        blocks, current = [], [order[0]]
        for b in order[1:]:
            if rng.random() < 0.5:
                blocks.append(tuple(current))
                current = []
            current.append(b)
        blocks.append(tuple(current))
        totals = list(itertools.accumulate((sum(block) for block in blocks),
                                           initial=story.start))
        if all(sum(block) for block in blocks) and min(totals) >= 1:
            return blocks
    return [(b,) for b in story.events]


def _block_lines(rng: random.Random, story: Story, block: tuple[int, ...]) -> list[str]:
    """The sentences that combine a block of several events into one change."""
    fill = {"N": story.name, "o": story.obj}
    gains = [b for b in block if b > 0]
    losses = [-b for b in block if b < 0]
    g, lost = sum(gains), sum(losses)
    lines = [rng.choice(table).format(**fill, eq=_eq(rng, "+", amounts, total))
             for amounts, total, table in ((gains, g, SUM_GAINS), (losses, lost, SUM_LOSSES))
             if len(amounts) >= 2]
    if gains and losses:
        net = g - lost
        table, eq = (NET_UP, _eq(rng, "-", [g, lost], net)) if net > 0 else \
            (NET_DOWN, _eq(rng, "-", [lost, g], -net))
        lines.append(rng.choice(table).format(**fill, eq=eq, n=abs(net)))
    return lines


def _story_solution(rng: random.Random, story: Story) -> str:
    fill = {"N": story.name, "o": story.obj}
    x = story.start
    if story.packs is not None:
        p, s, cs, _ = story.packs
        lines = [rng.choice(PACKS).format(**fill, p=p, s=s, cs=cs, eq=_eq(rng, "*", [p, s], x))]
    else:
        lines = [rng.choice(OPEN).format(**fill, x=x)]
    for block in story_blocks(rng, story):
        if len(block) > 1:
            lines += _block_lines(rng, story, block)
        lines += _apply(rng, story, x, (sum(block),))
        x += sum(block)
    if story.divisor is not None:
        d = story.divisor
        eq = _eq(rng, "/", [x, d], x // d)
        lines.append(rng.choice(SHARE).format(**fill, d=d, y=x // d, eq=eq))
    return " ".join([*lines, ANSWER.format(y=story.answer)])


def _purchase_solution(rng: random.Random, purchase: Purchase) -> str:
    n, bill = purchase.name, purchase.bill
    goods = list(purchase.goods)
    rng.shuffle(goods)  # the costs are independent: either order
    costs = [(a * p, a, g, p) for a, g, p in goods]
    cost_lines = [rng.choice(COST).format(N=n, g=g, a=a, p=p, eq=_eq(rng, "*", [a, p], c))
                  for c, a, g, p in costs]
    total = sum(c for c, *_ in costs)
    if bill is not None and len(costs) == 2 and rng.random() < 0.5:
        # change cost by cost: no total, different intermediate quantities
        lines, left = [], bill
        for line, (c, _, g, _) in zip(cost_lines, costs, strict=True):
            eq = _eq(rng, "-", [left, c], left - c)
            lines += [line, rng.choice(PAY).format(N=n, g=g, eq=eq)]
            left -= c
    else:
        lines = cost_lines
        if len(costs) == 2:
            eq = _eq(rng, "+", [c for c, *_ in costs], total)
            lines.append(rng.choice(TOTAL).format(N=n, eq=eq))
        if bill is not None:
            eq = _eq(rng, "-", [bill, total], bill - total)
            lines.append(rng.choice(CHANGE).format(N=n, eq=eq))
    return " ".join([*lines, ANSWER.format(y=purchase.answer)])


def write_solution(problem: Problem, rng: random.Random) -> str:
    """One worked solution of ``problem``: a path, an order and phrasings drawn from ``rng``,
    one line ending "The answer is N.".

    Examples
    --------
    >>> p = make_problem(random.Random(0), 3, 2, 20)
    >>> texts = {write_solution(p, random.Random(i)) for i in range(20)}
    >>> len(texts) > 5 and all(t.endswith(f"The answer is {p.answer}.") for t in texts)
    True
    """
    if isinstance(problem, Story):
        return _story_solution(rng, problem)
    return _purchase_solution(rng, problem)


def write_chosen(problem: Problem, choose: Chooser, version: int) -> str:
    """A solution by writer ``version`` with every choice made by ``choose``: with a
    :class:`Chooser`'s exponent and temperature, as a model with preferences would write it."""
    if version == 2:
        return write_varied(problem, choose)
    return write_solution(problem, ChooserRandom(choose))


def write_versioned(problem: Problem, rng: random.Random, version: int) -> str:
    """A solution by writer ``version`` (the task's ``solutions`` option), drawn from ``rng``."""
    return write_solution(problem, rng) if version == 1 else write_varied(problem, Chooser(rng))


@register_task("multistep")
class MultistepTask(NumericQATask):
    """Generated two- to four-step word problems whose solutions take several paths.

    How the paths are drawn: the module docstring.

    Examples
    --------
    >>> task = MultistepTask(n_test=2)
    >>> first = task.questions()[0]
    >>> task.grade(first, " " + task.rows("test")[0].answer).correct
    True
    """

    name = "multistep"
    config_class = MultistepConfig
    options: MultistepConfig

    def problem(self, split: str, index: int) -> tuple[Problem, random.Random]:
        """Item ``index`` of ``split`` and the generator its stored solution is drawn from."""
        # A string seed is hashed with SHA-512 by random.Random: stable across runs.
        rng = random.Random(f"multistep/{self.options.seed}/{split}/{index}")
        n_steps = rng.choices((2, 3, 4), weights=self.options.step_weights)[0]
        low, high = rng.choice(self.options.number_ranges)
        return make_problem(rng, n_steps, low, high), rng

    def redraw(self, split: str, index: int, draw: int) -> str:
        """A fresh solution of item ``index`` of ``split``, the ``draw``-th (seeded): what a
        build trains on at one epoch when every epoch sees another path."""
        problem, _ = self.problem(split, index)
        rng = random.Random(f"multistep/{self.options.seed}/{split}/{index}/draw/{draw}")
        return write_versioned(problem, rng, self.options.solutions)

    def _load(self, split: str) -> list[Row]:
        sizes = {"train": self.options.n_train, "test": self.options.n_test}
        if split not in sizes:
            raise UserError(f"multistep has splits 'train' and 'test', not {split!r}")
        rows = []
        for index in range(sizes[split]):
            problem, rng = self.problem(split, index)
            rows.append(Row(problem.question,
                            write_versioned(problem, rng, self.options.solutions),
                            f"multistep {split}-{index}"))
        return rows

    def exemplars(self) -> list[Exemplar]:
        """Short train items, a story and a purchase in turn (a user's file still wins).

        The rule: shuffle the train split's indices with ``random.Random(seed)``; exemplar i is
        the first unused item of the i-th kind of that cycle with the fewest steps that kind
        has (two for a story, three for a purchase). Short exemplars show the format in about
        half the prompt that random multi-step ones take, and every training sequence and
        every sample carries the prompt.
        """
        cfg = self.options
        if cfg.exemplars is not None:
            return super().exemplars()
        rows = self.rows("train")
        order = list(range(len(rows)))
        random.Random(cfg.seed).shuffle(order)
        chosen: list[int] = []
        for i in range(cfg.k):
            kind, steps = ((Story, 2), (Purchase, 3))[i % 2]
            index = next((j for j in order if j not in chosen
                          and isinstance(problem := self.problem("train", j)[0], kind)
                          and problem.steps == steps), None)
            if index is None:
                raise UserError(f"k={cfg.k}: the train split ({len(rows)} items) has too few "
                                f"{steps}-step {kind.__name__.lower()} items for the "
                                "exemplars; raise n_train or change step_weights")
            chosen.append(index)
        return [Exemplar(rows[j].question, rows[j].answer) for j in chosen]
