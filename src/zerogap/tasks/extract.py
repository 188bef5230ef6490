"""Answer extraction and grading for numeric tasks.

A grading error shows up as a fake gap between two models, so every mode here is exact and
registered by name; the clean and the mitigated model of one comparison must use the same mode.

Modes
-----
``anchor`` (the default)
    Cut the response at the first stop or run-on marker (``Q:``, ``Question:``, end-of-text
    tokens, plus the task's stop strings). In what is left, take the number after the first
    anchor: "The answer is", "The final answer is", ``####`` or ``\\boxed{``. Without an anchor
    that carries a number, take the last number before the cut. Numbers are normalised (``$``,
    thousands separators, a leading ``+``, a trailing period, trailing zeros, a unit word after
    the number, "12 dollars and 50 cents") and compared as exact decimals.
``lmeval-strict``
    lm-evaluation-harness ``gsm8k_cot`` ``strict-match``: the regex
    ``The answer is (\\-?[0-9\\.\\,]+).``, first match, then ``exact_match`` with the harness's
    ``regexes_to_ignore`` and ``ignore_case``. Its known failure is kept: in "The answer is 42"
    at the end of the text, the unescaped final ``.`` eats the last digit.
``lmeval-strict-hash``
    lm-evaluation-harness ``gsm8k`` ``strict-match``: the regex ``#### (\\-?[0-9\\.\\,]+)``.
``lmeval-flexible``
    lm-evaluation-harness ``flexible-extract``: the last match of
    ``(-?[$0-9.,]{2,})|(-?[0-9]+)``. Known failures kept: ``$29.00`` is not 29, a run-on's last
    number wins.

The harness modes grade the text as given: the harness stops generation at its ``until``
strings, which the sampling engine reproduces with the task's stop strings.

Examples
--------
>>> grade_response("So she pays $29.00.", "29").correct
True
>>> grade_response("So she pays $29.00.", "29", mode="lmeval-flexible")
Grade(extracted='$29.00.', correct=False)
>>> grade_response("The answer is 18. Question: what is 6*7? 42", "18").extracted
'18'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal, InvalidOperation

from zerogap.errors import DataError
from zerogap.registry import Registry
from zerogap.tasks.base import Grade

# Markers after which a response has run on into a new item (the harness's gsm8k/gsm8k_cot
# ``until`` strings and common end-of-text tokens).
RUN_ON_MARKERS = ("Q:", "Question:", "</s>", "<|im_end|>", "<|endoftext|>")

# A number as models write it: optional sign and dollar sign in either order, digits with or
# without comma thousands groups, optional decimals; or a bare ".5". ASCII digits only.
_NUMBER = (
    r"(?:(?<![0-9A-Za-z])(?P<sign>[-+\u2212]))?(?:\$\s?(?P<sign2>[-+\u2212])?)?"
    r"(?<![0-9.])(?P<digits>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?![0-9])"
)
_NUMBER_RE = re.compile(_NUMBER)
# "12 dollars and 50 cents" is one amount, 12.50.
_DOLLARS_CENTS_RE = re.compile(
    r"\s*(?:dollars?|bucks?)\s+and\s+(?P<cents>[0-9]{1,2})\s+cents?\b", re.IGNORECASE
)
_ANCHOR_RE = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|####|\\boxed\{)[\s:*=]*", re.IGNORECASE)

_GOLD_ANCHOR_RE = re.compile(r"the\s+(?:final\s+)?answer\s+is", re.IGNORECASE)
# The anchors above as the tasks' solutions write them ("... The answer is N."): the answer
# slot RailCap's protect="answer" leaves alone begins after one of them.
ANSWER_MARKERS = ("The answer is", "the answer is", "The final answer is", "the final answer is")
_EXPONENT_RE = re.compile(r"[eE][-+]?[0-9]")

LMEVAL_COT_STRICT = r"The answer is (\-?[0-9\.\,]+)."
LMEVAL_HASH_STRICT = r"#### (\-?[0-9\.\,]+)"
LMEVAL_FLEXIBLE = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"
LMEVAL_IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")
LMEVAL_INVALID = "[invalid]"

Extractor = Callable[[str, str, tuple[str, ...]], Grade]
_EXTRACTORS: Registry[Extractor] = Registry("grading mode")

register_extractor = _EXTRACTORS.register
"""Decorator: make ``fn(response, gold, stop) -> Grade`` available as grading mode ``name``."""

modes = _EXTRACTORS.names
"""Names of the registered grading modes, sorted."""


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is registered, else raise ``ValueError`` listing the known modes."""
    _EXTRACTORS.get(mode)
    return mode


