"""Benchmark: all restoration metrics with a 10,000-replicate bootstrap, GSM8K-sized, one core.

Workload (issue 2): N = 1,319 questions, m = 50 samples, six strategies, 10,000 replicates.
Target: under 1 s on one core. The reference is a straightforward per-question Python loop
computing the same numbers on the same resampled questions; it runs on the first replicates only
(the full loop would take minutes) and its time is scaled to 10,000. Both must agree.

    python bench/bench_metrics.py [--replicates 10000] [--loop-replicates 50]
"""

import os

# One core, as the target says; set before numpy loads its BLAS.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from zerogap.metrics import METRIC_NAMES, strata  # noqa: E402
from zerogap.uncertainty import _resample_within_strata, _stratum_layout, bootstrap_gaps  # noqa: E402

N, M, K = 1319, 50, 6


def workload(seed=0):
    rng = np.random.default_rng(seed)
    p_clean = np.where(rng.random(N) < 0.25, 0.0, rng.beta(1.5, 1.5, N))
    clean = rng.binomial(M, p_clean)
    shifts = np.linspace(-0.3, 0.4, K)[:, None]
    mitigated = rng.binomial(M, np.clip(p_clean + shifts * rng.random((K, N)), 0, 1))
    return clean, np.full(N, M), mitigated, np.full((K, N), M)


def loop_metrics(r_clean, r_mit, d_clean, d_mit, idx_plain, idx_strata, bins=50):
    """All eight metrics with per-question Python loops: plain ones over idx_plain, stratified
    ones over idx_strata (the questions each replicate drew)."""
    plus = minus = draw_gap = 0.0
    for q in idx_plain:
        d = r_mit[q] - r_clean[q]
        plus += max(d, 0.0)
        minus += max(-d, 0.0)
        draw_gap += d_mit[q] - d_clean[q]
    n = len(idx_plain)
    out = {"delta_plus": plus / n, "delta_minus": minus / n, "g_ap": abs(draw_gap) / n}
    out["a_ppg"], out["g_app"] = (plus + minus) / n, abs(plus - minus) / n
    sums, sizes = {}, {}
    for q in idx_strata:
        b = min(int(round(r_clean[q] * bins, 9)), bins - 1)
        d = r_mit[q] - r_clean[q]
        s_plus, s_minus = sums.get(b, (0.0, 0.0))
        sums[b] = (s_plus + max(d, 0.0), s_minus + max(-d, 0.0))
        sizes[b] = sizes.get(b, 0) + 1
    out["s_delta_plus"] = sum(sums[b][0] / sizes[b] for b in sums) / len(sums)
    out["s_delta_minus"] = sum(sums[b][1] / sizes[b] for b in sums) / len(sums)
    out["sa_ppg"] = out["s_delta_plus"] + out["s_delta_minus"]
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicates", type=int, default=10_000)
    parser.add_argument("--loop-replicates", type=int, default=50)
    args = parser.parse_args()
    clean, m, mit, mit_m = workload()
    names = [f"strategy{k}" for k in range(K)]
    draws = (clean > M // 2).astype(int), (mit > M // 2).astype(int)

    bootstrap_gaps(clean, m, mit, mit_m, n_boot=100)  # warm-up (imports, allocator)
    start = time.perf_counter()
    boot = bootstrap_gaps(
        clean,
        m,
        mit,
        mit_m,
        names=names,
        n_boot=args.replicates,
        seed=0,
        draw_clean=draws[0],
        draw_mitigated=draws[1],
    )
    intervals = [boot.interval(n, metric) for n in names for metric in METRIC_NAMES]
    vectorised = time.perf_counter() - start

    # Rebuild the first chunk's resampled questions exactly as bootstrap_gaps draws them.
    r_clean, r_mit = clean / m, mit / mit_m
    rng = np.random.default_rng(0)
    first = min(1000, args.replicates)
    idx_plain = rng.integers(0, N, size=(first, N))
    idx_strata = _resample_within_strata(rng, _stratum_layout(strata(r_clean)), first)

    start = time.perf_counter()
    worst = 0.0
    for c in range(args.loop_replicates):
        for k in range(K):
            ref = loop_metrics(
                r_clean.tolist(),
                r_mit[k].tolist(),
                draws[0].tolist(),
                draws[1][k].tolist(),
                idx_plain[c],
                idx_strata[c],
            )
            for metric, value in ref.items():
                worst = max(worst, abs(boot.replicates[metric][k, c] - value))
    loop = (time.perf_counter() - start) * args.replicates / args.loop_replicates
    if worst > 1e-9:
        raise SystemExit(f"MISMATCH: vectorised and loop replicates differ by {worst:.3g}")

    print(
        f"workload: N={N} questions, m={M}, {K} strategies, {args.replicates} replicates, 1 thread"
    )
    print(
        f"vectorised (8 metrics, {len(intervals)} CIs): {vectorised:8.3f} s   target < 1 s: "
        f"{'met' if vectorised < 1 else 'MISSED'}"
    )
    print(
        f"python loop (same 8 metrics, scaled from {args.loop_replicates} replicates): "
        f"{loop:8.1f} s"
    )
    print(
        f"speed-up: {loop / vectorised:.0f}x   max |difference| on checked replicates: {worst:.1e}"
    )
    ci = boot.interval("strategy0", "sa_ppg")
    print(f"example: strategy0 SA-PPG {ci.estimate:.4f} [{ci.low:.4f}, {ci.high:.4f}]")


if __name__ == "__main__":
    main()
