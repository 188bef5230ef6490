"""Benchmark: samples an allocated study needs for the precision of a uniform one (issues 48, 60).

For each profile (zerogap.uncertainty.calibration: PAPER, Llama-2 x GSM8K as the paper shows it,
1,319 questions at m = 50, B = 50; the PAPER_MATCHED ones, other clean models with the same
published figures; DEMO, the embedded demo's 128 questions at m = 8, B = 5), one benchmark is
drawn and held fixed (its clean model, a RailCap-like strategy and Identity), and simulated
studies of it are scored as a study would score them. Both strategies sample on shared noise
(``shared_outcomes``: sample j of a question agrees between them as far as their solve
probabilities allow, as the engine's noise keyed by (seed, question, sample index) makes it),
and the intervals are given their paired outcomes.

* uniform: the clean reference batch and both strategies at the profile's m;
* allocated, reference at m: the clean model's second batch places the questions in strata and
  both strategies get ``allocate_samples`` of a budget;
* allocated, reference allocated: the same, with the reference batch allocated upward from the
  second batch for a study of K = 5 sampled strategies (``reference_strategies=5``).

Precision is that of each target (RailCap's and Identity's SA-PPG and their difference) on
these questions: 1.96 standard deviations of its estimate over ``--reps`` studies. Every design
reads the same studies (common random numbers, ``Plans``): study i's second batch, reference
batch and strategies' samples come from streams of (seed, i) laid out by sample index, so
designs differ by their plans alone and a question given more samples keeps its first ones.
The budget whose every target is at least as precise as uniform's is found by bisection.
Printed per design: the samples per question and strategy, the reference's, and the share of
uniform's samples for a whole study of the clean reference and K = 5 strategies, with its
simulation noise (a bootstrap over the studies: ``--resamples``); each strategy's shift (its
expected SA-PPG at the plan less uniform's, in uniform's half-widths); the stated half-widths
(``--stated`` studies: their mean, and the difference's without the paired outcomes); and the
coverage of each target's expectation at the plan (the mean estimate over the studies) by
estimate ± the stated half-width. Beside them:
the bound of any allocation fixed before the reference batch (Neyman's with the true solve
probabilities) and its spread over ``--draws`` benchmarks of the same profile.

The target on PAPER: a whole study at most 0.53 of uniform's samples, every coverage at least
0.94; the command exits 1 when it is not met.

With ``--check`` it prints instead the calibration of allocated studies
(``zerogap.uncertainty.calibration.allocation_check``, ``--reps`` replicates a row) and judges
each row by ``AllocationCheck.failures`` (bias within a quarter of the half-width, coverage,
false positives); it exits 1 when a row fails, and ``--broken`` runs a deliberately broken plan
(the copies sampled at half the plan's m) that must fail.

With ``--wall`` it times instead what an allocated study saves on the demo's own model, the
embedded SmolLM2-135M, as ``zerogap evaluate`` runs it: a small uniform study (``--questions``
arith questions, Identity and RailCap, m = ``-m``) and an allocated one whose budget is
``--share`` of m (default 0.71), each from an empty folder, alternately (``--repeat``), with
the load average before and after each. It prints each study's wall time (the whole command,
and its jobs alone), the samples it drew, and the RailCap - Identity SA-PPG difference with the
half-width it states, so the precision each reached is read beside its cost.

    python bench/bench_allocation.py [--profile paper paper-beta ...] [--reps 100] [--stated 8]
        [--seed 0] [--reference-ratio R]
    python bench/bench_allocation.py --check [--profile demo paper] [--reps 200] [--broken]
    python bench/bench_allocation.py --wall [--questions 24] [-m 8] [--share 0.71] [--repeat 1]
"""

import argparse
import math
import os
import sys
import time
from dataclasses import replace

import numpy as np

