"""What a command into a folder that holds a run costs when it needs no model, beside the load.

Each case is the whole ``zerogap sample`` command line in a fresh process, on the embedded model
(arith, 2 questions x m = 2, 8 new tokens), into one run folder, in this order:

* ``load``: the first run, which loads the model and samples (the cost a refusal used to pay);
* ``resume``: the same command again, which has nothing to do (no model loaded);
* ``refused``: the same with ``--strategy railcap``, refused as a changed setting;
* ``lowered``: the same with ``-m 1``, refused (m may be raised, not lowered).

It prints each case's wall and CPU seconds (user and system of the process: on a shared machine
far steadier than the wall) and each case's share of ``load``'s, side by side from one sitting.

Usage::

    python bench/bench_resume.py [--repeat 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
BASE = ["--model", "embedded", "--task", "arith", "--limit", "2", "-m", "2",
        "--max-new-tokens", "8", "--quiet"]
CASES = {"load": [], "resume": [], "refused": ["--strategy", "railcap"], "lowered": ["-m", "1"]}


def _timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of ``zerogap ARGV`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "zerogap", "sample", *argv],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="sittings (default 3)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-resume-"))
    print(f"{'case':8} {'wall s':>8} {'cpu s':>7} {'wall/load':>10} {'cpu/load':>9} exit")
    for sitting in range(args.repeat):
        run = root / f"run-{sitting}"
        shutil.rmtree(run, ignore_errors=True)
        times = {name: _timed([*BASE, "--out", str(run), *extra])
                 for name, extra in CASES.items()}
        load_wall, load_cpu, _ = times["load"]
        for name, (wall, cpu, code) in times.items():
            print(f"{name:8} {wall:8.2f} {cpu:7.2f} {wall / load_wall:10.3f} "
                  f"{cpu / load_cpu:9.3f} {code}")
        print(f"load average after sitting {sitting + 1}: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