def target_grader(mode: str = "anchor") -> Callable[[Sequence[str], str], list[bool]]:
    """Grade a document's responses against its raw target (a GSM8K answer, "The answer is N."
    or a bare number, read by :func:`parse_gold`) with extractor ``mode``: what
    :func:`zerogap.io.lmeval.read_lmeval` grades harness logs with. An unknown mode is refused
    here; a target without a number raises ``ValueError`` when graded.

    >>> target_grader()(["The answer is 4.", "5"], "#### 4")
    [True, False]
    """
    check_mode(mode)

    def grade(responses: Sequence[str], target: str) -> list[bool]:
        gold = parse_gold(target)
        return [grade_response(r, gold, mode=mode).correct for r in responses]

    return grade


def canonical(value: Decimal) -> str:
    """Plain decimal string without exponent or trailing zeros (``Decimal("29.00")`` -> ``"29"``).

    Examples
    --------
    >>> canonical(Decimal("-2.50")), canonical(Decimal("-0")), canonical(Decimal("1E+3"))
    ('-2.5', '0', '1000')
    """
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _to_decimal(match: re.Match) -> Decimal:
    value = Decimal(match["digits"].replace(",", ""))
    signs = (match["sign"] or "") + (match["sign2"] or "")
    return -value if ("-" in signs or "\u2212" in signs) else value


def _amount(text: str, match: re.Match) -> tuple[Decimal, int]:
    """The value of a number match and where it ends: "N dollars and M cents" is one amount,
    N.MM, ending after "cents"."""
    value, end = _to_decimal(match), match.end()
    cents = _DOLLARS_CENTS_RE.match(text, end)
    if cents and "." not in match["digits"]:
        step = Decimal(cents["cents"]) / 100
        value, end = (value - step if value < 0 else value + step), cents.end()
    return value, end


def _numbers(text: str, pos: int = 0):
    """Yield ``(value, match)`` for each number in ``text`` from ``pos``, in order.

    "N dollars and M cents" is one amount, N.MM, and its cents are not yielded again.
    """
    while (match := _NUMBER_RE.search(text, pos)) is not None:
        value, pos = _amount(text, match)
        yield value, match


def parse_number(text: str) -> Decimal | None:
    """The first number in ``text`` as an exact decimal, or None if there is none.

    Examples
    --------
    >>> parse_number("$1,000."), parse_number("+7 apples"), parse_number("12 dollars and 50 cents")
    (Decimal('1000'), Decimal('7'), Decimal('12.5'))
    >>> parse_number("no digits") is None
    True
    """
    return next((value for value, _ in _numbers(text)), None)


def all_numbers(text: str) -> list[Decimal]:
    """Every number in ``text``, in order, read as :func:`parse_number` reads the first.

    >>> all_numbers("3 packs of $1,000 and 12 dollars and 50 cents")
    [Decimal('3'), Decimal('1000'), Decimal('12.5')]
    """
    return [value for value, _ in _numbers(text)]


def cut_at(text: str, markers: Iterable[str]) -> str:
    """``text`` up to the earliest occurrence of any marker (all of it when none occurs)."""
    end = len(text)
    for marker in markers:
        if marker:
            at = text.find(marker)
            if 0 <= at < end:
                end = at
    return text[:end]


def extract_anchor(response: str, stop: tuple[str, ...] = ()) -> Decimal | None:
    """The anchor-first answer of ``response`` (see the module docstring), or None.

    Examples
    --------
    >>> extract_anchor("4 + 5 = 9. The answer is 9.\\n\\nQ: Ann has 3 cats. The answer is 3.")
    Decimal('9')
    >>> extract_anchor("He has 12 - 4 = 8 left")
    Decimal('8')
    """
    text = cut_at(response, (*RUN_ON_MARKERS, *stop))
    for anchor in _ANCHOR_RE.finditer(text):
        # Only a number starting right at the anchor counts, so only that position is tried:
        # searching onwards from every anchor made a response of n anchors and no number cost
        # n^2 steps (thousands of anchors in one harness response took tens of seconds).
        match = _NUMBER_RE.match(text, anchor.end())
        if match is not None:
            return _amount(text, match)[0]
    values = [value for value, _ in _numbers(text)]
    return values[-1] if values else None


