"""Without an optional dependency, zerogap says how to install it the way zerogap is installed
(from a checkout: ``pip install -e '.[EXTRA]'``), and ``zerogap lm-eval --help`` still works.
Each case runs in a real process where the package cannot be imported."""

import os
import subprocess
import sys

import pytest

from helpers import HERE, SRC, run_main, sample_args


def _without(package: str, *argv) -> subprocess.CompletedProcess:
    """``zerogap ARGV`` in a process where importing ``package`` fails, as where it is not
    installed."""
    script = (f"import sys; sys.path[:0] = [{str(HERE)!r}, {str(SRC)!r}]; "
              f"sys.modules[{package!r}] = None; import helpers; from zerogap import cli; "
              "sys.exit(cli.main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", script, *map(str, argv)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_lm_eval_help_works_without_the_harness():
    done = _without("lm_eval", "lm-eval", "--help")
    assert done.returncode == 0, done.stderr
    assert "--model zerogap" in done.stdout
    assert done.stdout.rstrip().endswith("lm-evaluation-harness is not installed, so its own "
                                         "flags are not shown: pip install -e '.[lmeval]' from "
                                         "a checkout")
    run = _without("lm_eval", "lm-eval", "run", "--model", "zerogap")
    assert run.returncode == 2
    assert run.stderr == ("zerogap lm-eval: error: needs lm-evaluation-harness: pip install -e "
                          "'.[lmeval]' from a checkout\n")


@pytest.fixture(scope="module")
def run_dir(tiny_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hints") / "run"
    assert run_main(sample_args(tiny_dir, folder, "--limit", "1", "-m", "2")) == 0
    return folder


@pytest.mark.parametrize(("package", "argv", "hint"), [
    ("pyarrow", ["runs", "export", "RUN", "--parquet", "OUT/s.parquet"],
     "Parquet export needs pyarrow: pip install -e '.[parquet]' from a checkout"),
    ("datasets", ["task", "show", "gsm8k"],
     "needs the 'datasets' package (pip install -e '.[datasets]' from a checkout)"),
])
def test_a_missing_extra_is_named_as_a_checkout_installs_it(run_dir, tmp_path, package, argv,
                                                             hint):
    argv = [str(run_dir) if a == "RUN" else a.replace("OUT", str(tmp_path)) for a in argv]
    done = _without(package, *argv)
    assert done.returncode == 2, done.stderr
    assert hint in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "zerogap[" not in done.stderr
    assert list(tmp_path.iterdir()) == []
