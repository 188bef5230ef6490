"""Reading JSON Lines files with errors that name the file and the line."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from zerogap.errors import DataError
from zerogap.io.files import read_text


def _loads(text: str, where: str, *, malformed: Callable[[json.JSONDecodeError], str]) -> Any:
    """``json.loads(text)``; a :class:`DataError` ``"{where}: ..."`` for text that is not JSON
    (``malformed`` words it), nests too deeply, or holds an integer past Python's digit limit."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{where}: {malformed(err)}") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply") from None
    except ValueError as err:  # an integer literal past Python's digit limit
        raise DataError(f"{where}: unreadable JSON value ({str(err).split(';')[0]})") from None


def read_jsonl(path: str | os.PathLike, *, journal: bool = False
               ) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for every non-blank line of a JSON Lines file.

    Any line that cannot be used (not JSON, not an object, nested too deeply, a number too long
    to convert) raises one :class:`DataError` of the form ``"{path}:{line}: ..."``; so does a
    file that cannot be read as UTF-8 text (see :func:`zerogap.io.files.read_text`). With
    ``journal`` (a file zerogap appends to, a line at a time), a last line without its newline
    is a write cut short by a kill or a full disk, and is skipped.
    """
    yield from parse_jsonl(read_text(path), path, journal=journal)


def parse_jsonl(text: str, path: str | os.PathLike, *, journal: bool = False
                ) -> Iterator[tuple[int, dict]]:
    """:func:`read_jsonl` of a file's ``text`` read already (``path`` names it in errors), so
    that a reader that looked at the text first does not read the file again."""
    if journal:
        text = text[: text.rfind("\n") + 1]
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        record = _loads(line, f"{path}:{line_no}", malformed=lambda e: f"malformed JSON ({e.msg})")
        if not isinstance(record, dict):
            raise DataError(f"{path}:{line_no}: expected a JSON object per line")
        yield line_no, record


def read_json_object(path: str | os.PathLike, what: str = "file") -> dict:
    """The JSON object a file holds; :class:`DataError` naming the file (``what`` names the kind
    of file in the not-found message, e.g. ``"split file"``; a folder or bytes that are not
    UTF-8 are reported by :func:`zerogap.io.files.read_text`)."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such {what}")
    text = read_text(path)  # its own errors name the file already
    data = _loads(text, str(path), malformed=lambda e: f"not valid JSON ({e})")
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object")
    return data