def parse_gold(answer: str) -> str:
    """Canonical gold answer from a GSM8K-style answer (``... #### 1,000``), a solution ending
    "The answer is N.", or a bare number.

    Raises ``ValueError`` naming the text when no number is found, or when the number is in
    exponent notation (``#### 1e400``).

    Examples
    --------
    >>> parse_gold("She makes 9 * 2 = $<<9*2=18>>18.\\n#### 18"), parse_gold("-2.50")
    ('18', '-2.5')
    >>> parse_gold("3 + 4 = 7. The answer is 7.")
    '7'
    """
    tail = answer
    if "####" in answer:
        tail = answer.rsplit("####", 1)[-1]
    else:
        anchors = list(_GOLD_ANCHOR_RE.finditer(answer))
        if anchors:
            tail = answer[anchors[-1].end() :]
    found = next(_numbers(tail), None)
    if found is None:
        raise DataError(f"no number in gold answer {answer[-60:]!r}")
    value, match = found
    if _EXPONENT_RE.match(tail, match.end()):
        # Read as digits, "1e400" would be the gold answer 1. Kept exact (10**400), no response
        # could match it: the extractors read digits only, so "1e400" in a response is 1 too.
        raise DataError(f"gold answer {answer[-60:]!r} is in exponent notation; write the "
                        "number out in digits")
    return canonical(value)


def grade_response(
    response: str, gold: str, *, mode: str = "anchor", stop: tuple[str, ...] = ()
) -> Grade:
    """Grade one response against a canonical gold answer with the extractor ``mode``.

    Parameters
    ----------
    response : str
        The sampled text, as the engine returns it.
    gold : str
        The canonical gold answer (``Question.answer``).
    mode : str, keyword-only
        A registered mode: ``anchor``, ``lmeval-strict``, ``lmeval-strict-hash``,
        ``lmeval-flexible``.
    stop : tuple of str, keyword-only
        The task's stop strings; the anchor mode also cuts at them.

    Returns
    -------
    Grade
        The extracted answer (canonical for ``anchor``, the harness's filtered string for the
        harness modes; None when nothing was extracted) and correctness.

    Examples
    --------
    >>> grade_response("The answer is 42", "42", mode="lmeval-strict")
    Grade(extracted='4', correct=False)
    """
    return _EXTRACTORS.get(mode)(response, gold, stop)


@register_extractor("anchor")
def _grade_anchor(response: str, gold: str, stop: tuple[str, ...]) -> Grade:
    value = extract_anchor(response, stop)
    if value is None:
        return Grade(None, False)
    try:
        correct = value == Decimal(gold)
    except InvalidOperation:
        correct = False
    return Grade(canonical(value), correct)


def _lmeval_regex_filter(pattern: str, response: str, group_select: int) -> str:
    # lm_eval.filters.extraction.RegexFilter.apply, for one response.
    found = re.findall(pattern, response)
    if not found:
        return LMEVAL_INVALID
    match = found[group_select]
    if isinstance(match, tuple):
        match = [m for m in match if m]
        match = match[0] if match else LMEVAL_INVALID
    return match.strip()


def _ignore(pattern: str, text: str) -> str:
    """``re.sub(pattern, "", text)``, for the pattern ``(?s).*#### `` in linear time: the
    regex retries ``.*`` from every position (quadratic on a long text without the marker);
    its one match runs from the start to the end of the last marker, which ``rfind`` finds."""
    if pattern == "(?s).*#### ":
        at = text.rfind("#### ")
        return text if at < 0 else text[at + len("#### "):]
    return re.sub(pattern, "", text)


def _lmeval_exact_match(prediction: str, reference: str) -> bool:
    # lm_eval.api.metrics.exact_match_hf_evaluate with the gsm8k regexes_to_ignore and
    # ignore_case=True, applied to both sides in the same order.
    for pattern in LMEVAL_IGNORE:
        prediction = _ignore(pattern, prediction)
        reference = _ignore(pattern, reference)
    return prediction.lower() == reference.lower()


def _lmeval_grade(pattern: str, group_select: int, response: str, gold: str) -> Grade:
    filtered = _lmeval_regex_filter(pattern, response, group_select)
    extracted = None if filtered == LMEVAL_INVALID else filtered
    return Grade(extracted, _lmeval_exact_match(filtered, gold))


@register_extractor("lmeval-strict")
def _grade_lmeval_strict(response: str, gold: str, stop: tuple[str, ...]) -> Grade:
    return _lmeval_grade(LMEVAL_COT_STRICT, 0, response, gold)


@register_extractor("lmeval-strict-hash")
def _grade_lmeval_strict_hash(response: str, gold: str, stop: tuple[str, ...]) -> Grade:
    return _lmeval_grade(LMEVAL_HASH_STRICT, 0, response, gold)


@register_extractor("lmeval-flexible")
def _grade_lmeval_flexible(response: str, gold: str, stop: tuple[str, ...]) -> Grade:
    return _lmeval_grade(LMEVAL_FLEXIBLE, -1, response, gold)
