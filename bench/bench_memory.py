"""Peak resident memory and wall time of commands that run a model, this tree beside another.

Each case runs as its own process under GNU time (``/usr/bin/time -v``: its "Maximum resident
set size" is the process's high-water mark, as the kernel's OOM killer counts memory), once
with this tree's ``src`` and once with ``--old``'s (a second worktree of the branch to compare
with: ``git worktree add /tmp/old main``), one after the other in the same sitting:

* ``sample``: ``zerogap sample`` of the embedded model on ``arith`` (``--sample-questions``
  questions, m = 16, 48 new tokens), in float32 and bfloat16;
* ``study``: ``zerogap demo --questions Q -m M`` (the demo's preset and strategies at a
  reduced size: the fine-tunes, then the study), in float32 and bfloat16, with 1 and 2
  workers; each run in a fresh folder, so both trees train and sample the same work. With
  ``--models DIR`` (a demo folder's ``models``, which do not depend on Q or m) each folder
  starts with a copy of them and the runs measure the study alone;
* ``rows`` (``--rows``, this tree alone): what one decode row really holds against the
  engine's estimate of it (:func:`zerogap.engine.memory.decode_row_bytes`, which sizes every
  batch): ``zerogap sample`` of ``--models``' contaminated model (or the embedded one) on
  ``arith`` at two fixed batch sizes, per dtype and strategy (identity, RailCap, and the
  shortcut patch with ``--neurons FILE``); the slope of peak memory over the rows is a row's
  real cost, and the ratio estimate/real should stay above 1 and near it;
* ``beside a hog`` (``--hog FRACTION``): the float32 study with 2 workers again while another
  process holds FRACTION of the memory available at its start (touched, so resident).

It prints per case the peak (GiB) and wall (s) of each tree and the ratios this/old; a case
whose run failed prints its exit status instead (a run killed for memory reads -9 or 137). For a
study case whose runs both completed it also prints how many stored responses the two trees
share (keyed by run, question and sample: a change that should not move a draw reads all of
them; under different batch sizes a near-tie may fall the other way in bfloat16, so give
``--batch-size`` to fix the batches in both trees and compare draw for draw). ``--keep DIR``
keeps each study's folder there (``DIR/<case>/<tree>``) instead of deleting it.
Nothing here is timed in a unit test: the machine is shared, so compare the ratios of one
sitting, and rerun a case where another process's load moved its wall.

    git worktree add /tmp/old main
    python bench/bench_memory.py --old /tmp/old --cases sample
    python bench/bench_memory.py --old /tmp/old --demo-questions 12 -m 4 --hog 0.5
    python bench/bench_memory.py --old /tmp/old --cases study --models runs/demo/models
    python bench/bench_memory.py --old /tmp/old --cases study --models runs/demo/models \
        --demo-questions 128 -m 8 --dtypes auto --workers 2 --batch-size 16
    python bench/bench_memory.py --rows --models runs/demo/models \
        --neurons runs/demo/neurons/*.json
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
GIB = 1 << 30


# ``python -m zerogap`` with the engine's log on stderr (the row estimate is logged there).
LOGGED = ("import logging, sys; logging.basicConfig(level=logging.WARNING); "
          "logging.getLogger('zerogap.engine').setLevel(logging.INFO); "
          "from zerogap.cli import main; main(sys.argv[1:])")


def measured(src: Path, argv: list[str], env: dict[str, str],
             log: list[str] | None = None) -> tuple[int, float, int]:
    """``python -m zerogap ARGV`` with ``src`` first on the path under GNU time: its exit
    status, wall seconds and peak resident bytes; ``log`` receives its stderr's lines."""
    run_env = {**os.environ, **env, "PYTHONPATH": str(src)}
    start = time.perf_counter()
    entry = ["-m", "zerogap"] if log is None else ["-c", LOGGED]
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, *entry, *argv],
                          env=run_env, capture_output=True, text=True)
    if log is not None:
        log.extend(done.stderr.splitlines())
    wall = time.perf_counter() - start
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-12:]
        print("   ", "\n    ".join(tail), file=sys.stderr)
    return done.returncode, wall, int(found.group(1)) * 1024 if found else 0


