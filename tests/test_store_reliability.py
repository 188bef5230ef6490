"""Reliability of the run store under faults (issue 14, store half): a full disk at every point
of a run, settings refused before anything is recorded, exports that are all or nothing, damaged
stores, and read-only media. Each test reproduced its defect on 0bab99a before the fix.

Faults are real, never mocked:

- Full disk: the command runs in a subprocess with a small ``RLIMIT_FSIZE`` (set in
  ``preexec_fn``, ``SIGXFSZ`` ignored), so any write past the limit fails with ``EFBIG``, as a
  full disk fails with ``ENOSPC``; no root and no tmpfs needed.
- Damage: real SQLite files edited with ``sqlite3`` or overwritten byte by byte.
- Read-only media: ``chmod a-w`` where the tests run as an ordinary user; as root (whom chmod
  does not stop) a read-only bind mount, where mounting is allowed; otherwise the test skips.
"""

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import RUN_SCRIPT, count_stored, run_main, sample_args, stored_samples, tree_digest
from zerogap.store import DB_NAME, GreedyRow, RunStore, SampleRow, inspect_store

# dill (which lm-evaluation-harness's dependencies bring in, and torch imports when present)
# probes the temporary folder by writing a file at import; under a zero file-size limit that
# probe fails before zerogap runs, a failure of the disk the library sees, not of zerogap's
# writes. The subprocess names its temporary folder instead, so no probe is written.
PINNED_TEMPDIR = "import os, tempfile; tempfile.tempdir = os.environ.get('TMPDIR', '/tmp')\n"


def _limited(argv, limit: int) -> subprocess.CompletedProcess:
    """``zerogap argv`` in a subprocess whose files may not grow past ``limit`` bytes."""

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-c", PINNED_TEMPDIR + RUN_SCRIPT, *argv],
                          preexec_fn=limit_file_size,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})


def _stage(run_dir: Path) -> str:
    """How far a run got: no store, an empty database, a schema only, or some questions."""
    db = run_dir / DB_NAME
    if not db.exists():
        return "no store"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        if not con.execute("SELECT name FROM sqlite_master").fetchall():
            return "empty database"
        n = con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        return "schema" if n == 0 else "questions"
    finally:
        con.close()


@pytest.mark.slow  # subprocesses that each load torch and the model
def test_a_full_disk_at_every_point_resumes_to_the_uninterrupted_run(tiny_dir, tmp_path):
    """The file-size limit ends the run at its lock file (0 bytes), at the first database write
    (the ``-shm`` index needs 32 KiB), and at successive commits; each failure is one line
    saying what to free, and after each the next run resumes from what was kept."""
    reference = tmp_path / "reference"
    assert run_main(sample_args(tiny_dir, reference)) == 0
    expected = stored_samples(reference)
    run_dir = tmp_path / "run"
    stages = []
    for limit in (0, 4096, 40_000, 44_000, 48_000, 56_000):
        done = _limited(sample_args(tiny_dir, run_dir), limit)
        stages.append(_stage(run_dir))
        if done.returncode == 0:
            continue
        last = done.stderr.splitlines()[-1]  # after any library warnings at model load
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert last.startswith("zerogap sample: error: cannot write"), done.stderr
        assert "ulimit -f" in last and "free space on the disk" in last
        stored = stored_samples(run_dir) if stages[-1] in ("schema", "questions") else []
        assert len(stored) % 6 == 0  # whole questions only, each as the reference drew it
        assert stored == [row for row in expected if row[:2] in {r[:2] for r in stored}]
    # The limits reach every kind of failure point: before the store, inside its creation,
    # between commits.
    assert {"no store", "empty database", "questions"} <= set(stages), stages
    assert run_main(sample_args(tiny_dir, run_dir)) == 0
    assert stored_samples(run_dir) == expected


# The interrupted run pauses after each stored question, so the signal lands mid-run by
# construction: unpaused, the tiny model samples all ten questions in a fraction of a second on
# a quiet machine, and the run could end before the signal arrives.
PAUSING_SCRIPT = RUN_SCRIPT.replace("import helpers\n", """import helpers
import time
from zerogap.store import RunStore
_add = RunStore.add_samples
RunStore.add_samples = lambda self, rows: (_add(self, rows), time.sleep(0.5))[0]
""")


