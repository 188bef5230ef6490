"""``zerogap score``: restoration metrics of one or more strategies against a clean run.

Reads per-question outcome files (:mod:`zerogap.io.counts`), prints one table with bootstrap CIs,
the finite-sample noise floor and paired comparisons against the best strategy, and optionally
writes everything as JSON with its provenance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

from zerogap import __version__
from zerogap.cli import UserError
from zerogap.io.counts import QuestionCounts, read_counts
from zerogap.metrics import DEFAULT_BINS, METRIC_NAMES, single_draw
from zerogap.uncertainty import BootstrapGaps, bootstrap_gaps, compare, noise_floor

COLUMNS = {
    "g_ap": "G-AP",
    "g_app": "G-APP",
    "a_ppg": "A-PPG",
    "delta_plus": "Δ+",
    "delta_minus": "Δ-",
    "sa_ppg": "SA-PPG",
    "s_delta_plus": "S-Δ+",
    "s_delta_minus": "S-Δ-",
}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score",
        help="score mitigation strategies against a clean run (SA-PPG and family, with CIs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  zerogap score --clean clean.jsonl --mitigated railcap=rc.jsonl "
        "--mitigated identity=id.jsonl --json scores.json",
    )
    p.add_argument("--clean", required=True, help="per-question outcomes of the clean model")
    p.add_argument(
        "--mitigated",
        required=True,
        action="append",
        metavar="NAME=FILE",
        help="a strategy's per-question outcomes on the contaminated model (repeatable)",
    )
    p.add_argument("--bins", type=int, default=DEFAULT_BINS, help="SA-PPG strata (default 50)")
    p.add_argument(
        "--bootstrap", type=int, default=10_000, metavar="N", help="replicates (0: no CIs)"
    )
    p.add_argument("--level", type=float, default=0.95, help="confidence level (default 0.95)")
    p.add_argument(
        "--within-questions",
        action="store_true",
        help="two-level bootstrap: also resample the samples within each question",
    )
    p.add_argument("--noise-sims", type=int, default=2000, help="noise-floor simulations")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and draws")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    p.set_defaults(func=run)


def _parse_mitigated(items: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--mitigated expects NAME=FILE, got {item!r}")
        if name in (n for n, _ in pairs):
            raise UserError(f"strategy name {name!r} given twice")
        pairs.append((name, path))
    return pairs


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _draws(clean: QuestionCounts, runs: list[QuestionCounts], seed: int):
    """Single 0/1 readouts for G-AP: each file's first sample, or a seeded draw from its counts."""
    if clean.first is not None and all(run.first is not None for run in runs):
        return clean.first, np.stack([run.first for run in runs]), "first sample"
    rng = np.random.default_rng([seed, 1])
    draw_clean = single_draw(clean.correct, clean.samples, seed=rng)
    draw_mit = np.stack([single_draw(run.correct, run.samples, seed=rng) for run in runs])
    return draw_clean, draw_mit, f"one seeded draw per question from the counts (seed {seed})"


def _fmt_m(samples: np.ndarray) -> str:
    lo, hi = int(samples.min()), int(samples.max())
    return f"m = {lo}" if lo == hi else f"m = {lo}..{hi}"