from zerogap.metrics import restoration_gaps, strata
from zerogap.uncertainty import allocate_samples, difference_interval, gap_intervals
from zerogap.uncertainty.allocation import _scaled
from zerogap.uncertainty.calibration import (
    DEMO,
    PAPER,
    PAPER_MATCHED,
    Profile,
    allocation_check,
    sample_noise,
    shared_outcomes,
)
from zerogap.uncertainty.solve_prior import binomial_likelihood

NAMES = ["railcap", "identity"]
TARGETS = ("railcap", "identity", "railcap - identity")
STRATEGIES = 5  # the paper's sampled strategies: the whole study's K
PROFILES = {p.name: p for p in (PAPER, *PAPER_MATCHED, DEMO)}
DESIGNS = {"reference at m": None, "reference allocated": STRATEGIES}
GOAL = {"share": 0.53, "coverage": 0.94}


class Plans:
    """The plans of one benchmark's simulated studies, and the noise each study samples on.

    Study i draws from streams of its own, the same for every design (common random numbers):
    the clean second batch from ``(seed, i, 0)``, the reference batch's uniforms from
    ``(seed, i, 1)`` and the strategies' from ``(seed, i, 2)``, laid out by sample index
    (``sample_noise``), so a design that gives a question more samples keeps its first ones and
    a design whose plan is uniform's reads uniform's estimates exactly. Designs then differ by
    their plans alone, and the matching compares sds read on the same studies.

    The allocation's score (each question's expected SA-PPG weight; no pilot, so spread 1)
    depends on the second batch alone: ``allocate_samples`` computes it once per study, and
    each budget scales it as ``allocate_samples`` does (``_scaled``; the bench's test holds the
    two plans equal). The reference batch gets ``max(m, round(m_q * ratio))``: the library's
    ``ratio = √K`` with ``reference_strategies = K``, or ``ratio`` when given.
    """

    def __init__(self, profile: Profile, truth, seed: int, ratio: float | None = None):
        self.profile, self.truth, self.seed, self.ratio = profile, truth, seed, ratio
        self._second: dict[int, np.ndarray] = {}
        self._score: dict[int, np.ndarray] = {}

    def second(self, i: int) -> np.ndarray:
        if i not in self._second:
            rng = np.random.default_rng([self.seed, i, 0])
            self._second[i] = rng.binomial(self.profile.m, self.truth[0])
        return self._second[i]

    def __call__(self, i: int, budget: float | None, reference: int | None):
        """(samples, reference) per question of study i: uniform m (``budget`` None) or the
        allocation of ``budget``, the reference at m (``reference`` None) or allocated for
        ``reference`` strategies sharing it."""
        n, m = self.profile.n, self.profile.m
        if budget is None:
            return np.full(n, m), np.full(n, m)
        if i not in self._score:
            plan = allocate_samples(self.second(i), np.full(n, m), budget=m,
                                    bins=self.profile.bins, max_samples=8 * m)
            self._score[i] = plan.weights * plan.spread
        samples = _scaled(self._score[i], 1, 8 * m, lambda alloc: alloc.mean() <= budget)
        if reference is None:
            return samples, np.full(n, m)
        ratio = math.sqrt(reference) if self.ratio is None else self.ratio
        return samples, np.maximum(m, np.floor(samples * ratio + 0.5)).astype(np.int64)

    def outcomes(self, i: int, samples, reference, *, joint: bool):
        """Study i's reference counts (N,), the strategies' counts (2, N) and, with ``joint``,
        their paired joint counts (2, 2, N), on the study's own noise."""
        clean, railcap, identity = self.truth
        n = self.profile.n
        ref_noise, noise = (sample_noise(np.random.default_rng([self.seed, i, k]), n, int(top))
                            for k, top in ((1, reference.max()), (2, samples.max())))
        (reference_counts,), _ = shared_outcomes(None, clean[None], reference[None],
                                                 joint=False, noise=ref_noise)
        counts, paired = shared_outcomes(None, np.stack([railcap, identity]),
                                         np.stack([samples, samples]), joint=joint,
                                         noise=noise)
        return reference_counts, counts, paired


