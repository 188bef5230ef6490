"""Calibration of zerogap's uncertainty over simulated studies, as tables (docs/uncertainty.md).

Prints, over seeded replicates of benchmarks shaped like real ones (25% of questions never
solved, 15% always, the rest Beta(0.7, 0.7); see zerogap.calibration):

1. the paired test's false-positive rate when two strategies are equal in distribution, per
   metric and (N, m, B), with its 95% Wilson interval and the share of untestable replicates;
2. the coverage of a strategy's SA-PPG interval for its expectation over new samples;
3. the verdict's two error rates;
4. the simulated noise floor against a measured second batch, for each prior, across N and m,
   on that benchmark and on a degenerate one (42% never solved, 38% always).

    python bench/calibrate_uncertainty.py [--reps 200] [--quick]
"""

import argparse

from zerogap import calibration as cal

PAIRED = [(12, 6, 50, 0.0), (40, 8, 5, 0.0), (100, 10, 10, 0.3), (200, 1, 5, 0.0),
          (400, 50, 50, 0.2), (1319, 50, 50, 0.2)]
COVERAGE = [(12, 6, 50, 0.0), (40, 8, 5, 0.2), (100, 10, 10, 0.3), (200, 1, 5, 0.0),
            (200, 2, 5, 0.0), (400, 50, 50, 0.2)]
VERDICTS = [(40, 8), (200, 20), (400, 50)]
FLOORS = [(12, 6), (40, 8), (200, 6), (400, 20), (1319, 50)]


def show(rate) -> str:
    low, high = rate.interval
    return f"{rate.rate:6.3f} [{low:.3f}, {high:.3f}]"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="the first three rows of each")
    args = parser.parse_args()
    cut = 3 if args.quick else None
    print(f"1. paired test, true null, {args.reps} replicates: rejection rate [95% Wilson] "
          "among testable replicates; untestable share")
    print(f"{'N':>5} {'m':>3} {'B':>3} {'shift':>5}  {'metric':<7} {'rate':>22}  untestable")
    for n, m, bins, shift in PAIRED[:cut]:
        for metric in ("sa_ppg", "a_ppg", "g_app"):
            rate = cal.paired_null(n, m, bins, args.reps, metric=metric, shift=shift,
                                   resamples=999, seed=n)
            print(f"{n:>5} {m:>3} {bins:>3} {shift:>5}  {metric:<7} {show(rate):>22}  "
                  f"{rate.untestable / args.reps:.2f}", flush=True)
    print(f"\n2. SA-PPG interval coverage of E[SA-PPG | questions], {args.reps} replicates")
    print(f"{'N':>5} {'m':>3} {'B':>3} {'shift':>5} {'coverage':>22}")
    for n, m, bins, shift in COVERAGE[:cut]:
        rate = cal.interval_coverage(n, m, bins, args.reps, shift=shift, seed=n)
        print(f"{n:>5} {m:>3} {bins:>3} {shift:>5} {show(rate):>22}", flush=True)
    print(f"\n3. verdict errors, {args.reps} replicates: 'not restored' for a strategy equal to "
          "the clean model (margin 0.05); 'restored' for a true excess of twice the margin")
    print(f"{'N':>5} {'m':>3} {'equal: not restored':>24} {'excess 2x: restored':>24} margin")
    for n, m in VERDICTS[:cut]:
        equal, _ = cal.verdict_errors(n, m, args.reps, shift=0.0, seed=n)
        far, margin = cal.verdict_errors(n, m, args.reps, shift=0.4, seed=n)
        print(f"{n:>5} {m:>3} {show(equal):>24} {show(far):>24} {margin:.4f}", flush=True)
    print("\n4. noise floor, 60 studies each: mean simulated vs mean measured second batch "
          "(SA-PPG), difference in standard errors")
    degenerate = cal.benchmark
    for label, shape in (("typical", {}), ("degenerate", {"at_zero": 0.42, "at_one": 0.38})):
        cal.benchmark = lambda n, rng, shape=shape: degenerate(n, rng, **shape)
        for n, m in FLOORS[:cut]:
            cells = []
            for prior in ("empirical", "jeffreys", "plugin"):
                simulated, measured, se = cal.floor_agreement(n, m, 60, prior=prior, seed=n)
                cells.append(f"{prior} {simulated:.4f} ({(simulated - measured) / se:+.1f} se)")
            print(f"{label:>10} N={n:<5} m={m:<3} measured {measured:.4f}: " + "; ".join(cells),
                  flush=True)
    cal.benchmark = degenerate


if __name__ == "__main__":
    main()
