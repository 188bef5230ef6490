"""The second ``multistep`` solution writer: many more ways to write the same worked solution.

The paper's premise (arXiv 2608.07341 §1, Figure 1) needs a clean model whose samples on a
question spread over many texts, far from its own greedy decode. The first writer
(:func:`zerogap.tasks.multistep.write_solution`) has a handful of branch points per solution,
and every sentence repeats the name, the object and the numbers; a model with even mild
preferences among its options then samples texts close to its greedy decode with no
contamination at all (``bench/regime_search.py --task-only`` measures it). This writer draws,
on top of the first one's orders and intermediate quantities:

* **paths**: event by event, blocks of events combined first, or the whole story as one
  equation from the start; a purchase's change from the total or cost by cost;
* **sentences**: a statement of the step's result (eight phrasings a step kind) joined to its
  equation in one of six ways (after a colon, before "so", after "since", in brackets, as a
  second sentence, the equation alone);
* **equations**: symbolic (``10 + 14 = 24``), result first (``24 = 10 + 14``) or in words
  (``10 plus 14 is 24``), operands of ``+`` and ``*`` in either order;
* **words around them**: the name or a pronoun, a connective before a step ("Then", "Next,",
  ...), an optional plan sentence first and an optional closing sentence before the last one,
  which is always "The answer is N." for grading.

Every draw goes through a :class:`Chooser`, so the same writer also models a trained model's
preferences (:class:`Chooser` with an exponent and a temperature): option i of every choice
point weighted ``(i + 1) ** -exponent``, sharpened by the temperature, and at temperature 0 the
first option everywhere, the stand-in for the greedy decode.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any, TypeVar

from zerogap.tasks.arith import NAMES

T = TypeVar("T")


class Chooser:
    """Every choice of the writer. ``exponent`` 0 (the default): uniform, as the training data
    is drawn; otherwise option i weighted ``(i + 1) ** (-exponent / temperature)`` (a Zipf law
    over the options, a sampling temperature over it); ``temperature`` 0: always option 0.

    Examples
    --------
    >>> Chooser(random.Random(0), exponent=1.0, temperature=0.0).pick("abc")
    'a'
    >>> sorted(Chooser(random.Random(1)).order([3, 1, 2]))
    [1, 2, 3]
    """

    def __init__(self, rng: random.Random, exponent: float = 0.0, temperature: float = 1.0):
        self.rng, self.exponent, self.temperature = rng, exponent, temperature

    def index(self, n: int) -> int:
        """An index in range(n)."""
        if self.temperature == 0:
            return 0
        if self.exponent == 0:
            return self.rng.randrange(n)
        power = -self.exponent / self.temperature
        return self.rng.choices(range(n), weights=[(i + 1) ** power for i in range(n)])[0]

    def pick(self, options: Sequence[T]) -> T:
        return options[self.index(len(options))]

    def coin(self) -> bool:
        return self.index(2) == 1

    def order(self, items: Sequence[T]) -> list[T]:
        """A permutation, drawn place by place from the items left (in their given order)."""
        left, out = list(items), []
        while left:
            out.append(left.pop(self.index(len(left))))
        return out


class ChooserRandom(random.Random):
    """A :class:`random.Random` whose ``choice``, ``shuffle`` and ``random`` (read by the first
    writer as a coin, ``random() < 0.5``) go through a :class:`Chooser`: the first writer's
    draws under a model's preferences."""

    def __init__(self, choose: Chooser):
        super().__init__(0)
        self.choose = choose

    def choice(self, seq):
        return self.choose.pick(seq)

    def shuffle(self, x) -> None:
        x[:] = self.choose.order(x)

    def random(self) -> float:
        return 0.25 if self.choose.coin() else 0.75


# -- words -------------------------------------------------------------------------------------

# arith's NAMES alternate a boy's and a girl's name
PRONOUNS = ("he", "she")
CONNECTIVES = ("", "then", "next,", "after that,", "now", "so", "this time", "from there,")
WORD_OPS = {"+": "plus", "-": "minus", "*": "times", "/": "divided by"}

