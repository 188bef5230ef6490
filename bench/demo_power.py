"""The power calculation behind the demo's size (docs/demo-design.md section 6).

Planned (the default): for each number of questions N (half of them leaked) and samples per
question m, over seeded simulated studies (zerogap.uncertainty.calibration.paired_power): the
power of the one-sided paired SA-PPG test to find a mitigation whose expected SA-PPG lies 0.135
below Identity's (the paper's RailCap-vs-Identity difference, arXiv 2608.07341 Table 1), and the
mean half-width of the two-sided 95% interval of that difference. That mitigation moves every
leaked question alike.

Measured, from a pilot independent of the tested run. A pilot that shares the tested run's
questions and noise keys agrees with it by construction, so the pilot is a study of its own:

1. ``--write-pilot FOLDER --models MODELS --split SPLIT``: the pilot's questions are the *last*
   P/2 leaked and the last P/2 unleaked questions of the split the demo uses (a study with
   ``limit = N`` takes the *first* N/2 of each), and its seed is the tested seed + 1000 (a
   study draws with seed, seed + 1 and seed + 2; a sample's noise key is its seed, question id
   and index, so the pilot shares no key with the tested run either way). Writes
   ``FOLDER/pilot-split.json`` and ``FOLDER/study.toml`` (the demo's study on those questions)
   and prints the command that runs it.
2. ``--study FOLDER --split SPLIT``: the calculation with the strategies that pilot measured
   (zerogap.uncertainty.calibration.measured_power, the weak null's paired test the findings use):
   each simulated study draws N questions from the pilot's, true solve probabilities from their
   empirical-Bayes posteriors, m new samples of each. For RailCap against Identity and against each
   baseline the pilot ran: the 95% interval's mean half-width and the power for the
   paper's 0.135. Only sizes whose tested questions (the first N/2 of each side of SPLIT) are
   disjoint from the pilot's are considered, and a pilot whose seeds meet the tested run's is
   refused. The study's time at each size is predicted from the pilot's recorded job seconds
   (sampling runs scale with N x m, greedy decodes and neuron location with N).

The targets: half-width <= 0.06 on RailCap - Identity and on RailCap - each baseline, power >=
0.9 for 0.135 on RailCap - Identity. The rule, fixed before any pilot ran: among the sizes that
meet every target, the one with the shortest predicted study; if none does, the one that meets
the most, then the narrowest widest half-width. Amended after a 128 x 4 demo read the spread
criterion below its threshold (docs/demo-design.md section 6): only at an m at which the
tested run's design criteria that the preset meets stay met; ``--samples`` leaves the others
out.

    python bench/demo_power.py [--reps 100] [--effect 0.135]
    python bench/demo_power.py --write-pilot runs/pilot --models runs/demo-models \\
        --split runs/demo-models/split.json [--pilot-questions 64]
    zerogap evaluate runs/pilot/study.toml
    python bench/demo_power.py --study runs/pilot --split runs/demo-models/split.json [--reps 200]
"""

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from zerogap.analysis.findings import ALPHA, BASELINES, NULL, RAILCAP
from zerogap.analysis.folder import read_study_folder
from zerogap.errors import ZerogapError
from zerogap.io.counts import read_counts
from zerogap.study.spec import read_split, study_toml
from zerogap.uncertainty.calibration import measured_power, paired_power

SIZES = (24, 36, 48, 64, 96, 128)
SAMPLES = (6, 8, 12, 16)
MEASURED_SIZES = (64, 96, 128, 192, 256)
MEASURED_SAMPLES = (4, 8, 12)
# Jobs whose cost grows with the questions alone (one greedy decode, or a few, per question).
PER_QUESTION_JOBS = ("clean greedy", "contaminated greedy", "shortcut neurons")
PILOT_SEED_OFFSET = 1000
SEEDS_PER_STUDY = 3  # a study samples with seed, seed + 1 and seed + 2 (zerogap.study.run)
HALF_WIDTH_TARGET = 0.06
POWER_TARGET = 0.9


