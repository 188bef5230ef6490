"""Reading JSON Lines files with errors that name the file and the line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for every non-blank line of a JSON Lines file.

    A line that is not valid JSON, or not a JSON object, raises one ``ValueError`` of the form
    ``"{path}:{line}: ..."``.
    """
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no}: malformed JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{line_no}: expected a JSON object per line")
            yield line_no, record


def read_json_object(path: str | os.PathLike, what: str = "file") -> dict:
    """The JSON object a file holds; ``FileNotFoundError``/``ValueError`` naming the file.

    ``what`` names the kind of file in the not-found message (``"split file"``).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such {what}")
    with open(path, encoding="utf-8") as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data