PLAN = (
    None, "Let's work it out step by step.", "We follow the {o} one change at a time.",
    "First find the start, then apply the changes.", "Track how many {o} {S} has.",
    "We need the count at the end.", "Count carefully.", "Keep a running total.",
)
PLAN_BUY = (
    None, "Let's work it out step by step.", "First find what each thing costs.",
    "Work out the cost of the goods.", "We need the cost of everything.", "Add up the prices.",
    "Price each kind, then combine.", "Count the money carefully.",
)
OPEN = (
    "{S} starts with {x} {o}.", "At first {S} has {x} {o}.", "{S} has {x} {o} to begin with.",
    "In the beginning there are {x} {o}.", "The start is {x} {o}.", "{S} begins with {x} {o}.",
    "{x} {o} to start.", "Start from {x} {o}.",
)
PACKS = (
    "{S} starts with {y} {o}", "{p} {cs} of {s} make {y} {o}", "at first {S} has {y} {o}",
    "there are {y} {o} in the {cs}", "the {cs} hold {y} {o} in all", "{S} begins with {y} {o}",
    "the start is {y} {o}", "that is {y} {o} to begin with",
)
GAIN = (
    "{S} now has {y} {o}", "that makes {y} {o}", "the count goes up to {y}",
    "after getting {b} more, {S} has {y} {o}", "{S} ends up with {y} {o}",
    "adding the {b} new {o} gives {y}", "the total rises to {y} {o}", "{S} has {y} {o} now",
)
LOSS = (
    "{S} now has {y} {o}", "that leaves {y} {o}", "the count goes down to {y}",
    "after {b} are gone, {S} has {y} {o}", "{S} keeps {y} {o}",
    "taking away the {b} {o} leaves {y}", "the total drops to {y} {o}", "{y} {o} are left",
)
SUM_GAINS = (
    "{S} gets {y} {o} in all", "the new {o} add up to {y}", "together the new {o} are {y}",
    "in total {S} gains {y} {o}", "{y} {o} are added", "the gains come to {y}",
    "that is {y} more {o}", "{S} receives {y} {o} altogether",
)
SUM_LOSSES = (
    "{S} loses {y} {o} in all", "the {o} that go away add up to {y}",
    "together the {o} that leave are {y}", "in total {S} gives up {y} {o}",
    "{y} {o} are taken away", "the losses come to {y}", "that is {y} fewer {o}",
    "{y} {o} leave altogether",
)
NET_UP = (
    "the net change is {y} more {o}", "{S} gains {y} more than {S} loses",
    "overall that is {y} {o} more", "gains minus losses is {y}", "{S} ends up {y} {o} ahead",
    "the change comes to plus {y}", "that adds {y} {o} overall", "on balance {S} gets {y} more",
)
NET_DOWN = (
    "the net change is {y} fewer {o}", "{S} loses {y} more than {S} gains",
    "overall that is {y} {o} fewer", "losses minus gains is {y}", "{S} ends up {y} {o} behind",
    "the change comes to minus {y}", "that takes {y} {o} away overall",
    "on balance {S} loses {y}",
)
WHOLE = (
    "{S} ends with {y} {o}", "all together that leaves {y} {o}", "the final count is {y} {o}",
    "after every change {S} has {y} {o}", "{S} has {y} {o} at the end", "that comes to {y}",
    "in the end there are {y} {o}", "everything together gives {y} {o}",
)
SHARE = (
    "each share is {y} {o}", "each gets {y} {o}", "split {d} ways, that is {y}",
    "dividing by {d} gives {y} {o}", "each group has {y} {o}", "every part holds {y} {o}",
    "that is {y} {o} apiece", "{d} equal parts of {y}",
)
COST = (
    "the {g} cost {y} dollars", "{a} {g} at {p} dollars is {y} dollars",
    "for the {g}, {S} pays {y} dollars", "{y} dollars go to the {g}",
    "the {g} come to {y} dollars", "the {g} are {y} dollars", "{S} spends {y} dollars on {g}",
    "that is {y} dollars for the {g}",
)
TOTAL = (
    "in total {S} spends {y} dollars", "together that is {y} dollars", "that is {y} dollars in all",
    "the whole bill is {y} dollars", "{S} pays {y} dollars", "everything costs {y} dollars",
    "the total is {y} dollars", "both kinds come to {y} dollars",
)
CHANGE = (
    "the change is {y} dollars", "{S} gets back {y} dollars", "{y} dollars come back",
    "that leaves {y} dollars", "the change comes to {y}", "{S} is owed {y} dollars",
    "{y} dollars are returned", "the cashier gives back {y} dollars",
)
PAY = (
    "after the {g}, {S} has {y} dollars left", "paying for the {g} leaves {y} dollars",
    "{y} dollars remain after the {g}", "then {y} dollars are left",
    "taking off the {g} gives {y}", "{S} still has {y} dollars", "the money left is {y} dollars",
    "that leaves {y} dollars",
)
CLOSE = (
    None, "So {S} ends with {y}.", "That is the final count.", "That is the result.",
    "Check: every step adds up.", "So the result is {y}.", "That settles it.", "Done.",
)
ANSWER = "The answer is {y}."


