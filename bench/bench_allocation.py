"""Benchmark: samples an allocated study needs for the precision of a uniform one (issue 48).

For each profile (zerogap.uncertainty.calibration.PAPER: Llama-2 x GSM8K as the paper shows it,
1,319 questions at m = 50, B = 50; DEMO: the embedded demo's 128 questions at m = 8, B = 5),
one benchmark is drawn and held fixed (its clean model, a RailCap-like strategy and Identity),
and simulated studies of it are scored as a study would score them:

* uniform: the clean reference batch and both strategies at the profile's m;
* allocated: the clean model's second batch places the questions in strata, both strategies
  get ``allocate_samples`` of a budget (every stratum an equal share), the reference batch
  stays at m;
* allocated with a pilot: the same, with the spread of each question from a pilot of ``--pilot``
  samples per strategy drawn apart (its samples are counted as spent, not scored).

Precision is that of the RailCap - Identity SA-PPG difference on these questions, read two
ways: the 95% half-width a study states (``difference_interval``, mean over ``--reps`` studies)
and 1.96 standard deviations of the estimate over ``--truth-reps`` studies (its real spread).
For each allocated rule and each reading, the budget that matches the uniform study is found
by bisection (the same simulated studies at every step); the ratio of samples is printed for
the strategies and for a study with the clean model at m and K strategies. The target is at
most 0.40 of uniform's samples at the paper's size. Printed beside it: the bound no allocation
of the strategies' samples can beat, Neyman's with the true solve probabilities,
``(Σ w σ)² / (N Σ w² σ²)`` (Cauchy-Schwarz); the expected difference under each design; and the
weak null's half-width (``compare(..., null="mean")``, for a new draw of questions), which the
allocation cannot narrow.

With ``--check`` it prints instead the calibration of allocated studies
(``zerogap.uncertainty.calibration.allocation_check``, ``--reps`` replicates a row): the bias
of each estimate against its expectation at the allocated m, that expectation's shift from the
uniform study's, the intervals' coverage and the paired tests' false-positive rates, for the
pilot scored apart and for the pooled two-stage design that scores it.

With ``--wall`` it times instead what an allocated study saves on the demo's own model, the
embedded SmolLM2-135M, as ``zerogap evaluate`` runs it: a small uniform study (``--questions``
arith questions, Identity and RailCap, m = ``-m``) and an allocated one whose budget is
``--share`` of m (default 0.71: the share the simulation above finds for uniform's stated
half-width on the demo's profile), each from an empty folder, alternately (``--repeat``), with
the load average before and after each. It prints each study's wall time (the whole command,
and its jobs alone), the samples it drew, and the RailCap - Identity SA-PPG difference with the
half-width it states, so the precision each reached is read beside its cost.

    python bench/bench_allocation.py [--profile paper demo] [--reps 40] [--truth-reps 400]
    python bench/bench_allocation.py --check [--profile demo paper] [--reps 200]
    python bench/bench_allocation.py --wall [--questions 24] [-m 8] [--share 0.71] [--repeat 1]
"""

import argparse
import os
import time

import numpy as np

from zerogap.metrics import restoration_gaps, strata
from zerogap.uncertainty import allocate_samples, compare, difference_interval, gap_intervals
from zerogap.uncertainty.calibration import DEMO, PAPER, Profile, allocation_check

NAMES = ["railcap", "identity"]
STRATEGIES_IN_A_STUDY = (2, 5)  # this benchmark's, and the paper's sampled strategies
RULES = {"allocated": "allocated, the clean second batch alone",
         "pilot": "allocated with a pilot per strategy"}


def sampled(profile: Profile, truth, rule: str, budget: float, reps: int, *, pilot: int,
            seed: int):
    """``reps`` simulated studies of one design: per study the clean reference counts, the
    strategies' counts (2, N), their samples per question (N,) and the samples spent."""
    rng = np.random.default_rng(seed)
    clean, railcap, identity = truth
    strategies = np.stack([railcap, identity])
    n, m = profile.n, profile.m
    for _ in range(reps):
        reference, second = rng.binomial(m, clean, size=(2, n))
        if rule == "uniform":
            samples, spent = np.full(n, int(round(budget))), float(round(budget))
        else:
            first = rng.binomial(pilot, strategies) if rule == "pilot" else None
            extra = pilot if rule == "pilot" else 0
            plan = allocate_samples(
                second, np.full(n, m), first,
                None if first is None else np.full(first.shape, pilot),
                budget=budget - extra, bins=profile.bins)
            samples, spent = plan.samples, plan.mean_samples + extra
        yield reference, rng.binomial(samples, strategies), samples, spent


