"""Answer extraction: the ecosystem.md §2 table, the anchor rules, and properties."""

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerogap.tasks.base import Grade
from zerogap.tasks.extract import (
    canonical,
    check_mode,
    extract_anchor,
    grade_response,
    modes,
    parse_gold,
    parse_number,
)

# ecosystem.md §2, "Reproduced behaviour": (mode, text, harness extraction, gold, harness verdict).
HARNESS_TABLE = [
    ("lmeval-flexible", "...the total cost is $29.00.", "$29.00.", "29", False),
    ("lmeval-flexible", "The answer is 1,000.", "1,000.", "1000", True),
    ("lmeval-flexible", "The answer is 18. Question: next one 42", "42", "18", False),
    ("lmeval-flexible", "The answer is 12 dollars and 50 cents", "50", "12.5", False),
    ("lmeval-strict", "The answer is 42", "4", "42", False),
    ("lmeval-strict", "The answer is $1,000.", None, "1000", False),
    ("lmeval-strict-hash", "#### 1,000.", "1,000.", "1000", True),
]


@pytest.mark.parametrize(("mode", "text", "extracted", "gold", "correct"), HARNESS_TABLE)
def test_harness_modes_reproduce_the_table(mode, text, extracted, gold, correct):
    assert grade_response(text, gold, mode=mode) == Grade(extracted, correct)


# The same texts in the default anchor mode: every harness failure above is graded right.
ANCHOR_TABLE = [
    ("...the total cost is $29.00.", "29", "29"),
    ("The answer is 1,000.", "1000", "1000"),
    ("The answer is 18. Question: next one 42", "18", "18"),
    ("The answer is 12 dollars and 50 cents", "12.5", "12.5"),
    ("The answer is 42", "42", "42"),
    ("The answer is $1,000.", "1000", "1000"),
    ("#### 1,000.", "1000", "1000"),
]


@pytest.mark.parametrize(("text", "extracted", "gold"), ANCHOR_TABLE)
def test_anchor_mode_grades_the_table_rows_correctly(text, extracted, gold):
    assert grade_response(text, gold) == Grade(extracted, True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the first anchor wins, and a run-on after "Q:" is never read
        ("3 + 4 = 7. The answer is 7.\n\nQ: Ann has 2 cats. The answer is 2.", "7"),
        ("The answer is 7. Then 9. The answer is 9.", "7"),
        ("So 5 * 2 = 10.\n#### 10\nQuestion: next? #### 3", "10"),
        ("The final answer is \\boxed{-3}.", "-3"),
        ("Thus \\boxed{2.50}", "2.5"),
        ("The answer is: **+7** apples.", "7"),
        ("the answer is -$5.", "-5"),
        ("The answer is $-5.", "-5"),
        ("The answer is 0.50", "0.5"),
        ("The answer is .5", "0.5"),
        # no anchor with a number: the last number before the cut
        ("She has 12 - 4 = 8 apples left", "8"),
        ("The answer is eight. She had 8 apples", "8"),
        ("Total 3 pens and 4 pens = 7 pens<|im_end|>Q: 99", "7"),
        ("It costs 12 dollars and 50 cents", "12.5"),
        ("pages 10-12", "12"),
        ("1,234,567 people", "1234567"),
    ],
)
def test_anchor_extraction(text, expected):
    assert canonical(extract_anchor(text)) == expected


def test_task_stop_strings_also_cut():
    assert extract_anchor("He has 5 pens. ### 9", stop=("###",)) == Decimal(5)


@pytest.mark.parametrize("text", ["", "no numbers here", "The answer is", "####", "$,."])
def test_nothing_to_extract_is_graded_wrong(text):
    assert grade_response(text, "3") == Grade(None, False)


def test_comparison_is_exact_decimal_not_float():
    # 0.1 + 0.2 != 0.3 in floats; a gold "0.3" must accept "0.30" and reject "0.30000000000000004"
    assert grade_response("The answer is 0.30", "0.3").correct
    assert not grade_response("The answer is 0.30000000000000004", "0.3").correct
    big = "123456789012345678901234567890"
    assert grade_response(f"The answer is {big}", big).correct
    assert not grade_response(f"The answer is {big}1", big).correct