def studies(plans: Plans, budget, reference, reps: int, stated: int) -> dict:
    """``reps`` studies of one design: estimates (reps, 3), samples spent per study, and for
    the first ``stated`` the stated half-widths (3,) and the difference's without paired
    outcomes."""
    profile = plans.profile
    estimates, spent, ref_spent, half, independent = [], [], [], [], []
    for i in range(reps):
        samples, ref_m = plans(i, budget, reference)
        reference_counts, counts, joint = plans.outcomes(i, samples, ref_m, joint=i < stated)
        r_clean = reference_counts / ref_m
        a, b = (restoration_gaps(r_clean, counts[k] / samples, bins=profile.bins).sa_ppg
                for k in range(2))
        estimates.append((a, b, a - b))
        spent.append(samples.mean())
        ref_spent.append(ref_m.mean())
        if i < stated:
            gaps = gap_intervals(reference_counts, ref_m, counts, np.stack([samples] * 2),
                                 names=NAMES, bins=profile.bins, n_resamples=1,
                                 joint_correct=joint)
            cis = [gaps.interval("railcap", "sa_ppg"), gaps.interval("identity", "sa_ppg"),
                   difference_interval(gaps, *NAMES)]
            half.append([ci.high - ci.estimate for ci in cis])
            alone = difference_interval(replace(gaps, joint_correct=None), *NAMES)
            independent.append(alone.high - alone.estimate)
    est = np.asarray(estimates)
    out = {"mean": est.mean(axis=0), "sd": est.std(axis=0, ddof=1), "estimates": est,
           "spent": np.asarray(spent), "ref_spent": np.asarray(ref_spent),
           "samples": float(np.mean(spent)), "reference": float(np.mean(ref_spent))}
    if stated:
        out["half"] = np.mean(half, axis=0)
        out["independent"] = float(np.mean(independent))
    return out


def whole_share(samples, reference, m: int):
    """A whole study's samples (reference + K strategies) as a share of uniform m's."""
    return (reference + STRATEGIES * samples) / ((1 + STRATEGIES) * m)


def matching_budget(plans: Plans, reference, goal_sd, reps) -> tuple[float | None, dict]:
    """The smallest budget whose every target's sd is at most uniform's, by bisection to
    within 0.05 samples (the budget returned is the upper end: at most that much above it),
    and every design evaluated on the way ({budget: studies}); None when even m does not
    reach it. Every step reads the same studies (``Plans``), so the sds compared differ by
    the plans alone."""
    low, high = 1.0, float(plans.profile.m)
    seen = {high: studies(plans, high, reference, reps, 0)}
    if not np.all(seen[high]["sd"] <= goal_sd):
        return None, seen
    while high - low > 0.05:
        mid = (low + high) / 2
        seen[mid] = studies(plans, mid, reference, reps, 0)
        if np.all(seen[mid]["sd"] <= goal_sd):
            high = mid
        else:
            low = mid
    return high, seen


