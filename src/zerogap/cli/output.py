"""Where a command's output files go: a file, written whole or not at all, or ``-`` for
standard output, for every flag that names an output file (then the command's table and its
"wrote" lines, if it has any, go to standard error). A file named ``-`` is given with its
folder (``$PWD/-``: a path type reads ``./-`` as ``-``). And the
warning every command that shows responses gives when most were cut at the token limit."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STDOUT = "-"


def json_destination(value: str | Path, option: str, *, inputs=()) -> Path | str:
    """``value`` checked as a destination before any work: :data:`STDOUT` or a file path that
    is none of ``inputs``."""
    from zerogap.io.files import check_output

    return STDOUT if str(value) == STDOUT else check_output(value, option, inputs=inputs)


@contextlib.contextmanager
def written_file(destination: Path | str) -> Iterator[Path]:
    """The path a writer writes ``destination`` (see :func:`json_destination`) through: the
    file itself, or for :data:`STDOUT` a temporary file copied to standard output once the
    writer has finished (so a failed writer prints nothing, as it leaves no file)."""
    if str(destination) != STDOUT:
        yield Path(destination)
        return
    with tempfile.TemporaryDirectory(prefix="zerogap-stdout-") as folder:
        path = Path(folder) / "output"
        yield path
        if path.exists():
            sys.stdout.flush()
            with open(path, "rb") as handle:
                shutil.copyfileobj(handle, sys.stdout.buffer)
            sys.stdout.buffer.flush()


def report_stream(destinations) -> Any:
    """Where a command's "wrote ..." lines go: standard error when any of ``destinations`` is
    standard output (whose bytes are the output), else standard output."""
    return sys.stderr if any(str(d) == STDOUT for d in destinations) else sys.stdout


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
