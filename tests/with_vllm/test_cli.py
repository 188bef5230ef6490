"""``zerogap sample --backend vllm`` end to end: a run killed mid-way resumes to exactly N x m
samples, and the store refuses a resume by the other backend."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

N, M = 6, 4
VLLM_OPTIONS = ["--vllm-option", "gpu_memory_utilization=0.15", "--vllm-option",
                "enforce_eager=true", "--vllm-option", "max_model_len=1024",
                "--vllm-option", "distributed_executor_backend=uni"]


def sample_cmd(run_dir, backend="vllm", *extra):
    return [sys.executable, "-m", "zerogap", "sample", "--backend", backend, "--model",
            "embedded", "--task", "arith", "--limit", str(N), "-m", str(M),
            "--max-new-tokens", "24", "--out", str(run_dir), "--quiet", *extra]


def stored(run_dir):
    db = run_dir / "run.sqlite"
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT question_id, COUNT(*) FROM samples GROUP BY question_id")
        return dict(rows.fetchall())
    except sqlite3.OperationalError:  # the schema is not written yet
        return {}
    finally:
        con.close()


@pytest.mark.slow
def test_killed_vllm_run_resumes_to_n_times_m_samples(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    proc = subprocess.Popen(sample_cmd(run_dir, "vllm", *VLLM_OPTIONS), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None and not stored(run_dir):
        time.sleep(0.2)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = stored(run_dir)
    assert partial, proc.stderr.read().decode()[-2000:]
    assert all(n == M for n in partial.values())  # a question is stored whole or not at all
    done = subprocess.run(sample_cmd(run_dir, "vllm", *VLLM_OPTIONS), env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    final = stored(run_dir)
    assert len(final) == N and all(n == M for n in final.values())
    if len(partial) < N:
        assert f"({N} stored, m={M})" in done.stdout
    else:  # every question was stored before the kill: a resume with nothing to do loads nothing
        assert "nothing to do" in done.stdout and "no model was loaded" in done.stdout
    other = subprocess.run(sample_cmd(run_dir, "hf"), capture_output=True, text=True)
    assert other.returncode == 2 and "backend" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1


def test_shortcut_is_refused_before_vllm_starts(tmp_path):
    run_dir = tmp_path / "run"
    cmd = sample_cmd(run_dir, "vllm", "--strategy", "shortcut", "--set", "neurons=n.json",
                     "--set", "base=embedded")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "patching" in result.stderr and not run_dir.exists()