def share_noise(uniform: dict, seen: dict, matched: float, m: int, resamples: int,
                seed: int) -> dict:
    """The matched share's simulation noise: a bootstrap over the studies (the same indices
    for uniform and every design evaluated, as they share their noise). In each resample the
    matched budget is where the largest ratio of a target's sd to uniform's crosses 1, linear
    between the evaluated budgets about it (the smallest above which every evaluated budget
    matches), and the whole study's share there likewise. ``sd`` and ``interval`` (95%) are
    over the resamples that matched; ``none``: resamples where no budget up to m matched;
    ``lowest``: those that matched at the smallest budget evaluated (their share is its).
    ``ratios``: each target's sd over uniform's at the ``matched`` budget and at m, with its
    standard error over the resamples ({budget: (ratio (3,), se (3,))})."""
    rng = np.random.default_rng([seed, 8])
    budgets = sorted(seen)
    reps = uniform["estimates"].shape[0]
    shares, none, lowest, kept = [], 0, 0, []
    for _ in range(resamples):
        idx = rng.integers(0, reps, reps)
        goal = uniform["estimates"][idx].std(axis=0, ddof=1)
        ratios = np.array([seen[b]["estimates"][idx].std(axis=0, ddof=1) / goal
                           for b in budgets])  # (budgets, 3)
        kept.append(ratios[[budgets.index(matched), -1]])
        ratio = ratios.max(axis=1)
        share = np.array([whole_share(seen[b]["spent"][idx].mean(),
                                      seen[b]["ref_spent"][idx].mean(), m) for b in budgets])
        failing = np.flatnonzero(ratio > 1)
        k = 0 if failing.size == 0 else failing[-1] + 1
        if k == len(budgets):
            none += 1
        elif k == 0:
            lowest += 1
            shares.append(share[0])
        else:
            t = (ratio[k - 1] - 1) / (ratio[k - 1] - ratio[k])
            shares.append(share[k - 1] + t * (share[k] - share[k - 1]))
    return {"sd": float(np.std(shares, ddof=1)) if len(shares) > 1 else float("nan"),
            "interval": tuple(np.percentile(shares, [2.5, 97.5])) if shares else (np.nan,) * 2,
            "none": none, "lowest": lowest, "resamples": resamples, "shares": shares,
            "ratios": {b: (seen[b]["sd"] / uniform["sd"], np.std(kept, axis=0, ddof=1)[j])
                       for j, b in enumerate((matched, budgets[-1]))}}


def design_bound(profile: Profile, truth) -> float:
    """The least share of uniform's strategy samples any allocation fixed before the reference
    batch needs for the same variance of the difference: Neyman's with the true solve
    probabilities and the strata's expected weights (each question's chance of each stratum at
    m), ``(Σ w σ)² / (N Σ w² σ²)`` by Cauchy-Schwarz."""
    clean, railcap, identity = truth
    m, bins = profile.m, profile.bins
    counts = np.arange(m + 1)
    landing = np.zeros((profile.n, bins))
    pmf = binomial_likelihood(counts, np.full(m + 1, m), clean).T  # (N, m + 1)
    np.add.at(landing.T, strata(counts / m, bins=bins), pmf.T)
    sizes = landing.sum(axis=0)
    nonempty = float((1 - np.exp(np.log1p(-np.minimum(landing, 1 - 1e-12)).sum(axis=0))).sum())
    w = (landing / (nonempty * (1 + sizes - landing))).sum(axis=1)
    sigma = np.sqrt(railcap * (1 - railcap) + identity * (1 - identity))
    return float((w * sigma).sum() ** 2 / (profile.n * (w**2 * sigma**2).sum()))


