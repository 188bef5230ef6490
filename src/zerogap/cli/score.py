"""``zerogap score``: restoration metrics of one or more strategies against a clean run.

Reads per-question outcome files (:mod:`zerogap.io.counts`) or run directories, prints one
table with intervals, the finite-sample noise floor, a restoration verdict per strategy and
paired tests against the best strategy, and optionally writes everything as JSON with each
input's provenance.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace

import numpy as np

from zerogap.analysis.score import Scorecard, ScoreSettings, load_input, score
from zerogap.cli.flags import (
    add_grading,
    add_json,
    add_scoring_options,
    described_argument,
    field_help,
    scoring_changes,
)
from zerogap.cli.output import STDOUT, emit_json, json_destination, truncation_warning
from zerogap.config import parse_pairs
from zerogap.metrics import METRIC_LABELS, METRIC_NAMES
from zerogap.tasks.extract import check_mode

DESCRIPTION = """Score mitigation strategies against a clean model: each strategy's per-question
outcomes on the contaminated model against the clean model's, as SA-PPG and its family with
intervals, the finite-sample noise floor, a restoration verdict per strategy and paired tests
against the best one. Reads counts files, run directories and lm-eval sample logs; loads no
model."""

def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score",
        help="score mitigation strategies against a clean run (SA-PPG and family, with CIs)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  zerogap score --clean clean.jsonl --mitigated railcap=rc.jsonl "
        "--mitigated identity=id.jsonl --json scores.json",
    )
    from zerogap.study.spec import SettingSpec

    described_argument(p, "--clean", required=True, metavar="FILE|RUN_DIR",
                       meaning=field_help(SettingSpec, "clean"),
                       values="its per-question outcomes, as a counts file, a run directory or an "
                              "lm-eval samples log")
    p.add_argument(
        "--mitigated",
        required=True,
        action="append",
        metavar="NAME=FILE|RUN_DIR",
        help="a strategy's per-question outcomes on the contaminated model (repeatable)",
    )
    add_scoring_options(p)
    add_json(p)
    add_grading(p)
    p.set_defaults(func=run)


def _fmt_m(samples: np.ndarray) -> str:
    lo, hi = int(samples.min()), int(samples.max())
    return f"m = {lo}" if lo == hi else f"m = {lo}..{hi}"


def run(args) -> int:
    settings = replace(ScoreSettings(), **scoring_changes(args))
    pairs = parse_pairs("--mitigated", args.mitigated, what="NAME=FILE")
    out = None if args.json is None else json_destination(args.json, "--json",
                                                          inputs=[args.clean, *pairs.values()])
    check_mode(args.grading)
    clean = load_input("clean", args.clean, lmeval_grading=args.grading)
    mitigated = [load_input(name, path, lmeval_grading=args.grading)
                 for name, path in pairs.items()]
    card = score(clean, mitigated, settings)
    print(render_table(card), file=sys.stderr if out == STDOUT else sys.stdout)
    if out is not None:
        emit_json(out, card.to_dict())
    return 0


INTERVAL_MEANING = (
    "intervals: where each metric's expectation lies for these questions over new samples of "
    "both models at the same m (sampling noise only; the questions are taken as given); "
)
PAIRED_MEANING = {
    "sharp": "paired tests: exact when the two strategies are equal in distribution question "
             "by question, for these questions or a new draw of them",
    "mean": "paired tests: of the mean difference over new questions and new samples (the "
            "strategies equal on average), calibrated by simulation (docs/uncertainty.md)",
}


def _cell(ci) -> str:
    return "too few q." if ci.reason else f"[{ci.low:.3f},{ci.high:.3f}]"


def truncation_lines(truncation: dict[str, tuple[int, int]]) -> list[str]:
    """The responses cut at the token limit, per input that records them, and a warning for
    any input where most were: such a run's answers are graded on what fits the limit."""
    if not truncation:
        return []
    parts = [f"{name} {cut} of {total} ({cut / total:.0%})"
             for name, (cut, total) in truncation.items()]
    lines = ["", f"responses cut at the token limit: {', '.join(parts)}"]
    lines += [f"warning: {name}: {truncation_warning(cut, total)}"
              for name, (cut, total) in truncation.items() if cut * 2 > total]
    return lines


def render_comparison(c) -> str:
    """One paired test as a line: difference, interval and p-value (or why there is none)."""
    head = f"{METRIC_LABELS[c.metric]:>6}  {c.a} - {c.b}: {c.difference:+.4f}"
    if c.reason is not None:
        return f"{head}, no test: {c.reason}"
    p = "p < 0.001" if c.p_value < 0.001 else f"p = {c.p_value:.3f}"
    df = f", {c.df:.1f} df" if math.isfinite(c.df) else ""
    return f"{head} [{c.low:+.4f}, {c.high:+.4f}], {p}{df}"


def render_table(card: Scorecard) -> str:
    """The scorecard as the text table ``zerogap score`` prints."""
    gaps, floor = card.gaps, card.floor
    clean = card.clean.counts
    est0 = gaps.estimates[0]
    width = max(10, *(len(n) for n in gaps.names)) + 2
    default_b = f", the default for N = {est0.n_questions}" if card.settings.bins is None else ""
    lines = [
        f"{est0.n_questions} questions, clean {_fmt_m(clean.samples)}, "
        f"B = {est0.bins} strata ({len(est0.strata_used)} non-empty{default_b}), "
        f"{gaps.level:.0%} intervals",
        "",
        "strategy".ljust(width) + "".join(f"{METRIC_LABELS[m]:>14}" for m in METRIC_NAMES),
    ]
    for name, est, run in zip(gaps.names, gaps.estimates, card.runs, strict=True):
        lines.append(name.ljust(width) + "".join(f"{getattr(est, m):>14.4f}" for m in METRIC_NAMES))
        cells = [_cell(gaps.interval(name, m)).rjust(14) for m in METRIC_NAMES]
        lines.append(f"  {_fmt_m(run.counts.samples)}".ljust(width) + "".join(cells))
    reason = gaps.interval(gaps.names[0], "sa_ppg").reason
    if reason is not None:
        lines += ["", f"note: no intervals: {reason}"]
    lines += truncation_lines(card.truncation())
    lines += [
        "",
        "Δ+ under-suppression (inflation left in place), Δ- over-suppression (collateral damage);",
        f"A-PPG = Δ+ + Δ-, G-APP = |Δ+ - Δ-|, SA-PPG = S-Δ+ + S-Δ-. G-AP uses {card.draw_note}.",
        "",
        f"noise floor (a second batch of the clean model against this one"
        f"{'' if floor.samples is None else f', with m = {floor.samples}'}, "
        f"{floor.prior} prior): SA-PPG {floor.sa_ppg:.4f} (95th pct {floor.sa_ppg_upper:.4f}), "
        f"A-PPG {floor.a_ppg:.4f} (95th pct {floor.a_ppg_upper:.4f})",
        "",
        f"restoration verdicts (equivalence test of SA-PPG's excess over the floor, margin "
        f"{card.settings.margin}):",
    ]
    lines += [f"  {v.name}: {v.sentence()}" for v in card.verdicts]
    if card.comparisons:
        lines += ["", f"paired tests against the best strategy by SA-PPG ({card.best}; "
                      f"{card.comparisons[0].method}):"]
        lines += [f"  {render_comparison(c)}" for c in card.comparisons]
    lines += ["", INTERVAL_MEANING + PAIRED_MEANING[card.settings.paired_null] + "."]
    return "\n".join(lines)