def stated(profile, truth, rule, budget, reps, *, pilot, seed) -> dict:
    """Mean half-widths a study states (the difference on these questions, the weak null's)."""
    half, weak = [], []
    for reference, counts, samples, _ in sampled(profile, truth, rule, budget, reps,
                                                 pilot=pilot, seed=seed):
        gaps = gap_intervals(reference, np.full(profile.n, profile.m), counts,
                             np.stack([samples] * 2), names=NAMES, bins=profile.bins,
                             n_resamples=1)
        ci = difference_interval(gaps, *NAMES)
        test = compare(gaps, *NAMES, null="mean")
        half.append((ci.high - ci.low) / 2)
        weak.append((test.high - test.low) / 2)
    return {"half": float(np.mean(half)), "weak": float(np.mean(weak))}


def spread(profile, truth, rule, budget, reps, *, pilot, seed) -> dict:
    """1.96 sd and mean of the difference's estimate over studies, and the samples spent."""
    estimates, spent = [], []
    m = profile.m
    for reference, counts, samples, cost in sampled(profile, truth, rule, budget, reps,
                                                    pilot=pilot, seed=seed):
        r_clean = reference / m
        a, b = (restoration_gaps(r_clean, counts[k] / samples, bins=profile.bins).sa_ppg
                for k in range(2))
        estimates.append(a - b)
        spent.append(cost)
    return {"half": 1.96 * float(np.std(estimates, ddof=1)), "mean": float(np.mean(estimates)),
            "spent": float(np.mean(spent))}


def matching_budget(measure, goal: float, low: float, high: float) -> float:
    """The smallest budget whose half-width is at most ``goal`` (bisection, 7 steps)."""
    for _ in range(7):
        mid = (low + high) / 2
        if measure(mid)["half"] <= goal:
            high = mid
        else:
            low = mid
    return high


def neyman_bound(profile: Profile, truth) -> tuple[float, float]:
    """The least share of uniform's strategy samples any allocation needs for the same variance
    of the difference, knowing every solve probability: ``(Σ w σ)² / (N Σ w² σ²)``; and the
    same with every σ equal, the part the strata's sizes give (their harmonic mean over their
    arithmetic mean)."""
    clean, railcap, identity = truth
    _, inverse, sizes = np.unique(strata(clean, bins=profile.bins), return_inverse=True,
                                  return_counts=True)
    w = 1.0 / (sizes.size * sizes[inverse])
    sigma = np.sqrt(railcap * (1 - railcap) + identity * (1 - identity))
    return (float((w * sigma).sum() ** 2 / (profile.n * (w**2 * sigma**2).sum())),
            float(w.sum() ** 2 / (profile.n * (w**2).sum())))