@pytest.mark.slow  # subprocesses that each load torch and the model
def test_ctrl_c_mid_run_exits_130_in_one_line_and_resumes(tiny_dir, tmp_path):
    reference = tmp_path / "reference"
    assert run_main(sample_args(tiny_dir, reference)) == 0
    run_dir = tmp_path / "run"
    assert PAUSING_SCRIPT != RUN_SCRIPT  # the pause is in place
    proc = subprocess.Popen([sys.executable, "-c", PAUSING_SCRIPT,
                             *sample_args(tiny_dir, run_dir, "--batch-size", "2")],
                            # A shell without job control starts background jobs with SIGINT
                            # ignored, and Python then installs no handler: restore the default.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while proc.poll() is None and count_stored(run_dir) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == "zerogap sample: interrupted\n", err
    kept = stored_samples(run_dir)
    assert kept and len(kept) % 6 == 0
    assert run_main(sample_args(tiny_dir, run_dir)) == 0
    assert stored_samples(run_dir) == stored_samples(reference)


def test_an_empty_database_is_rebuilt_by_a_writer_and_named_to_readers(tmp_path, capsys):
    db = tmp_path / DB_NAME
    db.write_bytes(b"")  # what a disk full at the first write leaves
    assert run_main(["runs", "show", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds no run yet" in err and err.count("\n") == 1
    assert inspect_store(db) is False
    with RunStore(tmp_path) as store:
        store.check_config({"m": 1})
        store.add_samples([SampleRow("q", 0, "x", 1, "eos", None, False, {})])
    assert inspect_store(db) is True


@pytest.mark.parametrize(
    ("extra", "message", "on_the_run"),
    [
        (["-m", str(10**12)], "-m must be at most 65536", None),
        (["-m", str(10**30)], "-m must be at most 65536", None),
        (["--max-new-tokens", str(10**12)],
         "--max-new-tokens must be at most 1048576", None),
        # Into the stored run, the changed token limit is refused first, before the model loads.
        (["--max-new-tokens", "5000"], "exceeds the model's context of 2048 tokens",
         "differing fields: max_new_tokens (stored 24, now 5000)"),
    ],
)
def test_impossible_sizes_are_refused_naming_the_limit_and_record_nothing(
        tiny_dir, tmp_path, capsys, extra, message, on_the_run):
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "1")) == 0
    before = tree_digest(run_dir)
    capsys.readouterr()
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "1", *extra)) == 2
    err = capsys.readouterr().err
    assert (on_the_run or message) in err and err.count("\n") == 1, err
    assert tree_digest(run_dir) == before
    assert run_main(sample_args(tiny_dir, tmp_path / "fresh", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "fresh").exists()


def test_a_refused_greedy_limit_leaves_the_run_usable(tiny_dir, tmp_path, capsys):
    from zerogap.models import load_model
    from zerogap.runs import run_greedy
    from zerogap.tasks import task_from_strings

    greedy = ["greedy", "--model", str(tiny_dir), "--task", "toy-arith", "--limit", "1",
              "--out", str(tmp_path), "--quiet", "--task-option", "stop=Q:"]
    assert run_main([*greedy, "--max-new-tokens", "0"]) == 2
    assert "--max-new-tokens must be at least 1, got 0" in capsys.readouterr().err
    task = task_from_strings("toy-arith", {"stop": "Q:"})
    with RunStore(tmp_path) as store, pytest.raises(ValueError, match="max_new_tokens"):
        run_greedy(load_model(str(tiny_dir), device="cpu"), task, task.questions()[:1], store,
                   split="test", max_new_tokens=0)
    with RunStore(tmp_path, create=False) as store:
        assert "greedy_max_new_tokens" not in store.config()
    assert run_main([*greedy, "--max-new-tokens", "8"]) == 0


@pytest.mark.parametrize("case", ["no train split", "exemplars a folder"])
def test_a_task_that_fails_to_build_its_prompt_records_nothing(gsm8k_dir, tiny_dir, tmp_path,
                                                               capsys, case):
    only_test = tmp_path / "gsm8k-no-train"
    only_test.mkdir()
    (only_test / "test.jsonl").write_bytes((gsm8k_dir / "test.jsonl").read_bytes())
    options, message = {
        "no train split": ([f"path={only_test}"], "no train.jsonl"),
        "exemplars a folder": ([f"path={gsm8k_dir}", f"exemplars={only_test}"], "directory"),
    }[case]
    run_dir = tmp_path / "run"
    argv = ["sample", "--model", str(tiny_dir), "--task", "gsm8k", "--limit", "1", "-m", "2",
            "--out", str(run_dir), "--quiet"]
    for option in options:
        argv += ["--task-option", option]
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not run_dir.exists()


# -- exports -------------------------------------------------------------------------------------


def _big_store(run_dir: Path, questions: int, m: int = 10, chars: int = 200) -> None:
    """A real store of ``questions`` x ``m`` samples whose responses have ``chars`` characters."""
    text = ("Step: 12 + 30 = 42. " * (chars // 20 + 1))[:chars]
    with RunStore(run_dir) as store:
        store.check_config({"m": m})
        for q in range(questions):
            store.add_samples([SampleRow(f"q{q}", s, text, chars // 4, "eos", str(s), s % 2 == 0,
                                         {"caps": s}) for s in range(m)])


@pytest.mark.parametrize("kind", ["jsonl", "counts", "parquet"])
def test_an_export_that_hits_a_full_disk_keeps_the_old_file_and_leaves_nothing(tmp_path, kind):
    if kind == "parquet":
        pytest.importorskip("pyarrow")
    run_dir, out = tmp_path / "run", tmp_path / "out" / f"export.{kind}"
    out.parent.mkdir()
    _big_store(run_dir, 300)
    assert run_main(["runs", "export", str(run_dir), f"--{kind}", str(out)]) == 0
    good = out.read_bytes()
    _big_store(tmp_path / "bigger", 600)
    done = _limited(["runs", "export", str(tmp_path / "bigger"), f"--{kind}", str(out)],
                    len(good) // 2)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and f"cannot write {out}" in done.stderr, done.stderr
    assert "was left as it was" in done.stderr
    assert out.read_bytes() == good
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_sigkill_during_an_export_leaves_the_old_file_and_no_temporary(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "out" / "samples.jsonl"
    out.parent.mkdir()
    _big_store(run_dir, 1000, m=50)  # 50,000 samples: an export that takes a while
    out.write_text('{"old": true}\n')
    proc = subprocess.Popen([sys.executable, "-c", RUN_SCRIPT, "runs", "export", str(run_dir),
                             "--jsonl", str(out)])
    writing = None
    deadline = time.monotonic() + 120
    while writing is None and proc.poll() is None and time.monotonic() < deadline:
        # The export's new file is open and growing (its descriptor points into out/).
        for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(str(out.parent)) and os.stat(fd).st_size > 100_000:
                writing = target
        time.sleep(0.01)
    assert writing is not None, "the export finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert out.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


# -- damaged stores ------------------------------------------------------------------------------


def _small_store(run_dir: Path) -> Path:
    with RunStore(run_dir) as store:
        store.check_config({"m": 3, "strategy": "identity"})
        for q in ("q1", "q2"):
            store.add_samples([SampleRow(q, s, f"answer {s}", 3, "eos", str(s), s == 0, {})
                               for s in range(3)])
        store.add_greedy([GreedyRow("q1", [1, 2], "x", "eos", None, False, [0.5, 0.1])])
    return run_dir / DB_NAME


def _edit(sql: str):
    def damage(db: Path) -> None:
        con = sqlite3.connect(db)
        con.executescript(sql)
        con.close()
    return damage


def _overwrite_page_of(table: str):
    def damage(db: Path) -> None:
        con = sqlite3.connect(db)
        root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                           (table,)).fetchone()[0]
        con.close()
        with open(db, "r+b") as f:
            f.seek((root - 1) * 4096 + 8)
            f.write(bytes(range(256)) * 4)
    return damage


DAMAGE = {
    "a deleted sample row": (_edit("DELETE FROM samples WHERE question_id='q2' AND sample=1"),
                             "question 'q2' has 2 samples (indices 0..2), but the configuration "
                             "says m = 3"),
    "a hand-edited grade": (_edit("UPDATE samples SET correct=5 WHERE sample=2"),
                            "holds an impossible value"),
    "m raised beside the samples": (_edit("UPDATE config SET value='4' WHERE key='m'"),
                                    "has 3 samples (indices 0..2), but the configuration says "
                                    "m = 4"),
    "a dropped table": (_edit("DROP TABLE greedy"), "table greedy is missing"),
    "a malformed samples page": (_overwrite_page_of("samples"), "is damaged"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_store_is_refused_in_one_line_and_left_unchanged(tmp_path, capsys, case):
    damage, message = DAMAGE[case]
    run_dir = tmp_path / "run"
    db = _small_store(run_dir)
    damage(db)
    before = tree_digest(run_dir)
    commands = [
        ["runs", "show", str(run_dir)],
        ["runs", "export", str(run_dir), "--counts", str(tmp_path / "c.jsonl"),
         "--jsonl", str(tmp_path / "s.jsonl")],
        # The store is checked before the model would load: the model path does not exist.
        sample_args(tmp_path / "no-model", run_dir, "-m", "3"),
    ]
    for argv in commands:
        assert run_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        assert "the file was not changed" in err
        assert tree_digest(run_dir) == before
    assert not (tmp_path / "c.jsonl").exists()


@pytest.mark.slow
def test_opening_a_paper_sized_store_stays_cheap(tmp_path):
    """1,319 questions x 50 samples of 800 characters (the paper's GSM8K protocol; responses
    of up to 256 tokens): the integrity check on open stays well under a second's order."""
    _big_store(tmp_path, 1319, m=50, chars=800)
    size = (tmp_path / DB_NAME).stat().st_size
    t0 = time.perf_counter()
    inspect_store(tmp_path / DB_NAME)
    seconds = time.perf_counter() - t0
    print(f"inspect_store on {size / 2**20:.1f} MiB (65,950 samples): {seconds:.3f} s")
    assert seconds < 5  # linear in the file; a few tenths of a second on an idle CPU


# -- read-only media -----------------------------------------------------------------------------


def _read_only(folder: Path):
    """Make ``folder`` read-only for this process; returns the undo, or skips where impossible."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in (folder, *folder.iterdir())}
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        return lambda: [p.chmod(mode) for p, mode in modes.items()]
    # chmod does not stop root: bind the folder onto itself read-only, where mounting is allowed.
    bound = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip("running as root and cannot mount read-only: read-only media not simulated")
    remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True)
    if remount.returncode != 0:
        subprocess.run(["umount", str(folder)], check=True)
        pytest.skip("running as root and cannot remount read-only: not simulated")
    return lambda: subprocess.run(["umount", str(folder)], check=True)


def test_a_cleanly_closed_store_on_read_only_media_shows_and_exports(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _small_store(run_dir)
    counts = tmp_path / "writable.jsonl"
    assert run_main(["runs", "export", str(run_dir), "--counts", str(counts)]) == 0
    expected = (tmp_path / "writable.jsonl").read_text()
    capsys.readouterr()
    listing = sorted(p.name for p in run_dir.iterdir())
    undo = _read_only(run_dir)
    try:
        with pytest.raises(OSError):
            (run_dir / "probe").write_text("x")  # the simulation holds
        assert run_main(["runs", "show", str(run_dir)]) == 0
        assert "questions done     2" in capsys.readouterr().out
        assert run_main(["runs", "export", str(run_dir), "--counts", str(tmp_path / "ro.jsonl")]) \
            == 0
        assert (tmp_path / "ro.jsonl").read_text() == expected
        capsys.readouterr()
        # Writing there is refused in one line before the model loads.
        assert run_main(sample_args(tmp_path / "no-model", run_dir, "-m", "3")) == 2
        err = capsys.readouterr().err
        assert "Read-only file system" in err or "Permission denied" in err, err
        assert err.count("\n") == 1
        assert sorted(p.name for p in run_dir.iterdir()) == listing
    finally:
        undo()
    assert [json.loads(line).get("samples") for line in expected.splitlines()] == [None, 3, 3]


def test_a_killed_writers_log_on_read_only_media_is_read_or_refused_in_one_line(tmp_path,
                                                                                capsys):
    """A killed writer leaves ``run.sqlite-wal`` and ``-shm``: SQLite replays the log read-only
    through the ``-shm`` index; without that index it cannot, and says to copy the folder."""
    run_dir = tmp_path / "run"
    _small_store(run_dir)
    subprocess.run([sys.executable, "-c", f"""
import os
from zerogap.store import RunStore, SampleRow
store = RunStore({str(run_dir)!r})
store.add_samples([SampleRow("q3", s, "late", 1, "eos", None, True, {{}}) for s in range(3)])
os._exit(0)  # killed before closing: the log is not folded into the database
"""], check=True)
    assert (run_dir / f"{DB_NAME}-wal").stat().st_size > 0
    undo = _read_only(run_dir)
    try:
        assert run_main(["runs", "show", str(run_dir)]) == 0
        assert "questions done     3" in capsys.readouterr().out
    finally:
        undo()
    (run_dir / f"{DB_NAME}-shm").unlink()
    undo = _read_only(run_dir)
    try:
        assert run_main(["runs", "show", str(run_dir)]) == 2
        err = capsys.readouterr().err
        assert "was not closed cleanly" in err and "copy the run directory" in err, err
        assert err.count("\n") == 1
    finally:
        undo()
