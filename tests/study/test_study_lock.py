"""Two ``zerogap evaluate`` processes on one ``--out``: the first proceeds, the second is refused
at once in one line naming the first one's pid (real processes, the tiny models)."""

import os
import subprocess
import sys
import time

from helpers import HERE, SRC

_SCRIPT = (f"import sys; sys.path[:0] = [{str(HERE)!r}, {str(SRC)!r}]; import helpers; "
           "from zerogap import cli; sys.exit(cli.main(sys.argv[1:]))")


def _evaluate(models, out) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, "evaluate", "--clean", str(models["clean"]),
         "--contaminated", str(models["contaminated"]), "--task", "toy-arith", "--split-file",
         str(models["split"]), "--strategies", "identity", "-m", "2", "--limit", "2",
         "--max-new-tokens", "8", "--resamples", "100", "--workers", "1", "--quiet",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_second_study_on_one_folder_is_refused_and_the_first_finishes(study_models,
                                                                        tmp_path):
    out = tmp_path / "study"
    first = _evaluate(study_models, out)
    try:
        lock = out / "study.lock"
        deadline = time.monotonic() + 120
        while first.poll() is None and time.monotonic() < deadline and not (
                lock.is_file() and lock.read_text().strip() == str(first.pid)):
            time.sleep(0.05)
        assert first.poll() is None, first.communicate()
        second = _evaluate(study_models, out)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2, err
        assert err.count("\n") == 1, err
        assert f"study folder {out} is being written by another zerogap process " \
               f"(pid {first.pid})" in err
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
    finally:
        first.kill()
        first.wait()
    assert (out / "study.json").is_file()
