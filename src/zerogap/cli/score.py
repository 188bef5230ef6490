"""``zerogap score``: restoration metrics of one or more strategies against a clean run.

Reads per-question outcome files (:mod:`zerogap.io.counts`) or run directories, prints one
table with bootstrap CIs, the finite-sample noise floor and paired comparisons against the best
strategy, and optionally writes everything as JSON with each input's provenance. The numbers
come from :func:`zerogap.analysis.score.score`; this module only renders them.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from zerogap.analysis.score import Scorecard, ScoreSettings, load_input, score
from zerogap.cli.output import STDOUT, emit_json, json_destination
from zerogap.config import parse_pairs
from zerogap.metrics import DEFAULT_BINS, METRIC_LABELS, METRIC_NAMES
from zerogap.tasks.extract import check_mode


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score",
        help="score mitigation strategies against a clean run (SA-PPG and family, with CIs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  zerogap score --clean clean.jsonl --mitigated railcap=rc.jsonl "
        "--mitigated identity=id.jsonl --json scores.json",
    )
    p.add_argument("--clean", required=True, metavar="FILE|RUN_DIR",
                   help="per-question outcomes of the clean model: a counts file, a run "
                        "directory, or an lm-evaluation-harness samples_*.jsonl log")
    p.add_argument(
        "--mitigated",
        required=True,
        action="append",
        metavar="NAME=FILE|RUN_DIR",
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
    p.add_argument("--margin", type=float, metavar="M",
                   help="also give each strategy a restoration verdict: an equivalence test of "
                        "its SA-PPG's excess over the noise floor against this margin (e.g. 0.05)")
    p.add_argument("--json", metavar="OUT",
                   help="also write the results as JSON; '-': JSON on stdout, table on stderr")
    p.add_argument("--lmeval-grading", default="anchor", metavar="MODE",
                   help="grader of lm-evaluation-harness logs' raw responses: anchor (default), "
                        "lmeval-strict, lmeval-strict-hash or lmeval-flexible")
    p.set_defaults(func=run)


def _fmt_m(samples: np.ndarray) -> str:
    lo, hi = int(samples.min()), int(samples.max())
    return f"m = {lo}" if lo == hi else f"m = {lo}..{hi}"


def run(args) -> int:
    settings = ScoreSettings(bins=args.bins, bootstrap=args.bootstrap, level=args.level,
                             within_questions=args.within_questions, noise_sims=args.noise_sims,
                             seed=args.seed, margin=args.margin)
    pairs = parse_pairs("--mitigated", args.mitigated, what="NAME=FILE")
    out = None if args.json is None else json_destination(args.json, "--json")
    check_mode(args.lmeval_grading)
    clean = load_input("clean", args.clean, lmeval_grading=args.lmeval_grading)
    mitigated = [load_input(name, path, lmeval_grading=args.lmeval_grading)
                 for name, path in pairs.items()]
    card = score(clean, mitigated, settings)
    print(render_table(card), file=sys.stderr if out == STDOUT else sys.stdout)
    if out is not None:
        emit_json(out, card.to_dict())
    return 0


def render_table(card: Scorecard) -> str:
    """The scorecard as the text table ``zerogap score`` prints."""
    boot, floor, with_ci = card.boot, card.floor, card.with_ci
    clean = card.clean.counts
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
        "strategy".ljust(width) + "".join(f"{METRIC_LABELS[m]:>14}" for m in METRIC_NAMES),
    ]
    for name, est, run in zip(boot.names, boot.estimates, card.runs, strict=True):
        lines.append(name.ljust(width) + "".join(f"{getattr(est, m):>14.4f}" for m in METRIC_NAMES))
        if with_ci:
            cells = []
            for m in METRIC_NAMES:
                ci = boot.interval(name, m)
                cells.append(f"[{ci.low:.3f},{ci.high:.3f}]".rjust(14))
            lines.append(f"  {_fmt_m(run.counts.samples)}".ljust(width) + "".join(cells))
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
        f"A-PPG = Δ+ + Δ-, G-APP = |Δ+ - Δ-|, SA-PPG = S-Δ+ + S-Δ-. G-AP uses {card.draw_note}.",
        "",
        f"noise floor (two independent batches of the clean model"
        f"{'' if floor.samples is None else f', the second with m = {floor.samples}'}): "
        f"SA-PPG {floor.sa_ppg:.4f} (95th pct {floor.sa_ppg_upper:.4f}), "
        f"A-PPG {floor.a_ppg:.4f} (95th pct {floor.a_ppg_upper:.4f})",
    ]
    for name, est in zip(boot.names, boot.estimates, strict=True):
        verdict = (
            "restored up to sampling noise"
            if card.restored(name)
            else f"not restored ({est.sa_ppg / max(floor.sa_ppg, 1e-12):.1f}x the noise floor)"
        )
        lines.append(f"  {name}: {verdict}")
    if card.verdicts:
        lines += ["", f"restoration verdicts (equivalence test, margin {card.settings.margin}):"]
        lines += [f"  {v.name}: {v.sentence()}" for v in card.verdicts]
    if card.reruns:
        lines += ["", f"where a rerun on the same questions would read ({boot.level:.0%} "
                      "prediction intervals;", "the two-level CIs above sit higher and are not "
                      "these):"]
        for name, intervals in card.reruns.items():
            sa, aa = intervals["sa_ppg"], intervals["a_ppg"]
            lines.append(f"  {name}: SA-PPG [{sa.low:.4f}, {sa.high:.4f}], "
                         f"A-PPG [{aa.low:.4f}, {aa.high:.4f}]")
    if card.comparisons:
        lines += ["", f"paired differences against the best strategy by SA-PPG ({card.best}):"]
        for c in card.comparisons:
            p = "p < 0.001" if c.p_value < 0.001 else f"p = {c.p_value:.3f}"
            lines.append(
                f"  {METRIC_LABELS[c.metric]:>6}  {c.a} - {c.b}: {c.difference:+.4f} "
                f"[{c.low:+.4f}, {c.high:+.4f}], {p}"
            )
    return "\n".join(lines)