def bench(profile: Profile, reps: int, truth_reps: int, pilot: int, seed: int) -> None:
    truth = profile.draw(np.random.default_rng(seed))
    m = profile.m
    print(f"\n{profile.name}: N = {profile.n}, m = {m}, B = {profile.bins}; clean model, "
          f"RailCap-like and Identity; {reps} studies per stated half-width, {truth_reps} per "
          f"spread of the estimate; load average {os.getloadavg()[0]:.1f}")
    start = time.time()
    uniform = stated(profile, truth, "uniform", m, reps, pilot=pilot, seed=seed + 1)
    real = spread(profile, truth, "uniform", m, truth_reps, pilot=pilot, seed=seed + 1)
    print(f"  uniform m = {m}: stated half-width {uniform['half']:.4f}, 1.96 sd of the "
          f"estimate {real['half']:.4f}; expected difference {real['mean']:+.4f}; weak null's "
          f"half-width {uniform['weak']:.4f}")
    shares = {}
    for rule, label in RULES.items():
        if rule == "pilot" and not pilot:
            continue
        low = 1.0 + (pilot if rule == "pilot" else 0)
        for reading, goal, measure in (
                ("stated half-width", uniform["half"],
                 lambda b, r=rule: stated(profile, truth, r, b, reps, pilot=pilot,
                                          seed=seed + 2)),
                ("1.96 sd of the estimate", real["half"],
                 lambda b, r=rule: spread(profile, truth, r, b, truth_reps, pilot=pilot,
                                          seed=seed + 2))):
            budget = matching_budget(measure, goal, low, float(m))
            found = spread(profile, truth, rule, budget, truth_reps, pilot=pilot,
                           seed=seed + 3)
            share = found["spent"] / m
            shares[f"{rule}, {reading}"] = share
            totals = ", ".join(f"K = {k}: {(1 + k * share) / (1 + k):.2f}"
                               for k in STRATEGIES_IN_A_STUDY)
            same_cost = spread(profile, truth, "uniform", round(found["spent"]), truth_reps,
                               pilot=pilot, seed=seed + 3)["mean"]
            seen = stated(profile, truth, rule, budget, reps, pilot=pilot, seed=seed + 3)
            print(f"  {label}{f' ({pilot})' if rule == 'pilot' else ''}, same {reading}: "
                  f"{found['spent']:.1f} samples per question and strategy, {share:.2f} of "
                  f"uniform's (study with the clean model at m and K strategies: {totals}); "
                  f"expected difference {found['mean']:+.4f} (uniform at the same cost, "
                  f"m = {round(found['spent'])}: {same_cost:+.4f}); stated half-width "
                  f"{seen['half']:.4f}, 1.96 sd {found['half']:.4f}, weak null's half-width "
                  f"{seen['weak']:.4f}")
    bound, weights_alone = neyman_bound(profile, truth)
    print(f"  bound for any allocation of the strategies' samples (true solve probabilities): "
          f"{bound:.2f} of uniform's; from the strata's sizes alone {weights_alone:.2f}")
    best = min(shares, key=shares.get)
    print(f"  target, at most 0.40 of uniform's samples: "
          f"{'met' if shares[best] <= 0.40 else 'not met'} (best {shares[best]:.2f} of the "
          f"strategies' samples: {best}; {time.time() - start:.0f} s)")


CHECKS = {"demo": [(5, 0, False), (4, 2, False), (4, 2, True)], "paper": [(30, 0, False)]}
"""Per profile: main budget, pilot samples per strategy, whether the pilot is scored."""


def check(profile: Profile, reps: int, seed: int) -> None:
    print(f"\n{profile.name}: N = {profile.n}, m = {profile.m}, B = {profile.bins}; {reps} "
          f"allocated studies a row; load average {os.getloadavg()[0]:.1f}")
    for budget, pilot, reused in CHECKS[profile.name]:
        start = time.time()
        res = allocation_check(profile, reps, budget=budget, pilot=pilot, reuse_pilot=reused,
                               seed=seed)
        design = ("no pilot" if not pilot else
                  f"pilot {pilot} {'scored (pooled)' if reused else 'apart'}")
        print(f"  budget {budget}, {design}: {res.mean_samples:.2f} samples per question and "
              f"strategy ({time.time() - start:.0f} s)")
        for key, (bias, se) in res.bias.items():
            low, high = res.coverage[key].interval
            print(f"    {key:<20} bias {bias:+.4f} ± {se:.4f}  shift from uniform "
                  f"{res.shift[key]:+.4f}  coverage {res.coverage[key].rate:.3f} "
                  f"[{low:.3f}, {high:.3f}]")
        for key, rate in res.false_positive.items():
            low, high = rate.interval
            print(f"    false positives, {key:<20} {rate.rate:.3f} [{low:.3f}, {high:.3f}]")