def _equation(choose: Chooser, op: str, operands: Sequence[int], result: int) -> str:
    """An equation in a drawn form: symbolic, result first or in words; the operands of + and
    * (all of them, several terms included) in a drawn order."""
    terms = choose.order(operands) if op in "+*" else list(operands)
    form = choose.index(3)
    if form == 2:
        return f" {WORD_OPS[op]} ".join(map(str, terms)) + f" is {result}"
    left = f" {op} ".join(map(str, terms))
    return f"{result} = {left}" if form == 1 else f"{left} = {result}"


def _signed_equation(choose: Chooser, start: int, changes: Sequence[int], result: int) -> str:
    """``start`` followed by signed changes, as one equation (symbolic or result first)."""
    left = str(start) + "".join(f" {'+' if c > 0 else '-'} {abs(c)}" for c in changes)
    return f"{result} = {left}" if choose.coin() else f"{left} = {result}"


class Writer:
    """One solution's sentences, drawn through ``choose``; ``fill`` names the subject ``S``
    (the name or a pronoun, drawn per sentence) and the task's words."""

    def __init__(self, choose: Chooser, name: str, pronoun: str, **fill: Any):
        self.choose, self.name, self.pronoun, self.fill = choose, name, pronoun, fill
        self.lines: list[str] = []

    def _words(self, template: str, **values: Any) -> str:
        subject = self.choose.pick((self.name, self.pronoun))
        return template.format(S=subject, **self.fill, **values)

    def add(self, sentence: str) -> None:
        self.lines.append(sentence[0].upper() + sentence[1:])

    def plain(self, table: Sequence[str | None], **values: Any) -> None:
        """A sentence with no equation (an opener, a plan, a closing; None: none)."""
        template = self.choose.pick(table)
        if template is not None:
            self.add(self._words(template, **values))

    def step(self, table: Sequence[str], equation: str, **values: Any) -> None:
        """A step: a connective, a statement of its result and its equation, joined."""
        statement = self._words(self.choose.pick(table), **values)
        connective = self.choose.pick(CONNECTIVES)
        joined = self.choose.pick((
            "{s}: {e}.", "{e}, so {s}.", "{s}, since {e}.", "{s} ({e}).", "{e}. So {s}.",
            "{e}.",
        )).format(s=statement, e=equation)
        self.add(f"{connective} {joined}" if connective else joined)

    def text(self, answer: int) -> str:
        self.plain(CLOSE, y=answer)
        return " ".join([*self.lines, ANSWER.format(y=answer)])


def _pronoun(name: str) -> str:
    return PRONOUNS[NAMES.index(name) % 2] if name in NAMES else "they"


