"""Reading users' files and writing results: one-line errors, and writes that are all or nothing.

Every file zerogap writes goes through :func:`atomic_write`: the content lands in a temporary
file beside the destination and is renamed into place only when complete, so an interrupted or
failed write never leaves a truncated file where a good one was, nor a stray temporary file.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from zerogap.errors import DataError, UserError


def read_text(path: str | os.PathLike) -> str:
    r"""The whole of a UTF-8 text file (a leading byte-order mark is dropped).

    Raises :class:`DataError` naming the file (and, for bytes that are not UTF-8, the line) when
    the path is missing, a directory, unreadable or not UTF-8.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.csv"
    >>> _ = f.write_bytes(b"\xef\xbb\xbfid\nq\xff\n")
    >>> read_text(f)
    Traceback (most recent call last):
    ...
    zerogap.errors.DataError: ...a.csv:2: not UTF-8 text (byte 0xff)
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a directory, not a file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror})") from None
    data = data.removeprefix(codecs.BOM_UTF8)  # spreadsheets save CSVs with one
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})"
        ) from None


def check_output(path: str | os.PathLike, option: str) -> Path:
    """``path`` as a file destination, or :class:`UserError` naming ``option`` if it cannot be.

    Called before any work is done, so that a bad destination fails before results are computed.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path}: is a directory; give a file name")
    if not path.parent.is_dir():
        raise UserError(f"{option} {path}: folder {path.parent} does not exist")
    return path


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, *, binary: bool = False) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success rename it onto ``path``, else remove it.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
    >>> with atomic_write(out) as f:
    ...     _ = f.write("done\\n")
    >>> out.read_text(), sorted(p.name for p in out.parent.iterdir())
    ('done\\n', ['x.txt'])
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        handle = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with handle:
            yield handle
        os.chmod(tmp, 0o644)  # mkstemp creates it private; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
