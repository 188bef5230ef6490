"""The power calculation behind the demo's size (issue 21; docs/demo-design.md section 6).

Planned (the default): for each number of questions N (half of them leaked) and samples per
question m, over seeded simulated studies (zerogap.uncertainty.calibration.paired_power): the
power of the one-sided paired SA-PPG test to find a mitigation whose expected SA-PPG lies 0.135
below Identity's (the paper's RailCap-vs-Identity difference, arXiv 2608.07341 Table 1), and the
mean half-width of the two-sided 95% interval of that difference. That mitigation moves every
leaked question alike.

Measured (``--study FOLDER``): the same calculation with the two strategies a finished study
measured (RailCap and Identity by default; zerogap.uncertainty.calibration.measured_power), so
that the spread between questions of a real mitigation is in it, and the study's time at each
size predicted from the seconds that study recorded for its jobs (sampling runs scale with N x m,
greedy decodes and neuron location with N). Each cell scores the same simulated studies with
both paired tests (zerogap.uncertainty.NULLS): the swap test (sharp null) and the stratified t
of the mean difference (weak null), which the study's findings use. The demo's targets:
half-width <= 0.06 and power >= 0.9 for 0.135.

    python bench/demo_power.py [--reps 100] [--effect 0.135]
    python bench/demo_power.py --study runs/demo [--pair railcap identity] [--reps 60]
"""

import argparse
import time
from pathlib import Path

import numpy as np

from zerogap.analysis.folder import read_study_folder
from zerogap.io.counts import read_counts
from zerogap.uncertainty import NULLS
from zerogap.uncertainty.calibration import measured_power, paired_power

SIZES = (24, 36, 48, 64, 96, 128)
SAMPLES = (6, 8, 12, 16)
MEASURED_SIZES = (96, 128, 192, 256, 384)
MEASURED_SAMPLES = (4, 8, 12)
# Jobs whose cost grows with the questions alone (one greedy decode, or a few, per question).
PER_QUESTION_JOBS = ("clean greedy", "contaminated greedy", "shortcut neurons")


def planned(args):
    print(f"paired SA-PPG test, true difference {args.effect}, {args.reps} studies per cell: "
          "power [95% Wilson] and mean 95% half-width")
    for n in SIZES:
        for m in SAMPLES:
            start = time.perf_counter()
            power, half = paired_power(n, m, args.reps, effect=args.effect)
            low, high = power.interval
            print(f"N = {n:3d}  m = {m:2d}  power {power.rate:.2f} [{low:.2f}, {high:.2f}]  "
                  f"half-width {half:.3f}  ({time.perf_counter() - start:.0f} s)", flush=True)


def measured(args):
    folder = Path(args.study)
    setting = read_study_folder(folder).settings[0]
    paths = {"clean": setting["counts"]["clean"], **setting["counts"]["strategies"]}
    clean, a, b = (read_counts(folder / paths[name]) for name in ("clean", *args.pair))
    if not clean.ids == a.ids == b.ids:
        raise SystemExit(f"{folder}: the clean run and {args.pair} hold different questions")
    leaked = np.isin(clean.ids, setting["leaked"])
    n0, m0 = len(clean.ids), int(clean.samples.max())
    seconds = setting["seconds"]
    per_question = sum(seconds.get(job, 0.0) for job in PER_QUESTION_JOBS)
    per_sample = sum(seconds.values()) - per_question
    print(f"{folder}: {n0} questions ({leaked.sum()} leaked) at m = {m0}; "
          f"{args.pair[0]} - {args.pair[1]} measured {_sa_ppg_difference(clean, a, b):+.3f}; "
          f"study jobs {per_sample:.0f} s scaling with N x m, {per_question:.0f} s with N")
    print(f"{args.reps} simulated studies per cell, questions drawn from the measured ones, "
          "true solve probabilities from their empirical-Bayes posteriors; per paired test "
          "(sharp null: the swap test; mean: the weak null's stratified t): the 95% interval's "
          "mean half-width, how often it covered the mean estimate, the power for the effect; "
          "1.96 sd: the estimate's own spread (the same studies for both tests)")
    for n in MEASURED_SIZES:
        for m in MEASURED_SAMPLES:
            start = time.perf_counter()
            cells = {null: measured_power((clean.correct, clean.samples),
                                          (a.correct, a.samples), (b.correct, b.samples),
                                          leaked, n, m, args.reps, null=null,
                                          resamples=args.resamples, seed=n * 100 + m)
                     for null in NULLS}
            predicted = per_sample * n * m / (n0 * m0) + per_question * n / n0
            tests = "  ".join(f"{null}: half-width {cell.half_width:.3f} covers "
                              f"{cell.covered.rate:.3f} power {cell.power_for(args.effect):.2f}"
                              for null, cell in cells.items())
            print(f"N = {n:3d}  m = {m:2d}  1.96 sd {1.96 * cells['sharp'].sd:.3f}  {tests}  "
                  f"study ~{predicted / 60:.0f} min here  ({time.perf_counter() - start:.0f} s)",
                  flush=True)


def _sa_ppg_difference(clean, a, b) -> float:
    from zerogap.metrics import sa_ppg
    from zerogap.uncertainty import choose_bins

    r = clean.correct / clean.samples
    bins = choose_bins(r.size)
    return (sa_ppg(r, a.correct / a.samples, bins=bins)
            - sa_ppg(r, b.correct / b.samples, bins=bins))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--effect", type=float, default=0.135)
    parser.add_argument("--study", help="a finished study folder: measured power instead")
    parser.add_argument("--pair", nargs=2, default=("railcap", "identity"),
                        help="the two strategies of the study to compare (a, b)")
    parser.add_argument("--resamples", type=int, default=999)
    args = parser.parse_args()
    if args.study:
        measured(args)
    else:
        planned(args)


if __name__ == "__main__":
    main()
