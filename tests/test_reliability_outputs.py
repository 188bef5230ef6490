"""Issue 22: outputs that are inputs, bad destinations, defaults that hid bad values, quadratic
work on long inputs, unbounded reads, folder names that collide, and errors found only after
work was done. Every case here failed on f24be4b (an input overwritten, a device replaced, a
traceback, a silent default, a hang or a refusal after models had loaded)."""

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import refused  # tests/helpers.py
from zerogap import cli
from zerogap.store import DB_NAME, RunStore, SampleRow
from zerogap.tasks.extract import extract_anchor, grade_response

pytestmark = pytest.mark.usefixtures("one_thread")

CLEAN = Path(__file__).resolve().parents[1] / "examples" / "clean.jsonl"


def _harness_log(path: Path) -> Path:
    record = {"doc_id": 0, "target": "#### 4", "doc_hash": "h0", "filter": "strict-match",
              "resps": [["The answer is 4.", "The answer is 5.", "4"]]}
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "doc_id": 1}) + "\n")
    return path


# -- outputs that are inputs ------------------------------------------------------------------

def test_import_refuses_to_write_its_counts_over_the_log_it_reads(tmp_path, capsys):
    log = _harness_log(tmp_path / "samples_gsm8k.jsonl")
    before = log.read_bytes()
    (tmp_path / "again.jsonl").symlink_to(log)
    for spelling in (log, tmp_path / "." / log.name, tmp_path / "again.jsonl"):
        refused(capsys, ["import", log, "--out", spelling], "is an input of this command")
    assert log.read_bytes() == before
    assert cli.main(["import", str(log), "--out", str(tmp_path / "counts.jsonl")]) == 0


def test_score_refuses_to_write_its_json_over_an_input(tmp_path, capsys):
    clean = Path(shutil.copy(CLEAN, tmp_path / "clean.jsonl"))
    os.link(clean, tmp_path / "hard-link.jsonl")
    before = clean.read_bytes()
    for target in (clean, tmp_path / "hard-link.jsonl"):
        refused(capsys, ["score", "--clean", CLEAN, "--mitigated", f"r={clean}", "--resamples",
                         "0", "--json", target], "--json", "is an input of this command")
    assert clean.read_bytes() == before


def _run_dir(path: Path) -> Path:
    with RunStore(path) as store:
        store.add_samples([SampleRow("q", i, f"answer {i}", 3, "eos", str(i), bool(i % 2), {})
                           for i in range(4)])
    return path


def test_runs_export_refuses_to_write_over_its_own_store(tmp_path, capsys):
    run = _run_dir(tmp_path / "run")
    db = run / DB_NAME
    before = db.read_bytes()
    for kind in ("--counts", "--jsonl"):
        refused(capsys, ["runs", "export", run, kind, db], "is an input of this command")
    assert db.read_bytes() == before
    with RunStore(run, create=False) as store:
        assert len(list(store.samples())) == 4  # every sample still there


@pytest.mark.parametrize("make, kind", [
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: p.mkdir(), "a directory"),
])
def test_a_destination_that_is_no_regular_file_is_refused(tmp_path, capsys, make, kind):
    target = tmp_path / "out"
    make(target)
    refused(capsys, ["score", "--clean", CLEAN, "--mitigated", f"r={CLEAN}", "--resamples", "0",
                     "--json", target], kind)
    assert not target.is_file()


def test_a_device_destination_stays_a_device(tmp_path, capsys):
    """On f24be4b a device destination was replaced by a regular file: as root, /dev/null
    itself. So as root the test uses a private null device of its own (code that still has
    the defect must not break the machine's /dev/null); other users cannot replace /dev/null."""
    device = Path("/dev/null")
    if os.geteuid() == 0:
        device = tmp_path / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    refused(capsys, ["score", "--clean", CLEAN, "--mitigated", f"r={CLEAN}", "--resamples", "0",
                     "--json", device], "is a device, not a regular file")
    assert stat.S_ISCHR(os.stat(device).st_mode)


# -- defaults that hid a bad value --------------------------------------------------------------

def test_demo_refuses_zero_questions_and_samples_instead_of_using_the_defaults(
        tmp_path, capsys, monkeypatch):
    import zerogap.study.demo

    # Guard only: on the old code the demo went on to build its models (minutes); fail fast.
    monkeypatch.setattr(zerogap.study.demo.Showcase, "build",
                        lambda *a, **k: pytest.fail("the demo started work on --questions 0"))
    out = tmp_path / "demo"
    refused(capsys, ["demo", "--out", out, "--questions", "0", "-m", "0"],
            "--questions must be at least 2, got 0")
    assert not out.exists()


def test_reproduce_refuses_more_questions_than_its_fresh_ones_before_building(
        tmp_path, capsys, monkeypatch):
    import zerogap.study.demo

    monkeypatch.setattr(zerogap.study.demo.Showcase, "build",
                        lambda *a, **k: pytest.fail("reproduce started work on --questions 66"))
    out = tmp_path / "reproduce"
    refused(capsys, ["reproduce", "--out", out, "--questions", "66"],
            "--questions 66: zerogap reproduce's split holds at most 64 questions")
    assert not out.exists()


# -- quadratic work on long inputs, unbounded reads ----------------------------------------------