def bench(profile: Profile, reps: int, stated: int, draws: int, seed: int,
          ratio: float | None = None, resamples: int = 200) -> bool:
    """Print one profile's designs; True when it meets the goal (PAPER only is judged)."""
    truth = profile.draw(np.random.default_rng(seed))
    m, start = profile.m, time.time()
    plans = Plans(profile, truth, seed, ratio)
    print(f"\n{profile.name}: N = {profile.n}, m = {m}, B = {profile.bins}; 0/{m} on "
          f"{(np.random.default_rng(seed).binomial(m, truth[0]) == 0).mean():.0%} of questions, "
          f"mean clean solve probability {truth[0].mean():.2f}; shared noise; {reps} studies "
          f"per design on common random numbers, {stated} stated; reference ratio "
          f"{'√K' if ratio is None else f'{ratio:.3f}'}; seed {seed}; load average "
          f"{os.getloadavg()[0]:.1f}")
    uniform = studies(plans, None, None, reps, stated)
    goal = 1.96 * uniform["sd"]
    print("  uniform m = {}: 1.96 sd {}; stated half-width {}; the difference's without the "
          "paired outcomes {:.4f}".format(
              m, ", ".join(f"{k} {v:.4f}" for k, v in zip(TARGETS, goal, strict=True)),
              ", ".join(f"{v:.4f}" for v in uniform["half"]), uniform["independent"]))
    met, below = True, 0.0
    for design, reference in DESIGNS.items():
        budget, seen = matching_budget(plans, reference, uniform["sd"], reps)
        if budget is None:
            print(f"  {design}: no budget up to m = {m} is as precise as uniform on every "
                  "target")
            met = met and not (design == "reference allocated" and profile is PAPER)
            continue
        # budgets about the matched one and across the range, for the bootstrap's resamples
        # to cross between wherever they match (the bisection evaluated one side of it only)
        for near in sorted({*(round(budget * (1 + step), 2)
                              for step in (-0.15, -0.08, -0.03, 0.03, 0.08, 0.15)),
                            *(round(m * share, 2) for share in (0.2, 0.3, 0.4, 0.6, 0.8))}):
            if 1 <= near <= m and near not in seen:
                seen[near] = studies(plans, near, reference, reps, 0)
        noise = share_noise(uniform, seen, budget, m, resamples, seed)
        # the first ``stated`` of the same studies again, for their intervals
        intervals = studies(plans, budget, reference, stated, stated)
        found = {**seen[budget], "half": intervals["half"],
                 "independent": intervals["independent"]}
        share = whole_share(found["samples"], found["reference"], m)
        shift = (found["mean"] - uniform["mean"]) / goal
        cover = (np.abs(found["estimates"] - found["mean"]) <= found["half"]).mean(axis=0)
        print(f"  {design}: budget {budget:.2f}, {found['samples']:.1f} samples per question "
              f"and strategy ({found['samples'] / m:.2f} of uniform's), reference "
              f"{found['reference']:.1f}; whole study (reference + K = {STRATEGIES}): "
              f"{share:.3f} of uniform's samples")
        low, high = noise["interval"]
        print(f"    the share's simulation noise (bootstrap over the {reps} studies, "
              f"{noise['resamples']} resamples): sd {noise['sd']:.3f}, 95% {low:.3f}-{high:.3f}"
              + (f"; {noise['none']} resamples matched at no budget up to m"
                 if noise["none"] else "")
              + (f"; {noise['lowest']} at the smallest budget evaluated"
                 if noise["lowest"] else ""))
        print("    sd over uniform's (± its bootstrap se): " + "; ".join(
            f"at a budget of {b:.2f}: " + ", ".join(f"{k} {r:.2f} ± {e:.2f}"
                                      for k, r, e in zip(TARGETS, *noise["ratios"][b],
                                                         strict=True))
            for b in noise["ratios"]))
        print("    shift in uniform's half-widths: " + ", ".join(
            f"{k} {v:+.2f}" for k, v in zip(TARGETS, shift, strict=True)))
        print("    stated half-width " + ", ".join(
            f"{k} {v:.4f}" for k, v in zip(TARGETS, found["half"], strict=True))
            + f" (difference without paired outcomes {found['independent']:.4f}); coverage "
            + ", ".join(f"{k} {v:.3f}" for k, v in zip(TARGETS, cover, strict=True)))
        if design == "reference allocated" and profile is PAPER:
            met = share <= GOAL["share"] and bool(np.all(cover >= GOAL["coverage"]))
            below = np.sum(np.asarray(noise["shares"]) <= GOAL["share"]) / resamples
    bounds = [design_bound(profile, profile.draw(np.random.default_rng([seed, 9, d])))
              for d in range(draws)]
    print(f"  bound of allocations fixed before the reference batch (strategies' samples): "
          f"{design_bound(profile, truth):.2f} on this draw; over {draws} draws "
          f"{min(bounds):.2f}-{max(bounds):.2f} (median {np.median(bounds):.2f})")
    if profile is PAPER:
        print(f"  target, whole study at most {GOAL['share']} of uniform's samples with every "
              f"coverage at least {GOAL['coverage']}: {'met' if met else 'not met'} "
              f"(the share of these studies; {below:.0%} of the bootstrap's resamples at most "
              f"{GOAL['share']}) ({time.time() - start:.0f} s)")
    else:
        print(f"  ({time.time() - start:.0f} s)")
    return met