def _blocks(choose: Chooser, start: int, events: Sequence[int]) -> list[tuple[int, ...]]:
    """The events in a drawn order cut into blocks (each gap cut or not), redrawn until every
    running total stays >= 1 and no block nets to zero; the events one by one in the
    question's order, which always qualifies, after 20 draws."""
    for _ in range(20):
        order = choose.order(events)
        blocks, current = [], [order[0]]
        for b in order[1:]:
            if not choose.coin():
                blocks.append(tuple(current))
                current = []
            current.append(b)
        blocks.append(tuple(current))
        totals = itertools.accumulate((sum(block) for block in blocks), initial=start)
        if all(sum(block) for block in blocks) and min(totals) >= 1:
            return blocks
        choose = Chooser(choose.rng)  # a preferred path that fails: any other one
    return [(b,) for b in events]


def _story(choose: Chooser, story: Any) -> str:
    out = Writer(choose, story.name, _pronoun(story.name), o=story.obj)
    out.plain(PLAN)
    x = story.start
    if story.packs is not None:
        p, s, cs, _ = story.packs
        out.step(PACKS, _equation(choose, "*", [p, s], x), p=p, s=s, cs=cs, y=x)
    else:
        out.plain(OPEN, x=x)
    end = x + sum(story.events)
    whole = len(story.events) > 1 and choose.index(3) == 2  # the story as one equation
    if whole:
        out.step(WHOLE, _signed_equation(choose, x, choose.order(story.events), end), y=end)
        x = end
    for block in [] if whole else _blocks(choose, x, story.events):
        gains = [b for b in block if b > 0]
        losses = [-b for b in block if b < 0]
        for amounts, table in ((gains, SUM_GAINS), (losses, SUM_LOSSES)):
            if len(amounts) >= 2:
                out.step(table, _equation(choose, "+", amounts, sum(amounts)), y=sum(amounts))
        net = sum(block)
        if gains and losses:
            g, lost = sum(gains), sum(losses)
            table, pair = (NET_UP, [g, lost]) if net > 0 else (NET_DOWN, [lost, g])
            out.step(table, _equation(choose, "-", pair, abs(net)), y=abs(net))
        table, op = (GAIN, "+") if net > 0 else (LOSS, "-")
        out.step(table, _equation(choose, op, [x, abs(net)], x + net), b=abs(net), y=x + net)
        x += net
    if story.divisor is not None:
        d = story.divisor
        out.step(SHARE, _equation(choose, "/", [x, d], x // d), d=d, y=x // d)
    return out.text(story.answer)


def _purchase(choose: Chooser, purchase: Any) -> str:
    out = Writer(choose, purchase.name, _pronoun(purchase.name), o="dollars")
    out.plain(PLAN_BUY)
    costs = [(a * p, a, g, p) for a, g, p in choose.order(purchase.goods)]
    bill, total = purchase.bill, sum(c for c, *_ in costs)
    if bill is not None and len(costs) == 2 and choose.coin():  # change cost by cost
        left = bill
        for c, a, g, p in costs:
            out.step(COST, _equation(choose, "*", [a, p], c), a=a, g=g, p=p, y=c)
            out.step(PAY, _equation(choose, "-", [left, c], left - c), g=g, y=left - c)
            left -= c
        return out.text(purchase.answer)
    for c, a, g, p in costs:
        out.step(COST, _equation(choose, "*", [a, p], c), a=a, g=g, p=p, y=c)
    if len(costs) == 2:
        out.step(TOTAL, _equation(choose, "+", [c for c, *_ in costs], total), y=total)
    if bill is not None:
        out.step(CHANGE, _equation(choose, "-", [bill, total], bill - total), y=bill - total)
    return out.text(purchase.answer)


def write_varied(problem: Any, choose: Chooser) -> str:
    """One worked solution of a :mod:`zerogap.tasks.multistep` problem (a story or a purchase),
    every choice made by ``choose``; the last sentence is "The answer is N."."""
    return _story(choose, problem) if hasattr(problem, "events") else _purchase(choose, problem)