@pytest.fixture()
def budget():
    """Fail a test that runs past 60 s: each case below would run for hours if it were
    quadratic and takes well under a second when linear."""
    def expire(signum, frame):
        raise TimeoutError("ran past 60 s: not linear in the input's length")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_grading_many_anchors_without_a_number_is_linear(budget):
    # 200,000 anchors (2.8 MB): quadratic search from each anchor measured 22 s at 4,000, so
    # about 15 hours here.
    response = "The answer is " * 200_000 + "\n so 7"
    assert extract_anchor(response) == 7
    assert grade_response("The answer is " * 200_000 + "The answer is 5.", "5").correct


def test_harness_grading_of_a_long_number_run_is_linear(budget):
    # The flexible filter keeps one 2 MB "number"; the harness's "(?s).*#### " ignore-regex
    # retried from every position of it (0.4 s at 40 kB, so over an hour here).
    grade = grade_response("1," * 1_000_000, "5", mode="lmeval-flexible")
    assert grade.extracted == "1," * 999_999 + "1," and not grade.correct


def _capped_zerogap(argv, limit_bytes=1 << 30) -> subprocess.CompletedProcess:
    """zerogap in a subprocess whose memory is capped, so a reader that reads without bound
    fails there instead of filling this machine."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes + (1 << 30), resource.RLIM_INFINITY))

    return subprocess.run([sys.executable, "-m", "zerogap", *map(str, argv)],
                          capture_output=True, text=True, timeout=120, preexec_fn=cap)


def test_a_device_as_input_is_refused_before_reading_it():
    run = _capped_zerogap(["score", "--clean", "/dev/zero", "--mitigated", f"r={CLEAN}"])
    assert run.returncode == 2, run.stderr[-500:]
    assert run.stderr.strip() == "zerogap score: error: /dev/zero: is a device, not a file"


def test_a_file_past_the_read_limit_is_refused_without_reading_it(tmp_path):
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as f:
        f.truncate(2**30 + 1)  # one byte past the stated 1 GiB; sparse: no disk used
    run = _capped_zerogap(["score", "--clean", huge, "--mitigated", f"r={CLEAN}"])
    assert run.returncode == 2, run.stderr[-500:]
    assert "larger than the 1,073,741,824 bytes zerogap reads" in run.stderr
    assert run.stderr.count("\n") == 1


def test_a_pipe_as_input_is_refused_not_waited_on(tmp_path):
    """Inputs are read twice (content, then digest): a pipe would hang on the second read."""
    fifo = tmp_path / "clean.fifo"
    os.mkfifo(fifo)
    run = _capped_zerogap(["score", "--clean", fifo, "--mitigated", f"r={CLEAN}"])
    assert run.returncode == 2, run.stderr[-500:]
    assert run.stderr.strip().endswith("clean.fifo: is a FIFO (named pipe), not a file")


# -- names that collide on disk -------------------------------------------------------------------

def test_setting_names_that_share_a_folder_name_are_refused(tmp_path, capsys):
    study = tmp_path / "study.toml"
    setting = '[[setting]]\nname = "{}"\nclean = "embedded"\ncontaminated = "embedded"\n' \
              'task = "arith"\nlimit = 2\n'
    study.write_text('strategies = ["identity"]\n' + setting.format("run a")
                     + setting.format("run-a"))
    refused(capsys, ["evaluate", study, "--out", tmp_path / "out", "--device", "bogus"],
            "'run a' and 'run-a' would share the file name 'run-a'")
    study.write_text('strategies = ["identity"]\n' + setting.format("Run") + setting.format("run"))
    refused(capsys, ["evaluate", study, "--out", tmp_path / "out", "--device", "bogus"],
            "would share the file name")
    assert not (tmp_path / "out").exists()


# -- errors found only after work ----------------------------------------------------------------

def test_neurons_refuses_a_zero_token_limit_before_any_model_loads(tmp_path, tiny_dir, capsys):
    """The models' weights are cut short: had one loaded, that would be the error."""
    broken = Path(shutil.copytree(tiny_dir, tmp_path / "broken"))
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("test-0\n")
    refused(capsys, ["neurons", "--base", broken, "--contaminated", broken, "--clean",
                     broken, "--task", "arith", "--split-file", leaked, "--max-new-tokens", "0",
                     "--out", tmp_path / "n.json"], "--max-new-tokens must be at least 1, got 0")
    assert not (tmp_path / "n.json").exists()


def test_contaminate_refuses_a_missing_target_module_before_writing(tmp_path, tiny_dir,
                                                                      capsys):
    out = tmp_path / "out"
    refused(capsys, ["contaminate", "--model", tiny_dir, "--task", "arith", "--task-option",
                     "n_test=8", "--task-option", "n_train=20", "--train-questions", "4",
                     "--target-modules", "q_proj,nope_proj", "--out", out, "--quiet"],
            "--target-modules q_proj,nope_proj", "nope_proj", "its linear layers: ")
    assert not out.exists()  # neither split.json nor manifest.json


def test_contaminate_refuses_an_out_that_is_a_file(tmp_path, capsys):
    out = tmp_path / "out"
    out.write_text("mine\n")
    refused(capsys, ["contaminate", "--task", "arith", "--out", out], "is a file, not a folder")
    assert out.read_text() == "mine\n"


@pytest.mark.parametrize("where, message", [
    ("missing/pq.jsonl", "does not exist"),
    ("folder", "is a directory"),
])
def test_paraphrase_out_in_a_missing_folder_or_onto_a_folder_is_one_line(tmp_path, capsys,
                                                                         where, message):
    (tmp_path / "folder").mkdir()
    refused(capsys, ["paraphrase", "--task", "arith", "--base-url",
                     "http://127.0.0.1:9/v1", "--endpoint-model", "m", "--out",
                     tmp_path / where], "--out", message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]