def run(args) -> int:
    pairs = _parse_mitigated(args.mitigated)
    if args.bins < 1:
        raise UserError(f"--bins must be a positive integer, got {args.bins}")
    if args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    clean = read_counts(args.clean)
    runs = [read_counts(path).aligned_to(clean) for _, path in pairs]
    names = [name for name, _ in pairs]
    draw_clean, draw_mit, draw_note = _draws(clean, runs, args.seed)

    boot = bootstrap_gaps(
        clean.correct,
        clean.samples,
        np.stack([r.correct for r in runs]),
        np.stack([r.samples for r in runs]),
        names=names,
        bins=args.bins,
        n_boot=max(args.bootstrap, 1),
        level=args.level,
        seed=args.seed,
        within_questions=args.within_questions,
        draw_clean=draw_clean,
        draw_mitigated=draw_mit,
    )
    with_ci = args.bootstrap > 0
    mitigated_m = np.concatenate([r.samples for r in runs])
    other = int(np.median(mitigated_m))
    floor = noise_floor(
        clean.correct,
        clean.samples,
        other_samples=None if other == int(np.median(clean.samples)) else other,
        bins=args.bins,
        n_sim=args.noise_sims,
        seed=args.seed,
    )
    best = min(names, key=lambda n: boot.estimates[names.index(n)].sa_ppg)
    comparisons = [
        compare(boot, name, best, metric=metric)
        for metric in ("sa_ppg", "a_ppg")
        for name in names
        if name != best and with_ci
    ]

    print(_table(boot, clean, runs, with_ci, draw_note, floor, comparisons, best))
    if args.json:
        _write_json(args, clean, pairs, boot, with_ci, draw_note, floor, comparisons)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def _table(boot: BootstrapGaps, clean, runs, with_ci, draw_note, floor, comparisons, best) -> str:
    est0 = boot.estimates[0]
    width = max(10, *(len(n) for n in boot.names)) + 2
    lines = [
        f"{est0.n_questions} questions, clean {_fmt_m(clean.samples)}, "
        f"B = {est0.bins} strata ({len(est0.strata_used)} non-empty)"
        + (
            f", {boot.n_boot} bootstrap replicates "
            f"({'questions and samples' if boot.within_questions else 'questions'}), "
            f"{boot.level:.0%} CIs"
            if with_ci
            else ", no bootstrap"
        ),
        "",
        "strategy".ljust(width) + "".join(f"{COLUMNS[m]:>14}" for m in METRIC_NAMES),
    ]
    for name, est, run in zip(boot.names, boot.estimates, runs, strict=True):
        lines.append(name.ljust(width) + "".join(f"{getattr(est, m):>14.4f}" for m in METRIC_NAMES))
        if with_ci:
            cells = []
            for m in METRIC_NAMES:
                ci = boot.interval(name, m)
                cells.append(f"[{ci.low:.3f},{ci.high:.3f}]".rjust(14))
            lines.append(f"  {_fmt_m(run.samples)}".ljust(width) + "".join(cells))
    sizes = np.asarray(est0.strata_sizes)
    if with_ci and not boot.within_questions and sizes[sizes <= 2].sum() > 0.25 * sizes.sum():
        lines += [
            "",
            f"note: {sizes[sizes <= 2].sum()} of {sizes.sum()} questions sit in strata of one or "
            "two, whose question-level intervals",
            "      cannot show sampling noise; rerun with --within-questions for SA-PPG "
            "intervals and comparisons.",
        ]
    lines += [
        "",
        "Δ+ under-suppression (inflation left in place), Δ- over-suppression (collateral damage);",
        f"A-PPG = Δ+ + Δ-, G-APP = |Δ+ - Δ-|, SA-PPG = S-Δ+ + S-Δ-. G-AP uses {draw_note}.",
        "",
        f"noise floor (two independent batches of the clean model"
        f"{'' if floor.samples is None else f', the second with m = {floor.samples}'}): "
        f"SA-PPG {floor.sa_ppg:.4f} (95th pct {floor.sa_ppg_upper:.4f}), "
        f"A-PPG {floor.a_ppg:.4f} (95th pct {floor.a_ppg_upper:.4f})",
    ]
    for name, est in zip(boot.names, boot.estimates, strict=True):
        verdict = (
            "restored up to sampling noise"
            if est.sa_ppg <= floor.sa_ppg_upper
            else f"not restored ({est.sa_ppg / max(floor.sa_ppg, 1e-12):.1f}x the noise floor)"
        )
        lines.append(f"  {name}: {verdict}")
    if comparisons:
        lines += ["", f"paired differences against the best strategy by SA-PPG ({best}):"]
        for c in comparisons:
            p = "p < 0.001" if c.p_value < 0.001 else f"p = {c.p_value:.3f}"
            lines.append(
                f"  {COLUMNS[c.metric]:>6}  {c.a} - {c.b}: {c.difference:+.4f} "
                f"[{c.low:+.4f}, {c.high:+.4f}], {p}"
            )
    return "\n".join(lines)


def _write_json(args, clean, pairs, boot, with_ci, draw_note, floor, comparisons) -> None:
    strategies = {}
    for name, est in zip(boot.names, boot.estimates, strict=True):
        entry = {"strata_used": est.strata_used, "strata_sizes": est.strata_sizes}
        for m in METRIC_NAMES:
            ci = boot.interval(name, m)
            entry[m] = ci.to_dict() if with_ci else {"estimate": ci.estimate}
        strategies[name] = entry
    result = {
        "zerogap_version": __version__,
        "inputs": {
            "clean": {"path": clean.path, "sha256": _sha256(clean.path)},
            "mitigated": {n: {"path": p, "sha256": _sha256(p)} for n, p in pairs},
        },
        "settings": {
            "n_questions": len(clean),
            "bins": args.bins,
            "bootstrap": args.bootstrap,
            "level": args.level,
            "within_questions": args.within_questions,
            "seed": args.seed,
            "g_ap_readout": draw_note,
        },
        "strategies": strategies,
        "noise_floor": floor.to_dict(),
        "comparisons": [c.to_dict() for c in comparisons],
    }
    out = Path(args.json)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
