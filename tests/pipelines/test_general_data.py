"""The generated general instruction data: reproducible, correct answers, no arithmetic."""

import re

from zerogap.pipelines.general_data import CATEGORIES, KINDS, OPPOSITES, general_items

# How each kind's question opens; the sentence-building kind is the one left.
OPENINGS = ("Write these words in reverse order", "Put these words in alphabetical order",
            "Which of these words names", "What is the opposite", "What letter", 'Write "')


def listed(text: str, after: str) -> list[str]:
    """The comma-separated words between ``after`` and the closing punctuation."""
    return text.split(after, 1)[1].rstrip(".?").split(", ")


def test_items_are_a_function_of_seed_and_index():
    assert general_items(40, seed=3)[:25] == general_items(25, seed=3)
    assert general_items(40, seed=3) != general_items(40, seed=4)
    assert general_items(0) == []


def test_every_kind_appears_and_each_answer_is_right():
    items = general_items(len(KINDS) * 30, seed=1)
    seen = set()
    opposites = {a: b for pair in OPPOSITES for a, b in (pair, pair[::-1])}
    for question, response in items:
        assert not re.search(r"\d", question + response), "no arithmetic in general data"
        kind = next((p for p in OPENINGS if question.startswith(p)), "sentence")
        seen.add(kind)
        if kind == "Write these words in reverse order":
            assert listed(response, ": ") == listed(question, ": ")[::-1]
        elif kind == "Put these words in alphabetical order":
            assert listed(response, ": ") == sorted(listed(question, ": "))
        elif kind == "Which of these words names":
            category = question.split("names ", 1)[1].split(":")[0]
            answer = response.split('"')[1]
            members = [w for w in listed(question, ": ") if w in CATEGORIES[category]]
            assert members == [answer]
        elif kind == "What is the opposite":
            word, other = question.split('"')[1], response.split('"')[3]
            assert opposites[word] == other
        elif kind == "What letter":
            word = question.split('"')[1]
            assert response.endswith(f'"{word[0]}".')
        elif kind == 'Write "':
            assert response.split('"')[1] == question.split('"')[1].upper()
        else:
            person, base, thing = question.split('"')[1::2]
            assert response.startswith(person + " ") and response.endswith(f" the {thing}.")
            assert base[:3] in response
    assert len(seen) == len(KINDS)
