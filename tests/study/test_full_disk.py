"""Issue 22, a full disk while a study writes its files: the disk fills in the middle of each of
the study's writes in turn (counts, ranks, study.toml, study.json, the report's tables, figures
and pages). Every time, the study stops with one :class:`~zerogap.errors.ResourceError`, the
file being written keeps its previous content (or stays absent), no temporary file remains,
and the same study run again once space is free succeeds.

The disk is simulated at the level of the file objects Python writes through (``io.open`` and
``os.fdopen``, which every write of zerogap and of pathlib goes through): writes succeed until
the free bytes run out, the last one is cut short and raises ``OSError(ENOSPC)``, as a full
file system does. On f24be4b ``study.json`` and the ranks file were written in place: a full disk
left them empty or cut short (a traceback), and the ranks file then failed every rerun.
"""

import builtins
import errno
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from zerogap.errors import ResourceError
from zerogap.study.run import evaluate

pytestmark = pytest.mark.slow


class _Disk:
    """The writes made through Python file objects, and an optional byte budget for them."""

    def __init__(self):
        self.free: int | None = None
        self.writes: list[tuple[str, int]] = []  # (path, bytes) per file opened for writing
        self.real_open, self.real_fdopen = io.open, os.fdopen

    def open(self, file, mode="r", *args, **kwargs):
        handle = self.real_open(file, mode, *args, **kwargs)
        if not any(c in mode for c in "wax+"):
            return handle
        return _Handle(self, handle, os.fspath(file) if not isinstance(file, int) else "?")

    def fdopen(self, fd, mode="r", *args, **kwargs):
        handle = self.real_fdopen(fd, mode, *args, **kwargs)
        return _Handle(self, handle, os.readlink(f"/proc/self/fd/{fd}"))


class _Handle:
    """A file object whose writes draw on the disk's free bytes."""

    def __init__(self, disk: _Disk, handle, path: str):
        self._disk, self._handle = disk, handle
        disk.writes.append((path, 0))
        self._index = len(disk.writes) - 1

    def write(self, data):
        disk = self._disk
        if disk.free is not None and len(data) > disk.free:
            self._handle.write(data[: disk.free])  # the part that fit
            self._handle.flush()
            disk.free = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if disk.free is not None:
            disk.free -= len(data)
        path, size = disk.writes[self._index]
        disk.writes[self._index] = (path, size + len(data))
        return self._handle.write(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)

    def __iter__(self):
        return iter(self._handle)

    def __getattr__(self, name):
        return getattr(self._handle, name)


@pytest.fixture()
def disk(monkeypatch):
    d = _Disk()
    monkeypatch.setattr(io, "open", d.open)
    monkeypatch.setattr(builtins, "open", d.open)
    monkeypatch.setattr(os, "fdopen", d.fdopen)
    return d


def _contents(folder: Path) -> dict[Path, bytes]:
    """Every file of the study folder but the run stores (SQLite, not written here)."""
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "runs" not in p.relative_to(folder).parts}


def _fresh(base: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(base, target)
    (target / "ranks" / "tiny-toy.json").unlink()  # recomputed and written again
    return target


def _whole(name: Path, data: bytes, previous: bytes | None, complete: bytes | None) -> bool:
    """Whether a file after the fault is its old content or a whole new one (an SVG carries
    the time it was drawn, so a new one is whole when it is a closed SVG document)."""
    if data in (previous, complete):
        return True
    return name.suffix == ".svg" and data.rstrip().endswith(b"</svg>")


def test_a_full_disk_at_each_write_of_the_study_keeps_the_old_file(study_dir, reduced_study,
                                                                    tmp_path, disk):
    base, _, _ = study_dir
    folder = _fresh(base, tmp_path / "study")
    disk.writes.clear()  # the copy's own
    evaluate(reduced_study(), folder)  # the writes of a rerun, counted
    complete = _contents(folder)
    root = folder.resolve()
    writes = [(Path(p).parent.relative_to(root), n) for p, n in disk.writes
              if Path(p).parent.is_relative_to(root)]
    offsets = [sum(n for _, n in writes[:i]) for i in range(len(writes))]
    # Every write of the counts, the ranks and the top-level files (study.toml, study.json,
    # report.html, report.md), and the first of the tables and of the figures.
    chosen, first = [], set()
    for (where, size), offset in zip(writes, offsets, strict=True):
        if size and (where.parts[:1] in ((), ("counts",), ("ranks",)) or where not in first):
            chosen.append(offset + size // 2)
        first.add(where)
    kinds = {w.parts[0] if w.parts else "." for w, _ in writes}
    assert {".", "counts", "ranks", "tables", "figures"} <= kinds, writes
    assert len(chosen) >= 14, writes

    for budget in chosen:
        folder = _fresh(base, tmp_path / "study")
        previous = _contents(folder)
        disk.free = budget
        with pytest.raises(ResourceError, match="No space left on device"):
            evaluate(reduced_study(), folder)
        disk.free = None
        now = _contents(folder)
        assert not [p for p in now if p.name.endswith(".tmp")], sorted(now)
        for name, data in now.items():
            assert _whole(name, data, previous.get(name), complete.get(name)), \
                f"{name} was left cut short (disk full after {budget} bytes)"
        evaluate(reduced_study(), folder)  # space freed: the same study completes
        assert _contents(folder).keys() == complete.keys()


_DRIVER = r'''
import hashlib, json, os, shutil, subprocess, sys
from pathlib import Path

from zerogap import cli

source, mount = Path(sys.argv[1]), Path(sys.argv[2])
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)]).returncode:
    sys.exit(77)  # no tmpfs here
study = mount / "study"
shutil.copytree(source, study)
def files():
    return {str(p.relative_to(study)): p.read_bytes() for p in study.rglob("*") if p.is_file()}
before = files()
free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
with open(mount / "filler", "wb") as f:  # leave 24 kB: the report's figures do not fit
    f.write(b"\0" * (free - 24_000))
code = cli.main(["report", str(study)])
after = files()
(mount / "filler").unlink()  # space freed
again = cli.main(["report", str(study)])
changed = [n for n, d in after.items() if d != before.get(n)
           and not (n.endswith(".svg") and d.rstrip().endswith(b"</svg>"))]
print(json.dumps({"code": code, "again": again, "changed": changed,
                  "new": sorted(set(after) - set(before))}))
'''


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="mounting a tmpfs needs root and unshare")
def test_a_real_full_tmpfs_under_the_report_keeps_every_old_file(study_dir, tmp_path):
    """The kernel's own ENOSPC: the report runs on a 16 MiB tmpfs filled to its last 24 kB,
    mounted in a mount namespace of its own (nothing outlives the subprocess)."""
    import subprocess
    import sys

    base, _, _ = study_dir
    mount = tmp_path / "mnt"
    mount.mkdir()
    run = subprocess.run(["unshare", "-m", sys.executable, "-c", _DRIVER, str(base), str(mount)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode == 77 or "unshare:" in run.stderr:
        pytest.skip(f"no private tmpfs mount here: {run.stderr.strip()[-200:]}")
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert result["code"] == 2 and len(errors) == 1, run.stderr[-2000:]
    assert "No space left on device" in errors[0] and "was left as it was" in errors[0]
    assert result["changed"] == [] and result["new"] == [], result
    assert result["again"] == 0, run.stderr[-2000:]
