"""Calibration of zerogap's uncertainty over simulated studies, as tables (docs/uncertainty.md).

Prints, over seeded replicates of benchmarks shaped like real ones (25% of questions never
solved, 15% always, the rest Beta(0.7, 0.7); see zerogap.uncertainty.calibration):

1. the paired test's false-positive rate when two strategies are equal in distribution, per
   metric and (N, m, B), with its 95% Wilson interval and the share of untestable replicates;
2. the coverage of a strategy's SA-PPG interval for its expectation over new samples;
3. the verdict's two error rates;
4. the simulated noise floor against a measured second batch, for each prior, across N and m,
   on that benchmark and on a degenerate one (42% never solved, 38% always);
5. the paired SA-PPG test's false-positive rate under each null (the swap test's sharp one,
   the stratified t's weak one), when the strategies move the same random half of the
   questions (both nulls true) and when each moves a different half (only the weak null true).

    python bench/calibrate_uncertainty.py [--reps 200] [--quick] [--section 5 ...]
"""

import argparse

from zerogap.uncertainty import calibration as cal

PAIRED = [(12, 6, 50, 0.0), (40, 8, 5, 0.0), (100, 10, 10, 0.3), (200, 1, 5, 0.0),
          (400, 50, 50, 0.2), (1319, 50, 50, 0.2)]
COVERAGE = [(12, 6, 50, 0.0), (40, 8, 5, 0.2), (100, 10, 10, 0.3), (200, 1, 5, 0.0),
            (200, 2, 5, 0.0), (400, 50, 50, 0.2)]
VERDICTS = [(40, 8), (200, 20), (400, 50)]
FLOORS = [(12, 6), (40, 8), (200, 6), (400, 20), (1319, 50)]
WEAK = [(12, 6, 5, 0.3), (24, 8, 5, 0.3), (40, 8, 5, 0.3), (100, 10, 10, 0.3), (128, 8, 5, 0.3),
        (200, 4, 5, 0.3), (1319, 50, 50, 0.2)]


def show(rate) -> str:
    low, high = rate.interval
    return f"{rate.rate:6.3f} [{low:.3f}, {high:.3f}]"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="the first three rows of each")
    parser.add_argument("--section", type=int, action="append", choices=range(1, 6),
                        help="run only this section (repeatable); default all")
    args = parser.parse_args()
    cut = 3 if args.quick else None
    sections = set(args.section or range(1, 6))
    for number, section in enumerate((paired, coverage, verdicts, floors, weak_null), 1):
        if number in sections:
            section(args.reps, cut)


def paired(reps, cut):
    print(f"1. paired test, true null, {reps} replicates: rejection rate [95% Wilson] "
          "among testable replicates; untestable share")
    print(f"{'N':>5} {'m':>3} {'B':>3} {'shift':>5}  {'metric':<7} {'rate':>22}  untestable")
    for n, m, bins, shift in PAIRED[:cut]:
        for metric in ("sa_ppg", "a_ppg", "g_app"):
            rate = cal.paired_null(n, m, bins, reps, metric=metric, shift=shift,
                                   resamples=999, seed=n)
            print(f"{n:>5} {m:>3} {bins:>3} {shift:>5}  {metric:<7} {show(rate):>22}  "
                  f"{rate.untestable / reps:.2f}", flush=True)


def coverage(reps, cut):
    print(f"\n2. SA-PPG interval coverage of E[SA-PPG | questions], {reps} replicates")
    print(f"{'N':>5} {'m':>3} {'B':>3} {'shift':>5} {'coverage':>22}")
    for n, m, bins, shift in COVERAGE[:cut]:
        rate = cal.interval_coverage(n, m, bins, reps, shift=shift, seed=n)
        print(f"{n:>5} {m:>3} {bins:>3} {shift:>5} {show(rate):>22}", flush=True)


def verdicts(reps, cut):
    print(f"\n3. verdict errors, {reps} replicates: 'not restored' for a strategy equal to "
          "the clean model (margin 0.05); 'restored' for a true excess of twice the margin")
    print(f"{'N':>5} {'m':>3} {'equal: not restored':>24} {'excess 2x: restored':>24} margin")
    for n, m in VERDICTS[:cut]:
        equal, _ = cal.verdict_errors(n, m, reps, shift=0.0, seed=n)
        far, margin = cal.verdict_errors(n, m, reps, shift=0.4, seed=n)
        print(f"{n:>5} {m:>3} {show(equal):>24} {show(far):>24} {margin:.4f}", flush=True)


def floors(reps, cut):
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


def weak_null(reps, cut):
    print(f"\n5. paired SA-PPG test, {reps} replicates: rejection rate [95% Wilson] under the "
          "sharp null (swap test) and the weak null (stratified t); 'same half': both nulls "
          "true, 'other half': only the weak one")
    print(f"{'N':>5} {'m':>3} {'B':>3} {'shift':>5}  {'moves':<10} {'sharp':>22} {'weak':>22}")
    for n, m, bins, shift in WEAK[:cut]:
        for uneven in (False, True):
            rates = [cal.paired_null(n, m, bins, reps, shift=shift, uneven=uneven, null=null,
                                     resamples=999, seed=n) for null in ("sharp", "mean")]
            print(f"{n:>5} {m:>3} {bins:>3} {shift:>5}  "
                  f"{'other half' if uneven else 'same half':<10} {show(rates[0]):>22} "
                  f"{show(rates[1]):>22}", flush=True)


if __name__ == "__main__":
    main()