def study_wall(kind: str, questions: int, m: int, budget: float | None, args) -> dict:
    """One study of the embedded model on arith into an empty folder: its wall times, samples
    drawn and the RailCap - Identity SA-PPG difference with its stated half-width."""
    import json
    import tempfile
    from pathlib import Path

    from zerogap.engine.base import EngineOptions
    from zerogap.store import RunStore
    from zerogap.study.run import evaluate
    from zerogap.study.spec import SettingSpec, StudySpec

    setting = SettingSpec(name="embedded-arith", clean="embedded", contaminated="embedded",
                          task="arith", limit=questions)
    study = StudySpec(settings=(setting,), strategies=tuple(NAMES[::-1]), m=m,
                      max_new_tokens=args.max_new_tokens, budget=budget, title=kind)
    out = Path(tempfile.mkdtemp(prefix=f"bench-allocation-{kind}-"))
    load = os.getloadavg()[0]
    start = time.perf_counter()
    report = evaluate(study, out, engine=EngineOptions(max_batch=args.batch_size,
                                                       dtype=args.dtype),
                      workers=args.workers)
    wall = time.perf_counter() - start
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    drawn = {}
    for label, run in entry["runs"].items():
        if "greedy" not in label:
            with RunStore(out / run, create=False) as store:
                drawn[label] = sum(store.sample_counts().values())
    ci = difference_interval(report.scores[setting.name].gaps, *NAMES)
    return {"wall": wall, "jobs": entry["wall_seconds"], "drawn": drawn,
            "difference": ci.estimate, "half": (ci.high - ci.low) / 2,
            "load": (load, os.getloadavg()[0]), "folder": out}


def wall(args) -> None:
    budget = round(args.share * args.m, 2)
    print(f"embedded SmolLM2-135M on arith: {args.questions} questions, Identity and RailCap; "
          f"uniform m = {args.m} against a budget of {budget} ({args.share} of m); "
          f"max_new_tokens {args.max_new_tokens}, batch size {args.batch_size}, "
          f"{args.workers or 'the default'} worker(s), dtype {args.dtype}")
    for repeat in range(args.repeat):
        order = ("uniform", "allocated") if repeat % 2 == 0 else ("allocated", "uniform")
        found = {kind: study_wall(kind, args.questions, args.m,
                                  None if kind == "uniform" else budget, args)
                 for kind in order}
        for kind in order:
            r = found[kind]
            strategies = r["drawn"]["identity"] + r["drawn"]["railcap"]
            print(f"  [{repeat}] {kind}: {r['wall']:.0f} s (jobs {r['jobs']:.0f} s); samples "
                  f"drawn {sum(r['drawn'].values())}, of them the strategies' {strategies}; "
                  f"RailCap - Identity SA-PPG {r['difference']:+.4f} ± {r['half']:.4f}; "
                  f"load average {r['load'][0]:.1f} -> {r['load'][1]:.1f}")
        u, a = found["uniform"], found["allocated"]
        print(f"  [{repeat}] allocated / uniform: wall {a['wall'] / u['wall']:.2f}, jobs "
              f"{a['jobs'] / u['jobs']:.2f}, samples drawn "
              f"{sum(a['drawn'].values()) / sum(u['drawn'].values()):.2f}, stated half-width "
              f"{a['half'] / u['half']:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", nargs="+", choices=("paper", "demo"),
                        default=["paper", "demo"])
    parser.add_argument("--reps", type=int, default=None,
                        help="studies per stated half-width (default 40), or per row of "
                             "--check (default 200)")
    parser.add_argument("--truth-reps", type=int, default=400)
    parser.add_argument("--pilot", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true",
                        help="print the calibration of allocated studies instead")
    parser.add_argument("--wall", action="store_true",
                        help="time a uniform and an allocated study of the embedded model "
                             "instead")
    parser.add_argument("--questions", type=int, default=24, help="--wall: arith questions")
    parser.add_argument("-m", type=int, default=8, help="--wall: uniform m")
    parser.add_argument("--share", type=float, default=0.71,
                        help="--wall: the allocated study's budget as a share of m")
    parser.add_argument("--repeat", type=int, default=1, help="--wall: pairs of studies")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "auto"))
    args = parser.parse_args()
    if args.wall:
        wall(args)
        return
    for name in args.profile:
        profile = {"paper": PAPER, "demo": DEMO}[name]
        if args.check:
            check(profile, args.reps or 200, args.seed)
        else:
            bench(profile, args.reps or 40, args.truth_reps, args.pilot, args.seed)


if __name__ == "__main__":
    main()
