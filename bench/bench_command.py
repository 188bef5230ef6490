"""The whole ``zerogap sample`` command as a user meets it: this tree against a git revision.

Each workload runs the command line itself (``python -m zerogap sample ... --quiet`` in a fresh
process: imports, model load from the converted cache, tokenizer, the engine, store writes)
once per repeat for each of two source trees, in alternating order, so that a shared machine's
load falls on both alike: ``new`` (this checkout's ``src``) and ``old`` (``git archive REV
src``, put first on ``PYTHONPATH`` of the same virtualenv). Per workload it prints each side's
wall times, the old/new ratio of each repeat (the figure to read: absolute seconds on a shared
machine move by tens of percent), the CPU seconds of each command (user and system: with one
thread, far steadier than the wall when other jobs share the cores), generated tokens per
second over the wall, and how many of the stored samples are identical between the two trees
(the same draws, by construction).

Workloads:

* ``tiny``: W's prompt, 1 question x 1 sample x 4 tokens (almost nothing but start-up);
* ``W``: GSM8K 8-shot CoT, 10 test questions x m = 16, T = 0.7, 128 new tokens;
* ``arith``: the generated 2-shot word problems, 10 questions x 16 x 48 tokens;
* ``study-job``: one sampling run of the demo's shape, 128 arith questions x 8 x 48 tokens
  (the base model: the demo's own models are built by ``zerogap demo``).

Usage::

    python bench/bench_command.py [--previous f24be4b] [--repeat 2]
        [--workloads tiny W arith study-job] [--gsm8k DIR] [--threads N]
        [--json]

``--threads`` sets ``OMP_NUM_THREADS`` for both sides (on a machine whose cores other jobs
share, one thread can beat two; see docs/engine.md).

The environment passes to both sides. A tree with the on-disk prefix cache
(:mod:`zerogap.engine.prefix_cache`) reads the prompt prefix's keys from
``$ZEROGAP_CACHE/prefix`` once one command has written them: every repeat after its first is a
warm start. ``ZEROGAP_PREFIX_CACHE_MB=0 python bench/bench_command.py ...`` measures it cold
(the cache off), as a first command with a new prefix meets it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from shared_data import GSM8K  # bench/shared_data.py: the data's folder beside the checkout

ROOT = Path(__file__).resolve().parents[1]


def workloads(gsm8k: Path) -> dict[str, list[str]]:
    w = ["--model", "embedded", "--task", "gsm8k", "--task-option", f"path={gsm8k}"]
    return {
        "tiny": [*w, "--limit", "1", "-m", "1", "--max-new-tokens", "4"],
        "W": [*w, "--limit", "10", "-m", "16", "--max-new-tokens", "128"],
        "arith": ["--model", "embedded", "--task", "arith", "--limit", "10", "-m", "16",
                  "--max-new-tokens", "48"],
        "study-job": ["--model", "embedded", "--task", "arith", "--limit", "128", "-m", "8",
                      "--max-new-tokens", "48"],
    }


def export_tree(rev: str, into: Path) -> Path:
    """``src`` of git revision ``rev`` under ``into``; returns the folder to put on the path."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")
    return into / "src"


def run_command(src: Path, argv: list[str], run_dir: Path, threads: int | None
                ) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one command. The CPU time (user and system, of the
    child) moves far less than the wall when other jobs share the cores."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "zerogap", "sample", *argv, "--out",
                    str(run_dir), "--quiet"], check=True, env=env, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stored(run_dir: Path) -> tuple[list[tuple], int]:
    con = sqlite3.connect(f"file:{run_dir / 'run.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT question_id, sample, text FROM samples "
                           "ORDER BY question_id, sample").fetchall()
        tokens = con.execute("SELECT SUM(n_tokens) FROM samples").fetchone()[0]
    finally:
        con.close()
    return rows, tokens


def spread(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--previous", default="f24be4b", metavar="REV")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workloads", nargs="+", default=["tiny", "W"],
                        choices=("tiny", "W", "arith", "study-job"))
    parser.add_argument("--gsm8k", type=Path, default=GSM8K,
                        help=f"GSM8K release folder (default: $ZEROGAP_GSM8K, else {GSM8K})")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    argvs = workloads(args.gsm8k)
    results: dict = {"previous": args.previous, "threads": args.threads}
    with tempfile.TemporaryDirectory(prefix="bench-command-") as tmp:
        trees = {"old": export_tree(args.previous, Path(tmp) / "old"), "new": ROOT / "src"}
        for name in args.workloads:
            walls: dict[str, list[float]] = {"old": [], "new": []}
            cpus: dict[str, list[float]] = {"old": [], "new": []}
            identical, tokens = [], {}
            for r in range(args.repeat):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                dirs = {side: Path(tmp) / f"{name}-{side}-{r}" for side in order}
                for side in order:
                    wall, cpu = run_command(trees[side], argvs[name], dirs[side], args.threads)
                    walls[side].append(wall)
                    cpus[side].append(cpu)
                rows = {side: stored(dirs[side]) for side in order}
                tokens = {side: rows[side][1] for side in order}
                same = sum(a == b for a, b in zip(rows["old"][0], rows["new"][0], strict=True))
                identical.append(f"{same}/{len(rows['new'][0])}")
            ratios = [o / n for o, n in zip(walls["old"], walls["new"], strict=True)]
            cpu_ratios = [o / n for o, n in zip(cpus["old"], cpus["new"], strict=True)]
            results[name] = {"old_s": walls["old"], "new_s": walls["new"], "old_over_new": ratios,
                             "old_cpu_s": cpus["old"], "new_cpu_s": cpus["new"],
                             "old_over_new_cpu": cpu_ratios, "tokens": tokens,
                             "identical_samples": identical}
            if not args.json:
                print(f"[{name}] {' '.join(argvs[name])}")
                for side in ("old", "new"):
                    rate = tokens[side] / min(walls[side])
                    print(f"  {side} ({args.previous if side == 'old' else 'this tree'}): "
                          f"{spread(walls[side])} s wall, {spread(cpus[side])} s CPU; "
                          f"{tokens[side]} tokens, {rate:.1f} tok/s over the best wall")
                print(f"  old/new per repeat: wall {', '.join(f'{x:.2f}' for x in ratios)}; "
                      f"CPU {', '.join(f'{x:.2f}' for x in cpu_ratios)}; identical samples "
                      f"{', '.join(identical)}")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
