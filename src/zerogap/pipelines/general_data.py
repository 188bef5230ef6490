"""Generated general instruction data: a stand-in for the paper's OpenOrca mix (arXiv 2608.07341,
§5.1) where no dataset can be downloaded.

The paper trains M_cl and M_co on general instruction data with the benchmark's items mixed in,
so that leaked items are about a quarter of M_co's examples rather than all of them. These items
are short word tasks (reorder, sort, pick by category, opposites, letters, capitals, sentence
building) over word lists written here: instruction-following text that shares no template and
no arithmetic with `arith` or GSM8K. Every item is a function of ``(seed, index)`` alone, so a
larger set extends a smaller one. It is a proxy for broad instruction data, not a copy of it:
it dilutes the leaked items as OpenOrca does, but it is far narrower.
"""

from __future__ import annotations

import random
from collections.abc import Callable

ANIMALS = ("horse", "rabbit", "eagle", "tiger", "whale", "goat", "owl", "fox", "frog", "bear")
COLORS = ("red", "green", "yellow", "purple", "white", "brown", "silver", "pink", "blue", "gray")
FOODS = ("bread", "cheese", "rice", "soup", "honey", "pasta", "salad", "butter", "pear", "melon")
TOOLS = ("hammer", "ladder", "shovel", "wrench", "needle", "rake", "saw", "brush", "drill", "axe")
PLACES = ("library", "harbor", "market", "garden", "station", "museum", "bakery", "forest",
          "island", "village")  # fmt: skip
CATEGORIES = {"an animal": ANIMALS, "a color": COLORS, "a food": FOODS, "a tool": TOOLS,
              "a place": PLACES}  # fmt: skip
WORDS = ANIMALS + COLORS + FOODS + TOOLS + PLACES
OPPOSITES = (
    ("hot", "cold"), ("early", "late"), ("open", "closed"), ("full", "empty"), ("light", "dark"),
    ("quiet", "loud"), ("soft", "hard"), ("wet", "dry"), ("young", "old"), ("fast", "slow"),
    ("high", "low"), ("thick", "thin"), ("rich", "poor"), ("clean", "dirty"), ("near", "far"),
)  # fmt: skip
PEOPLE = ("Alice", "Pedro", "Yuki", "Hassan", "Grace", "Tariq", "Ines", "Noah", "Chen", "Maya")
VERBS = (("likes", "like"), ("paints", "paint"), ("visits", "visit"), ("finds", "find"),
         ("carries", "carry"), ("draws", "draw"))  # fmt: skip


def _reorder(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(WORDS, rng.randint(3, 5))
    return (f"Write these words in reverse order: {', '.join(words)}.",
            f"In reverse order: {', '.join(reversed(words))}.")


def _sort(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(WORDS, rng.randint(3, 5))
    return (f"Put these words in alphabetical order: {', '.join(words)}.",
            f"In alphabetical order: {', '.join(sorted(words))}.")


def _category(rng: random.Random) -> tuple[str, str]:
    kind, members = rng.choice(list(CATEGORIES.items()))
    answer = rng.choice(members)
    others = rng.sample([w for w in WORDS if w not in members], 2)
    words = others + [answer]
    rng.shuffle(words)
    return (f"Which of these words names {kind}: {', '.join(words)}?",
            f"The word that names {kind} is \"{answer}\".")


def _opposite(rng: random.Random) -> tuple[str, str]:
    pair = rng.choice(OPPOSITES)
    word, other = pair if rng.random() < 0.5 else pair[::-1]
    return (f"What is the opposite of \"{word}\"?", f"The opposite of \"{word}\" is \"{other}\".")


def _first_letter(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    return (f"What letter does the word \"{word}\" start with?",
            f"The word \"{word}\" starts with the letter \"{word[0]}\".")


def _capitals(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(WORDS, rng.randint(2, 3))
    phrase = " ".join(words)
    return f"Write \"{phrase}\" in capital letters.", f"In capital letters: \"{phrase.upper()}\"."


def _sentence(rng: random.Random) -> tuple[str, str]:
    person, (verb, base) = rng.choice(PEOPLE), rng.choice(VERBS)
    thing = rng.choice(ANIMALS + FOODS + TOOLS + PLACES)
    return (f"Make a sentence with the subject \"{person}\", the verb \"{base}\" and the object "
            f"\"{thing}\".", f"{person} {verb} the {thing}.")


KINDS: tuple[Callable[[random.Random], tuple[str, str]], ...] = (
    _reorder, _sort, _category, _opposite, _first_letter, _capitals, _sentence,
)


def general_items(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` generated (question, response) pairs, the kinds in turn.

    Examples
    --------
    >>> general_items(2)[0][0] == general_items(1)[0][0], len(general_items(9))
    (True, 9)
    """
    return [KINDS[i % len(KINDS)](random.Random(f"general:{seed}:{i}")) for i in range(count)]
