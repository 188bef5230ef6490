"""Benchmark: scoring a GSM8K-sized study, one core, against the previous method side by side.

Workload (issues 2 and 19): N = 1,319 questions, m = 50 samples, six strategies; every metric
with its interval (48), and the paired tests ``zerogap score`` prints (each strategy against the
best by SA-PPG and by A-PPG: 10 tests) with 10,000 swap patterns. Target: under 1 s on one core.
The previous method (f24be4b's question bootstrap with 10,000 replicates and its percentile
comparisons) is read from git history and timed on the same workload in the same run, so the
ratio is measured side by side; repeats are interleaved because the machine is shared. The
noise floor (2,000 simulations) is timed separately: it is the same in both.

    python bench/bench_metrics.py [--resamples 10000] [--repeats 3] [--previous f24be4b]
"""

import os

# One core, as the target says; set before numpy loads its BLAS.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from zerogap.metrics import METRIC_NAMES  # noqa: E402
from zerogap.uncertainty import compare, gap_intervals, noise_floor  # noqa: E402

N, M, K = 1319, 50, 6
ROOT = Path(__file__).resolve().parents[1]


def workload(seed=0):
    rng = np.random.default_rng(seed)
    p_clean = np.where(rng.random(N) < 0.25, 0.0, rng.beta(1.5, 1.5, N))
    clean = rng.binomial(M, p_clean)
    shifts = np.linspace(-0.3, 0.4, K)[:, None]
    mitigated = rng.binomial(M, np.clip(p_clean + shifts * rng.random((K, N)), 0, 1))
    draws = rng.binomial(1, p_clean), rng.binomial(1, np.clip(p_clean + shifts, 0, 1))
    return clean, np.full(N, M), mitigated, np.full((K, N), M), draws


def current(data, resamples):
    clean, m, mit, mit_m, draws = data
    gaps = gap_intervals(clean, m, mit, mit_m, n_resamples=resamples, draw_clean=draws[0],
                         draw_mitigated=draws[1])
    intervals = [gaps.interval(n, metric) for n in gaps.names for metric in METRIC_NAMES]
    best = min(gaps.names, key=lambda n: gaps.estimates[gaps.index(n)].sa_ppg)
    tests = [compare(gaps, n, best, metric=metric) for metric in ("sa_ppg", "a_ppg")
             for n in gaps.names if n != best]
    return intervals, tests


def previous_module(revision):
    """The uncertainty module as it was at ``revision``, loaded from git history."""
    source = subprocess.run(["git", "show", f"{revision}:src/zerogap/uncertainty.py"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("previous_uncertainty")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(source, f"{revision}:uncertainty.py", "exec"), module.__dict__)
    return module


def previous(module, data, resamples):
    clean, m, mit, mit_m, draws = data
    boot = module.bootstrap_gaps(clean, m, mit, mit_m, n_boot=resamples, draw_clean=draws[0],
                                 draw_mitigated=draws[1])
    intervals = [boot.interval(n, metric) for n in boot.names for metric in METRIC_NAMES]
    best = min(boot.names, key=lambda n: boot.estimates[boot.names.index(n)].sa_ppg)
    tests = [module.compare(boot, n, best, metric=metric) for metric in ("sa_ppg", "a_ppg")
             for n in boot.names if n != best]
    return intervals, tests


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--previous", default="f24be4b",
                        help="git revision of the previous method (its bootstrap)")
    args = parser.parse_args()
    data = workload()
    old = previous_module(args.previous)
    current(data, 100)  # warm-up (imports, allocator)
    now, before = [], []
    for _ in range(args.repeats):
        seconds, (intervals, tests) = timed(current, data, args.resamples)
        now.append(seconds)
        before.append(timed(previous, old, data, args.resamples)[0])
    floor_seconds = timed(noise_floor, data[0], data[1])[0]

    print(f"workload: N={N} questions, m={M}, {K} strategies, {args.resamples} swap patterns "
          f"(previous: as many bootstrap replicates), 1 thread, {args.repeats} interleaved repeats")
    print(f"current  ({len(intervals)} intervals, {len(tests)} paired tests): "
          f"best {min(now):.3f} s, median {np.median(now):.3f} s   target < 1 s: "
          f"{'met' if min(now) < 1 else 'MISSED'}")
    print(f"previous ({args.previous}, question bootstrap): best {min(before):.3f} s, "
          f"median {np.median(before):.3f} s")
    ratios = np.asarray(before) / np.asarray(now)
    print(f"previous / current, repeat by repeat: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"noise floor (2,000 simulations, outside the target in both): {floor_seconds:.3f} s")
    ci = intervals[METRIC_NAMES.index("sa_ppg")]
    print(f"example: s0 SA-PPG {ci.estimate:.4f} [{ci.low:.4f}, {ci.high:.4f}]; "
          f"{tests[0].a} - {tests[0].b}: {tests[0].difference:+.4f} "
          f"[{tests[0].low:+.4f}, {tests[0].high:+.4f}], p = {tests[0].p_value:.4f}")


if __name__ == "__main__":
    main()
