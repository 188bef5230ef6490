"""zerogap's own error types: the only exceptions the command line reports as one line.

Everything else that escapes a command is a bug and keeps its traceback. Each class also derives
from ``ValueError`` so that library callers catching ``ValueError`` (the convention for a config
that refuses a value) keep working.

>>> issubclass(DataError, ZerogapError) and issubclass(DataError, ValueError)
True
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ZerogapError(ValueError):
    """A problem with what the user gave zerogap, reported without a traceback."""


class UserError(ZerogapError):
    """A bad argument, option or setting (named in the message with its allowed values)."""


class DataError(ZerogapError):
    """An input file that cannot be used; the message names the file and, where known, the line."""


class StoreError(ZerogapError):
    """A run directory that cannot be used as asked (foreign file, other run, another writer)."""


class ResourceError(ZerogapError):
    """The machine refused a write (full disk, file-size limit, I/O error, read-only media);
    the message says what to free or change, and that what was already written is kept."""


def closest(typed: str, known: Iterable[str]) -> str | None:
    """The name of ``known`` closest to ``typed``, None when none is close."""
    close = difflib.get_close_matches(typed, list(known), n=1, cutoff=0.7)
    return close[0] if close else None


def did_you_mean(typed: str, known: Iterable[str], *, prefix: str = "") -> str:
    """`` (did you mean NAME?)`` naming the known name closest to ``typed`` (``prefix`` in
    front of it), or ``""`` when none is close: the tail of a one-line error about a
    mistyped name.

    >>> did_you_mean("embeded", ["embedded"]), did_you_mean("xyz", ["railcap", "ted"])
    (' (did you mean embedded?)', '')
    """
    near = closest(typed, known)
    return "" if near is None else f" (did you mean {prefix}{near}?)"