CHECKS = {"demo": [(5, 0, False), (4, 2, False), (4, 2, True)], "paper": [(30, 0, False)]}
"""Per profile: main budget, pilot samples per strategy, whether the pilot is scored."""


def check(profile: Profile, reps: int, seed: int, broken: bool) -> bool:
    """Print the calibration rows of one profile; True when every row meets its criteria."""
    print(f"\n{profile.name}: N = {profile.n}, m = {profile.m}, B = {profile.bins}; {reps} "
          f"allocated studies a row, shared noise, reference allocated for K = {STRATEGIES}"
          f"{'; BROKEN plan: the copies at half the m' if broken else ''}; load average "
          f"{os.getloadavg()[0]:.1f}")
    held = True
    for budget, pilot, reused in CHECKS[profile.name]:
        start = time.time()
        res = allocation_check(profile, reps, budget=budget, pilot=pilot, reuse_pilot=reused,
                               reference_strategies=STRATEGIES,
                               twin_share=0.5 if broken else 1.0, seed=seed)
        design = ("no pilot" if not pilot else
                  f"pilot {pilot} {'scored (pooled)' if reused else 'apart'}")
        print(f"  budget {budget}, {design}: {res.mean_samples:.2f} samples per question and "
              f"strategy ({time.time() - start:.0f} s)")
        for key, (bias, se) in res.bias.items():
            low, high = res.coverage[key].interval
            print(f"    {key:<20} bias {bias:+.4f} ± {se:.4f} (half-width "
                  f"{res.half_width[key]:.4f})  shift from uniform {res.shift[key]:+.4f}  "
                  f"coverage {res.coverage[key].rate:.3f} [{low:.3f}, {high:.3f}]")
        for key, rate in res.false_positive.items():
            low, high = rate.interval
            print(f"    false positives, {key:<20} {rate.rate:.3f} [{low:.3f}, {high:.3f}]")
        failures = res.failures()
        print("    criteria: " + ("held" if not failures else "FAILED: " + "; ".join(failures)))
        held = held and not failures
    return held


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
    parser.add_argument("--profile", nargs="+", choices=tuple(PROFILES), default=None)
    parser.add_argument("--reps", type=int, default=None,
                        help="studies per design (default 100), or per row of --check "
                             "(default 200)")
    parser.add_argument("--stated", type=int, default=8,
                        help="studies per design whose intervals are computed")
    parser.add_argument("--draws", type=int, default=10,
                        help="benchmarks of each profile for the bound's spread")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=200,
                        help="bootstrap resamples of the studies for the share's noise")
    parser.add_argument("--reference-ratio", type=float, default=None,
                        help="reference samples per strategy sample on each question (never "
                             "below m) instead of the library's √K")
    parser.add_argument("--check", action="store_true",
                        help="print the calibration of allocated studies instead")
    parser.add_argument("--broken", action="store_true",
                        help="--check: a deliberately broken plan, which must fail")
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
        return 0
    ok = True
    if args.check:
        for name in args.profile or ["demo", "paper"]:
            if name not in CHECKS:
                print(f"--check: no rows for profile {name!r}; have {', '.join(CHECKS)}",
                      file=sys.stderr)
                return 2
            ok = check(PROFILES[name], args.reps or 200, args.seed, args.broken) and ok
        return 0 if ok else 1
    for name in args.profile or list(PROFILES):
        ok = bench(PROFILES[name], args.reps or 100, args.stated, args.draws, args.seed,
                   args.reference_ratio, args.resamples) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
