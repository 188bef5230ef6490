"""Resuming ``zerogap sample`` into a folder that holds a run: refusals and no-op resumes settled
before any model loads (in a real process, which never imports torch), and a raised m or a larger
``--limit`` sampling only what the folder lacks."""

import os
import subprocess
import sys

from helpers import HERE, SRC, run_main, sample_args, stored_samples, tree_digest
from zerogap.store import RunStore

# The real dispatcher in a fresh process; prints whether torch was imported, after the command.
_TORCH_SCRIPT = f"""
import sys
sys.path[:0] = [{str(HERE)!r}, {str(SRC)!r}]
import helpers
from zerogap import cli
code = cli.main(sys.argv[1:])
print("torch imported:", "torch" in sys.modules)
sys.exit(code)
"""


def _run(argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _TORCH_SCRIPT, *map(str, argv)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_changed_setting_is_refused_and_a_complete_run_resumed_without_torch(tiny_dir,
                                                                                tmp_path):
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2")) == 0
    before = tree_digest(run_dir)
    for extra, differing in [
        (["--strategy", "railcap"], 'strategy (stored "identity", now "railcap")'),
        (["--seed", "4"], "seed (stored 3, now 4)"),
        (["-m", "5"], "m (stored 6, now 5); a run's m can be raised, not lowered"),
        (["--task-option", "n=3"], "task_config (stored"),
    ]:
        done = _run(sample_args(tiny_dir, run_dir, "--limit", "2", *extra))
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and differing in done.stderr, done.stderr
        assert f"run directory {run_dir} holds a different run" in done.stderr
        assert "torch imported: False" in done.stdout  # refused before anything loaded
    done = _run(sample_args(tiny_dir, run_dir, "--limit", "2"))
    assert done.returncode == 0, done.stderr
    assert f"nothing to do: {run_dir} holds m=6 samples of every question asked for; no model " \
           "was loaded" in done.stdout
    assert "torch imported: False" in done.stdout
    assert tree_digest(run_dir) == before  # nothing written either


def test_a_complete_greedy_run_resumes_without_torch(tiny_dir, tmp_path):
    run_dir = tmp_path / "greedy"
    argv = ["greedy", "--model", tiny_dir, "--task", "toy-arith", "--max-new-tokens", "8",
            "--limit", "2", "--quiet", "--task-option", "stop=Q:", "--out", run_dir]
    assert run_main([str(a) for a in argv]) == 0
    done = _run(argv)
    assert done.returncode == 0, done.stderr
    assert "holds the greedy decode of every question asked for; no model was loaded" \
        in done.stdout
    assert "torch imported: False" in done.stdout
    refused = _run([*argv, "--max-new-tokens", "9"])  # the last one given wins
    assert refused.returncode == 2
    assert "greedy_max_new_tokens (stored 8, now 9)" in refused.stderr
    assert "torch imported: False" in refused.stdout


def test_raising_m_and_the_limit_samples_only_what_is_missing(tiny_dir, tmp_path, capsys):
    """A run of m = 3 on 2 questions raised to m = 6 on 4 stores exactly what one run of m = 6 on
    4 questions stores: the noise of a sample depends on (seed, question, index) only, so the
    stored samples stay and the new indices are new draws."""
    reference = tmp_path / "reference"
    assert run_main(sample_args(tiny_dir, reference, "--limit", "4")) == 0
    run_dir = tmp_path / "raised"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2", "-m", "3")) == 0
    first = stored_samples(run_dir)
    assert len(first) == 2 * 3
    capsys.readouterr()
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "4")) == 0
    assert "sampled 4 questions (4 stored, m=6)" in capsys.readouterr().out
    raised = stored_samples(run_dir)
    assert raised == stored_samples(reference)
    assert set(first) <= set(raised)
    with RunStore(run_dir, create=False) as store:
        assert store.config()["m"] == 6 and "m_raised_from" not in store.config()


def test_a_raise_interrupted_halfway_resumes(tiny_dir, tmp_path):
    """A raise that stopped after some questions leaves a whole store that a plain resume, and
    a reader, accept; resuming completes it."""
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2", "-m", "3")) == 0
    with RunStore(run_dir) as store:  # what a raise killed after its first question leaves
        store.check_config({"m": 6})
        first = min(store.sample_counts())
        store.add_samples(_more_samples(tiny_dir, tmp_path, first))
    with RunStore(run_dir, create=False) as store:
        assert store.config()["m_raised_from"] == 3
        assert sorted(store.sample_counts().values()) == [3, 6]
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2")) == 0
    assert len(stored_samples(run_dir)) == 12
    with RunStore(run_dir, create=False) as store:
        assert "m_raised_from" not in store.config()


def _more_samples(tiny_dir, tmp_path, question_id):
    """Samples 3..5 of ``question_id`` as an m = 6 run stores them."""
    full = tmp_path / "full"
    assert run_main(sample_args(tiny_dir, full, "--limit", "2")) == 0
    with RunStore(full, create=False) as store:
        return [row for row in store.question_samples(question_id) if row.sample >= 3]