def hog(fraction: float) -> subprocess.Popen:
    """A process that holds ``fraction`` of the memory available now, every page touched, until
    it is killed; returned once it holds it."""
    sys.path.insert(0, str(HERE / "src"))
    import torch

    from zerogap.engine.memory import available_bytes, format_size

    size = int(fraction * available_bytes(torch.device("cpu")))
    code = (f"import time\nb = bytearray({size})\nfor i in range(0, len(b), 4096): b[i] = 1\n"
            "print('held', flush=True)\ntime.sleep(86400)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    print(f"  another process holds {format_size(size)} ({fraction:.0%} of what was available)")
    return proc


def cases(args) -> list[tuple[str, list[str], dict[str, str]]]:
    """(name, zerogap argv without --out, environment) of every case asked for."""
    out: list[tuple[str, list[str], dict[str, str]]] = []
    fixed = [] if args.batch_size is None else ["--batch-size", str(args.batch_size)]
    for dtype in args.dtypes:
        if "sample" in args.cases:
            out.append((f"sample, {dtype}",
                        ["sample", "--model", "embedded", "--task", "arith", "-m", "16",
                         "-T", "0.7", "--max-new-tokens", "48", "--limit",
                         str(args.sample_questions), "--dtype", dtype, "--quiet"], {}))
        if "study" in args.cases:
            for workers in args.workers:
                out.append((f"study, {dtype}, {workers} worker(s)",
                            ["demo", "--questions", str(args.demo_questions), "-m", str(args.m),
                             "--dtype", dtype, "--workers", str(workers), "--quiet",
                             *fixed], {}))
    return out


def row_costs(args) -> None:
    """The ``rows`` case: per dtype and strategy, a row's real bytes (the slope of peak memory
    between two fixed batch sizes) beside the engine's logged estimate."""
    model = str(args.models / "contaminated") if args.models else "embedded"
    strategies = [("identity", []), ("railcap", [])]
    if args.neurons is not None:
        base = str(args.models / "clean") if args.models else "embedded"
        strategies.append(("shortcut", ["--set", f"neurons={args.neurons}", "--set",
                                        f"base={base}"]))
    small, large = args.row_batches
    print(f"{'rows case':<34} {'peak GiB':>17} {'real MB/row':>12} {'estimate':>9} {'ratio':>6}")
    for dtype in args.dtypes:
        for strategy, extra in strategies:
            peaks, estimate = [], None
            for rows in (small, large):
                with tempfile.TemporaryDirectory(prefix="bench-rows-") as scratch:
                    log: list[str] = []
                    code, _, peak = measured(
                        HERE / "src",
                        ["sample", "--model", model, "--task", "arith", "--limit",
                         str(args.sample_questions), "-m", str(large // args.sample_questions
                                                               + 1),
                         "--max-new-tokens", "48", "--dtype", dtype, "--batch-size", str(rows),
                         "--strategy", strategy, *extra, "--quiet", "--out",
                         str(Path(scratch) / "run")], {}, log)
                found = [re.search(r"row holds about (\d+) bytes", line) for line in log]
                # The last call's: RailCap decodes its greedy trajectories first, one row a
                # question, and the rows the two batch sizes differ by are its samples'.
                estimate = next((int(f.group(1)) for f in reversed(found) if f), estimate)
                peaks.append(peak if code == 0 else None)
            name = f"{dtype}, {strategy}, {small} -> {large} rows"
            if None in peaks or estimate is None:
                print(f"{name:<34} failed")
                continue
            real = (peaks[1] - peaks[0]) / (large - small)
            print(f"{name:<34} {peaks[0] / GIB:>8.2f} {peaks[1] / GIB:>8.2f} {real / 1e6:>12.2f} "
                  f"{estimate / 1e6:>9.2f} {estimate / real:>6.2f}", flush=True)


def shared_responses(first: Path, second: Path) -> tuple[int, int]:
    """(responses both study folders store alike, responses of either), keyed by run label,
    question and sample (:func:`bench_study.responses`)."""
    from bench_study import responses

    a, b = responses(first), responses(second)
    return sum(a[key] == b.get(key) for key in a), len(a.keys() | b.keys())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, default=None,
                        help="a worktree of the tree to compare with (its src/ is used; "
                             "needed by every case but --rows)")
    parser.add_argument("--rows", action="store_true",
                        help="measure a decode row's real bytes against the engine's estimate "
                             "(this tree only) instead of comparing trees")
    parser.add_argument("--row-batches", nargs=2, type=int, default=[256, 1024],
                        metavar=("SMALL", "LARGE"), help="the two fixed batch sizes of --rows")
    parser.add_argument("--neurons", type=Path, default=None,
                        help="a neuron file for --rows' shortcut case (its base: --models' "
                             "clean model, else the embedded one)")
    parser.add_argument("--cases", nargs="+", default=["sample", "study"],
                        choices=["sample", "study"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--sample-questions", type=int, default=32)
    parser.add_argument("--demo-questions", type=int, default=12)
    parser.add_argument("-m", type=int, default=4)
    parser.add_argument("--models", type=Path, default=None,
                        help="a demo folder's models, copied into each study's folder so that "
                             "the fine-tunes are not measured")
    parser.add_argument("--old-models", type=Path, default=None,
                        help="the same models for --old's studies, their manifest in the form "
                             "that tree reads (default: --models)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="fix the studies' batches in both trees (their samples then "
                             "compare draw for draw)")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep each study's folder in DIR/<case>/<tree>")
    parser.add_argument("--hog", type=float, default=None, metavar="FRACTION",
                        help="also run the float32 2-worker study beside a process holding "
                             "this fraction of the available memory")
    args = parser.parse_args()
    if args.rows:
        row_costs(args)
        return
    if args.old is None:
        parser.error("--old is needed to compare trees (or give --rows)")
    trees = {"this": HERE / "src", "old": args.old.resolve() / "src"}
    todo = cases(args)
    if args.hog is not None:
        todo.append((f"study, float32, 2 worker(s), beside a hog of {args.hog:.0%}",
                     ["demo", "--questions", str(args.demo_questions), "-m", str(args.m),
                      "--dtype", "float32", "--workers", "2", "--quiet"], {}))
    print(f"{'case':<58} {'tree':<5} {'exit':>4} {'peak GiB':>9} {'wall s':>8}")
    for name, argv, env in todo:
        held = hog(args.hog) if "hog" in name else None
        try:
            figures = {}
            with tempfile.TemporaryDirectory(prefix="bench-memory-") as scratch:
                kept = (args.keep or Path(scratch)) / re.sub(r"\W+", "-", name).strip("-")
                for tree, src in trees.items():
                    out = kept / tree
                    if out.exists():
                        shutil.rmtree(out)
                    models = args.old_models if tree == "old" and args.old_models else \
                        args.models
                    if models is not None and argv[0] == "demo":
                        shutil.copytree(models, out / "models",
                                        ignore=shutil.ignore_patterns(".work"))
                    code, wall, peak = measured(src, [*argv, "--out", str(out)], env)
                    figures[tree] = code, wall, peak
                    print(f"{name:<58} {tree:<5} {code:>4} {peak / GIB:>9.2f} {wall:>8.1f}",
                          flush=True)
                if argv[0] == "demo" and figures["this"][0] == figures["old"][0] == 0:
                    same, total = shared_responses(kept / "this", kept / "old")
                    print(f"{'':<58} responses alike in both trees: {same:,} of {total:,}",
                          flush=True)
        finally:
            if held is not None:
                held.kill()
                held.wait()
        (new_code, new_wall, new_peak), (old_code, old_wall, old_peak) = (figures["this"],
                                                                          figures["old"])
        if new_code == 0 and old_code == 0:
            print(f"{'':<58} ratio this/old: peak {new_peak / old_peak:.2f}, "
                  f"wall {new_wall / old_wall:.2f}", flush=True)


if __name__ == "__main__":
    main()