class Refused(Exception):
    """Input this script cannot use: one line, exit 2."""


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


def pilot_questions(split: dict[str, list[str]], questions: int) -> dict[str, list[str]]:
    """The pilot's split: the last ``questions / 2`` ids of each side (a study's ``limit`` takes
    the first ones)."""
    half = questions // 2
    if half < 1 or any(len(split[side]) < half for side in ("leaked", "unleaked")):
        raise Refused(f"--pilot-questions {questions}: the split has "
                         f"{len(split['leaked'])} leaked and {len(split['unleaked'])} unleaked "
                         f"questions, {half} of each are needed")
    return {side: split[side][-half:] for side in ("leaked", "unleaked")}


def tested_questions(split: dict[str, list[str]], n: int) -> set[str] | None:
    """The questions a study with ``limit = n`` on ``split`` evaluates (zerogap.study.run), or
    None when the split holds too few."""
    leaked, unleaked = split["leaked"][: n - n // 2], split["unleaked"][: n // 2]
    if len(leaked) < n - n // 2 or len(unleaked) < n // 2:
        return None
    return {*leaked, *unleaked}


def write_pilot(args):
    from zerogap.study.demo import DEMO_M, demo_study

    split = read_split(args.split)
    pilot = pilot_questions(split, args.pilot_questions)
    folder = Path(args.write_pilot)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pilot-split.json").write_text(json.dumps(pilot, indent=2) + "\n")
    spec = demo_study(Path(args.models).resolve(), questions=args.pilot_questions, m=DEMO_M)
    setting = replace(spec.settings[0], split_file=str((folder / "pilot-split.json").resolve()),
                      limit=args.pilot_questions)
    spec = replace(spec, settings=(setting,), seed=spec.seed + PILOT_SEED_OFFSET,
                   title="power pilot (questions and seeds apart from the demo's)")
    (folder / "study.toml").write_text(study_toml(spec))
    largest = 2 * min(len(split[side]) - len(pilot[side]) for side in ("leaked", "unleaked"))
    print(f"{folder}/study.toml: the demo's study on the last {len(pilot['leaked'])} leaked and "
          f"{len(pilot['unleaked'])} unleaked questions of {args.split}, seed {spec.seed}; "
          f"tested runs of up to {largest} questions stay disjoint from it")
    print(f"run it: zerogap evaluate {folder}/study.toml")


def power(cell, effect: float) -> float:
    """The cell's power for ``effect``; NaN where the estimate never varied (a degenerate
    pilot: two strategies with the same counts)."""
    return cell.power_for(effect) if cell.sd > 0 else math.nan


def pairs_of(strategies) -> list[tuple[str, str]]:
    """RailCap against every baseline the pilot ran (F1's tests), Identity first."""
    return [(RAILCAP, b) for b in BASELINES if b in strategies]


def measured(args):
    folder = Path(args.study)
    record = read_study_folder(folder).record
    setting = record["settings"][0]
    strategies = setting["counts"]["strategies"]
    if RAILCAP not in strategies or "identity" not in strategies:
        raise Refused(f"{folder}: the pilot ran no railcap or no identity")
    pilot_seed = record["config"]["seed"]
    if abs(pilot_seed - args.tested_seed) < SEEDS_PER_STUDY:
        raise Refused(f"{folder}: the pilot's seed {pilot_seed} meets the tested run's "
                         f"{args.tested_seed} (a study draws with seed, seed + 1, seed + 2): "
                         "make the pilot with --write-pilot")
    clean = read_counts(folder / setting["counts"]["clean"])
    runs = {name: read_counts(folder / path) for name, path in strategies.items()}
    if any(r.ids != clean.ids for r in runs.values()):
        raise Refused(f"{folder}: the clean run and the strategies hold different questions")
    split = read_split(args.split)
    sizes = [n for n in args.sizes
             if (tested := tested_questions(split, n)) is not None
             and tested.isdisjoint(clean.ids)]
    skipped = sorted(set(args.sizes) - set(sizes))
    if not sizes:
        raise Refused(f"{folder}: no size in {args.sizes} evaluates questions apart from "
                         f"the pilot's on {args.split}: make the pilot with --write-pilot")
    leaked = np.isin(clean.ids, setting["leaked"])
    n0, m0 = len(clean.ids), int(clean.samples.max())
    seconds = setting["seconds"]
    per_question = sum(seconds.get(job, 0.0) for job in PER_QUESTION_JOBS)
    per_sample = sum(seconds.values()) - per_question
    pairs = pairs_of(runs)
    print(f"pilot {folder}: {n0} questions ({leaked.sum()} leaked) at m = {m0}, seed "
          f"{pilot_seed}, none of them among the tested ones at N = "
          f"{', '.join(map(str, sizes))}" + (f" (N = {', '.join(map(str, skipped))} would "
                                              "overlap it or exceed the split: skipped)"
                                              if skipped else ""))
    print(f"{args.reps} simulated studies per cell, the weak null's paired test ({NULL}); per "
          f"pair: the 95% interval's mean half-width and the power for {args.effect}; targets: "
          f"half-width <= {HALF_WIDTH_TARGET} on every pair, power >= {POWER_TARGET} on "
          f"{RAILCAP} - identity")
    cells = []
    for n in sizes:
        for m in args.samples:
            start = time.perf_counter()
            found = {b: measured_power((clean.correct, clean.samples),
                                       (runs[a].correct, runs[a].samples),
                                       (runs[b].correct, runs[b].samples), leaked, n, m,
                                       args.reps, alpha=ALPHA, null=NULL,
                                       resamples=args.resamples, seed=n * 100 + m)
                     for a, b in pairs}
            widest = max(cell.half_width for cell in found.values())
            met = (widest <= HALF_WIDTH_TARGET) + (power(found["identity"], args.effect)
                                                     >= POWER_TARGET)
            predicted = per_sample * n * m / (n0 * m0) + per_question * n / n0
            cells.append((n, m, met, widest, predicted))
            shown = "  ".join(f"-{b}: {cell.half_width:.3f}, {power(cell, args.effect):.2f}"
                              for b, cell in found.items())
            print(f"N = {n:3d}  m = {m:2d}  {shown}  targets met {met}/2  study "
                  f"~{predicted / 60:.0f} min at the pilot's speed  "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    best = max(cells, key=lambda c: (c[2], -c[4] if c[2] == 2 else -c[3]))
    n, m, met, widest, predicted = best
    verdict = "every target met" if met == 2 else f"{met} of 2 targets met"
    print(f"chosen: N = {n}, m = {m} ({verdict}; widest half-width {widest:.3f}; "
          f"~{predicted / 60:.0f} min)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--effect", type=float, default=0.135)
    parser.add_argument("--study", help="a finished pilot study folder: measured power")
    parser.add_argument("--split", help="the split file the tested run uses (--study, "
                        "--write-pilot)")
    parser.add_argument("--tested-seed", type=int, default=0,
                        help="the tested run's seed (default 0, the demo's)")
    parser.add_argument("--sizes", type=int, nargs="+", default=MEASURED_SIZES)
    parser.add_argument("--samples", type=int, nargs="+", default=MEASURED_SAMPLES)
    parser.add_argument("--resamples", type=int, default=999)
    parser.add_argument("--write-pilot", metavar="FOLDER",
                        help="write the pilot's split and study file into FOLDER")
    parser.add_argument("--models", help="the demo's models folder (--write-pilot)")
    parser.add_argument("--pilot-questions", type=int, default=64)
    args = parser.parse_args()
    if (args.study or args.write_pilot) and not args.split:
        parser.error("--study and --write-pilot need --split (the tested run's split file)")
    if args.write_pilot and not args.models:
        parser.error("--write-pilot needs --models")
    try:
        if args.write_pilot:
            write_pilot(args)
        elif args.study:
            measured(args)
        else:
            planned(args)
    except (ZerogapError, Refused) as err:
        print(f"demo_power.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
