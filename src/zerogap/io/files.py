"""Reading users' files and writing results: one-line errors, and writes that are all or nothing.

Every file zerogap writes goes through :func:`atomic_write`: the content lands in a new file
beside the destination, is flushed to disk, and is renamed into place only when complete, so an
interrupted or failed write (an exception, Ctrl-C, SIGKILL, a full disk) never leaves a truncated
file or a mix of old and new content where a good one was. On Linux the new file has no name
until it is complete (``O_TMPFILE``), so even a killed process leaves no temporary file behind;
elsewhere a failed write removes its ``.tmp`` file and only SIGKILL can leave one.

A write the machine refuses (full disk, file-size limit, I/O error, read-only media, no
permission) becomes one :class:`~zerogap.errors.ResourceError` line that names the file, says
that the old content is kept, and what to free (:func:`write_fault`).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import resource
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from zerogap.errors import DataError, ResourceError, UserError

# errno values that mean "the machine refused the write", not "zerogap has a bug".
_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_FAULTS = _SPACE | {errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM}


# The largest input file zerogap reads whole into memory. Counts files, harness logs and study
# files are far below it (a GSM8K harness log with 50 repeats is about 100 MiB); a larger one is
# almost always the wrong file (a device, a disk image, a stream that never ends).
MAX_INPUT_BYTES = 2**30


def _kind(mode: int) -> str | None:
    """What a file that is neither regular nor a folder is, for a one-line refusal."""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    return None


def read_bytes(path: str | os.PathLike, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a file of at most ``limit`` bytes; :class:`DataError` naming the file when
    it is missing, a folder, not a regular file (a device, a FIFO, a socket), unreadable or
    larger than ``limit``.

    A pipe is refused rather than read: a stream may never end, and inputs are read twice (once
    for their content, once for their digest in the provenance record). The limit also holds
    for a file that grows while it is read.

    >>> read_bytes("/dev/zero")
    Traceback (most recent call last):
    ...
    zerogap.errors.DataError: /dev/zero: is a device, not a file
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise DataError(f"{path}: is a directory, not a file")
    kind = _kind(info.st_mode)
    if kind is not None:
        raise DataError(f"{path}: is {kind}, not a file")
    too_large = DataError(f"{path}: larger than the {limit:,} bytes zerogap reads from one "
                          "file; is it the right file?")
    if info.st_size > limit:
        raise too_large
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror})") from None
    if len(data) > limit:
        raise too_large
    return data


def read_text(path: str | os.PathLike) -> str:
    r"""The whole of a UTF-8 text file (a leading byte-order mark is dropped), read by
    :func:`read_bytes` (so of at most :data:`MAX_INPUT_BYTES`).

    Raises :class:`DataError` naming the file (and, for bytes that are not UTF-8, the line) when
    the path is missing, a directory, a device, too large, unreadable or not UTF-8.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.csv"
    >>> _ = f.write_bytes(b"\xef\xbb\xbfid\nq\xff\n")
    >>> read_text(f)
    Traceback (most recent call last):
    ...
    zerogap.errors.DataError: ...a.csv:2: not UTF-8 text (byte 0xff)
    """
    path = Path(path)
    data = read_bytes(path).removeprefix(codecs.BOM_UTF8)  # spreadsheets save CSVs with one
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})"
        ) from None


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of what ``path`` names after following links; None if nothing."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _input_files(inputs: Iterable[str | os.PathLike]) -> dict[tuple[int, int], Path]:
    """The files behind ``inputs`` by identity; an input folder (a run directory) stands for
    every file directly inside it (its ``run.sqlite`` and that file's journals)."""
    found: dict[tuple[int, int], Path] = {}
    for item in inputs:
        path = Path(item)
        members = [path]
        if path.is_dir():
            with contextlib.suppress(OSError):
                members = [p for p in path.iterdir() if p.is_file()]
        for member in members:
            key = _identity(member)
            if key is not None:
                found.setdefault(key, member)
    return found


def check_output(path: str | os.PathLike, option: str,
                 inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """``path`` as a file destination, or :class:`UserError` naming ``option`` if it cannot be.

    Refused: a folder, a missing parent folder, a symbolic link and anything that exists and
    is not a regular file (a device such as ``/dev/null``, a FIFO, a socket: :func:`atomic_write`
    would replace it with a regular file), and the same file as any of ``inputs`` (compared by
    device and inode
    after following links, so another spelling, a hard link or a symlink is caught too; an
    input folder counts as every file in it). Called before any work is done, so a bad
    destination fails before results are computed and before an input is overwritten.

    >>> import tempfile, pathlib
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = log.write_text("{}")
    >>> check_output(log.parent / "." / "log.jsonl", "--counts", inputs=[log])
    Traceback (most recent call last):
    ...
    zerogap.errors.UserError: --counts .../log.jsonl: is an input of this command (.../log.jsonl)...
    """
    path = Path(path)
    try:
        info: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as err:
        raise UserError(f"{option} {path}: cannot be used ({err.strerror})") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise UserError(f"{option} {path}: is a directory; give a file name")
    if info is not None and _kind(info.st_mode) is not None:
        raise UserError(f"{option} {path}: is {_kind(info.st_mode)}, not a regular file; "
                        "give a file name")
    if not path.parent.is_dir():
        raise UserError(f"{option} {path}: folder {path.parent} does not exist")
    same = None if info is None else _input_files(inputs).get((info.st_dev, info.st_ino))
    if same is not None:
        raise UserError(f"{option} {path}: is an input of this command ({same}); writing it "
                        "would destroy what is read; give another file name")
    if path.is_symlink():
        raise UserError(f"{option} {path}: is a symbolic link (to {os.readlink(path)}), which "
                        "the write would replace with a file; give the file it points to or "
                        "another name")
    return path


def check_output_folder(path: str | os.PathLike, option: str) -> Path:
    """``path`` as a destination folder (created later with its parents), or
    :class:`UserError` naming ``option``: refused when it exists and is not a folder, or is a
    folder zerogap may not write into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path}: is a file, not a folder")
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: this folder is not writable")
    return path


def space_hint(folder: str | os.PathLike) -> str:
    """What to free after a refused write: space on ``folder``'s disk (with what is free now),
    and the process's file-size limit when one is set (``ulimit -f``, which fails writes the
    same way)."""
    hint = f"free space on the disk holding {folder}"
    with contextlib.suppress(OSError):
        hint += f" ({shutil.disk_usage(folder).free / 2**20:,.0f} MiB free now)"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        hint += f" or raise the file-size limit (ulimit -f; now {soft:,} bytes)"
    return hint


def write_fault(path: str | os.PathLike, err: OSError, kept: str) -> ResourceError | None:
    """``err`` from writing ``path`` as one :class:`ResourceError` line, or None for an OSError
    that is not the machine refusing the write (a bug: the caller re-raises it).

    ``kept`` says what survives (e.g. "the old file is unchanged").

    >>> import errno
    >>> str(write_fault("out/a.jsonl", OSError(errno.EROFS, "Read-only file system"), "x kept"))
    'cannot write out/a.jsonl: Read-only file system; x kept; write to writable storage instead'
    """
    if err.errno not in _FAULTS:
        return None
    if err.errno in _SPACE or err.errno == errno.EIO:
        remedy = space_hint(Path(path).parent)
    elif err.errno == errno.EROFS:
        remedy = "write to writable storage instead"
    else:
        remedy = "check the permissions of the file and its folder"
    return ResourceError(f"cannot write {path}: {err.strerror}; {kept}; {remedy}")


@contextlib.contextmanager
def refused_writes(path: str | os.PathLike, kept: str) -> Iterator[None]:
    """Inside, an ``OSError`` that is the machine refusing a write to ``path`` becomes one
    :class:`ResourceError` (see :func:`write_fault`); for appends to a journal, which are not
    atomic but whose cut last line is dropped on reading."""
    try:
        yield
    except OSError as err:
        fault = write_fault(path, err, kept)
        if fault is None:
            raise
        raise fault from None


def _new_file(folder: Path) -> tuple[int, Path | None]:
    """A new file in ``folder`` for writing: ``(descriptor, None)`` for an unnamed one (Linux
    ``O_TMPFILE``: nothing remains if the process dies), else ``(descriptor, its .tmp name)``."""
    if hasattr(os, "O_TMPFILE"):
        try:
            return os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644), None
        except OSError as err:  # a file system without O_TMPFILE support
            if err.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    fd, tmp = tempfile.mkstemp(prefix=".zerogap-", suffix=".tmp", dir=folder)
    os.chmod(tmp, 0o644)  # mkstemp creates it private; results are ordinary files
    return fd, Path(tmp)


def _name(fd: int, name: Path) -> None:
    """Link the unnamed file open as ``fd`` to ``name`` (``linkat`` following ``/proc``'s link;
    Python calls plain ``link``, which does not follow it, unless given a directory descriptor).
    """
    folder = os.open(name.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fd}", name.name, dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, *, binary: bool = False) -> Iterator[IO]:
    """Write ``path`` all or nothing: a new file beside it is filled, flushed to disk and
    renamed onto ``path`` on success; on any failure ``path`` keeps its old content.

    A refused write raises :class:`ResourceError` (see :func:`write_fault`); a destination that
    exists and is not a regular file (a device, a FIFO, a folder) :class:`UserError`.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
    >>> with atomic_write(out) as f:
    ...     _ = f.write("done\\n")
    >>> out.read_text(), sorted(p.name for p in out.parent.iterdir())
    ('done\\n', ['x.txt'])
    """
    path = Path(path)
    with contextlib.suppress(OSError):
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # never turn a device, FIFO or folder into a regular file
            raise UserError(f"cannot write {path}: it is "
                            f"{_kind(mode) or 'a directory'}, not a regular file")
    tmp: Path | None = None
    try:
        fd, tmp = _new_file(path.parent)
        handle = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())  # the content is on disk before a name points at it
            if tmp is None:  # give the unnamed file a name, then rename it over ``path``
                tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
                _name(handle.fileno(), tmp)
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        fault = write_fault(path, err, f"{path.name} was left as it was") \
            if isinstance(err, OSError) else None
        if fault is not None:
            raise fault from None
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` as UTF-8 through :func:`atomic_write`: all or nothing."""
    with atomic_write(path) as handle:
        handle.write(text)


def slug(name: str) -> str:
    """``name`` (a setting's or a strategy label's) as a file or folder name: every character
    but letters, digits, ``-`` and ``_`` made ``-``; the study's counts, design checks, ranks,
    plans, run folders and figures are named by it.

    >>> slug("railcap:n=3,mode=ban")
    'railcap-n-3-mode-ban'
    """
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name) or "setting"
