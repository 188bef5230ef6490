"""zerogap's own error types: the only exceptions the command line reports as one line.

Everything else that escapes a command is a bug and keeps its traceback. Each class also derives
from ``ValueError`` so that library callers catching ``ValueError`` (the convention for a config
that refuses a value) keep working.

>>> issubclass(DataError, ZerogapError) and issubclass(DataError, ValueError)
True
"""

from __future__ import annotations


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
