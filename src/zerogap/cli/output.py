"""Where a command's JSON record goes: a file, written whole or not at all, or ``-`` for
standard output (then the command's table, if it has one, goes to standard error); and the
warning every command that shows responses gives when most were cut at the token limit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

STDOUT = "-"


def json_destination(value: str, option: str, *, inputs=()) -> Path | str:
    """``value`` checked as a destination before any work: :data:`STDOUT` or a file path that
    is none of ``inputs``."""
    from zerogap.io.files import check_output

    return STDOUT if value == STDOUT else check_output(value, option, inputs=inputs)


def emit_json(destination: Path | str, record: Any) -> None:
    """Write ``record`` as indented JSON to ``destination`` (see :func:`json_destination`)."""
    text = json.dumps(record, indent=2) + "\n"
    if destination == STDOUT:
        sys.stdout.write(text)
        return
    from zerogap.io.files import atomic_write

    with atomic_write(destination) as handle:
        handle.write(text)
    print(f"wrote {destination}", file=sys.stderr)


def truncation_warning(cut: int, total: int) -> str:
    """The line said wherever most responses were cut at the token limit."""
    return (f"{cut} of {total} responses were cut at the token limit and graded on what they "
            "wrote so far; raise --max-new-tokens")