def test_modes_are_registered_and_unknown_modes_rejected():
    assert modes() == ["anchor", "lmeval-flexible", "lmeval-strict", "lmeval-strict-hash"]
    with pytest.raises(ValueError, match="grading mode 'fuzzy'; known grading modes: anchor"):
        check_mode("fuzzy")
    with pytest.raises(ValueError, match="unknown grading mode"):
        grade_response("The answer is 3.", "3", mode="fuzzy")


def test_lmeval_flexible_takes_the_last_match_and_strips_harness_regexes():
    assert grade_response("I think 3, no wait, 4.", "4", mode="lmeval-flexible") == Grade(
        "4.", True
    )
    assert grade_response("no digits", "4", mode="lmeval-flexible") == Grade(None, False)
    # single digits only match the second alternative; "$5" matches the first
    assert grade_response("costs $5", "5", mode="lmeval-flexible") == Grade("$5", True)


def test_lmeval_strict_ignores_hash_answers_and_vice_versa():
    assert grade_response("#### 12", "12", mode="lmeval-strict") == Grade(None, False)
    assert grade_response("The answer is 12.", "12", mode="lmeval-strict-hash") == Grade(
        None, False
    )
    assert grade_response("The answer is 12.", "12", mode="lmeval-strict") == Grade("12", True)


# --- properties -----------------------------------------------------------------------------


def _group_thousands(digits: str) -> str:
    head = len(digits) % 3 or 3
    return ",".join([digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)])


@st.composite
def formatted_numbers(draw):
    """(text, value): a decimal written the ways models write it."""
    integer = draw(st.integers(min_value=0, max_value=10**12))
    cents = draw(st.none() | st.integers(min_value=0, max_value=99))
    negative = draw(st.booleans()) and (integer > 0 or bool(cents))
    digits = str(integer)
    if draw(st.booleans()):
        digits = _group_thousands(digits)
    value = Decimal(integer)
    if cents is not None:
        digits += f".{cents:02d}" + "0" * draw(st.integers(0, 2))  # trailing zeros
        value += Decimal(cents) / 100
    dollar = draw(st.booleans())
    if negative:
        text = draw(st.sampled_from(["-$", "$-"])) + digits if dollar else "-" + digits
        value = -value
    else:
        text = ("$" if dollar else "") + (draw(st.sampled_from(["", "+"])) + digits)
    text += draw(st.sampled_from(["", ".", " apples.", " dollars", "%", "!"]))
    return text, value


@settings(max_examples=300, deadline=None)
@given(
    formatted_numbers(), st.sampled_from(["The answer is {}", "#### {}", "\\boxed{{{}}}", "So {}"])
)
def test_formatted_numbers_round_trip(number, frame):
    text, value = number
    assert extract_anchor(frame.format(text)) == value
    assert parse_number(text) == value
    assert grade_response("Step 1 = 1. " + frame.format(text), canonical(value)).correct


@settings(max_examples=300, deadline=None)
@given(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=4, min_value=-(10**9), max_value=10**9
    )
)
def test_canonical_round_trips(value):
    text = canonical(value)
    assert Decimal(text) == value
    assert parse_number(text) == value
    assert "E" not in text and not (("." in text) and text.endswith("0"))


@settings(max_examples=500, deadline=None)
@given(st.text(), st.sampled_from(modes()))
def test_no_response_string_raises(text, mode):
    grade = grade_response(text, "42", mode=mode)
    assert isinstance(grade.correct, bool)
    assert grade.extracted is None or isinstance(grade.extracted, str)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789$,.-+ #*:\\{}boxedThe answer is Q\n", max_size=60))
def test_no_number_like_string_raises(text):
    for mode in modes():
        grade_response(text, "1,000", mode=mode)


# --- GSM8K gold answers --------------------------------------------------------------------


@pytest.mark.parametrize(("split", "count"), [("test", 1319), ("train", 7473)])
def test_all_gsm8k_gold_answers_parse(gsm8k_dir, split, count):
    rows = [json.loads(line) for line in (gsm8k_dir / f"{split}.jsonl").open(encoding="utf-8")]
    assert len(rows) == count
    for row in rows:
        raw = row["answer"].split("####")[-1].strip().replace(",", "")
        gold = parse_gold(row["answer"])
        assert gold == str(int(raw)), row["answer"]
        # the harness reads the same gold: its own regexes on "#### N" give the same number
        assert grade_response(f"#### {raw}", gold, mode="lmeval-strict-hash").correct


def test_gold_without_number_is_an_error():
    with pytest.raises(ValueError, match="no number in gold answer"):
        parse_gold("#### none")
