"""The study report: one self-contained HTML page and a Markdown summary, from a study folder.

A study folder (written by :mod:`zerogap.study.run`) holds ``study.json`` (what was
run: settings, models and fingerprints, run directories, counts files, the commands to
reproduce) and the per-question counts of every run. :func:`write_report` scores each setting
into one :class:`~zerogap.analysis.score.Scorecard` (:func:`score_setting`), writes the tables
(Markdown, CSV, JSON) under ``tables/``, the figures (PNG, SVG) under ``figures/``, then
``report.html`` (jinja2; figures embedded as data URIs, so the page needs no network and no
neighbouring files) and ``report.md``. It reads run stores through :mod:`zerogap.store`
(SQLite) only: no torch.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from zerogap import __version__
from zerogap.analysis import figures as figs
from zerogap.analysis.allocation import AllocationPlan, plan_shifts, read_allocation
from zerogap.analysis.baselines import BlockingReadout, FilterReadout, setting_readouts
from zerogap.analysis.design import Criterion, read_design
from zerogap.analysis.findings import (
    PAPER_SA_PPG,
    AnswerSlot,
    Finding,
    answer_slot,
    findings,
    missing_regime,
)
from zerogap.analysis.folder import STUDY_FILE, STUDY_FORMAT, read_study_folder, study_scoring
from zerogap.analysis.score import (
    REPEAT,
    Scorecard,
    ScoreSettings,
    all_zero,
    load_input,
    score,
)
from zerogap.analysis.sensitivity import sensitivity_table
from zerogap.analysis.tables import Table, study_tables, verdict_table
from zerogap.io.files import check_output, check_output_folder, slug, write_text
from zerogap.store import RunStore

__all__ = ["STUDY_FILE", "STUDY_FORMAT", "Report", "read_study_folder", "study_scoring",
           "summary_table", "write_report"]

VERDICT_MEANING = (
    "Each verdict is an equivalence test against the clean model's own batch-to-batch noise "
    "floor (the SA-PPG two independent batches of the clean model read, simulated from the "
    "empirical-Bayes spread of its solve probabilities; the 'clean, 2nd batch' row is the "
    "measured one). The excess SA-PPG - floor gets one-sided bounds at the stated level from "
    "SA-PPG's standard error over new samples of these questions. Restored: the upper bound "
    "lies below the margin. Not restored: the lower bound lies above it. Otherwise "
    "inconclusive, with the number of questions (or samples per question) that would decide "
    "it. A strategy sampled with fewer responses per question (TED keeps only some) is "
    "compared with a floor simulated at its own m, which is higher. Intervals in the tables: "
    "where each metric's expectation lies for these questions over new samples of both "
    "models; below 12 questions none is stated."
)


# Whose reference solutions T_task and tau were scaled by, by study.json's
# ``solution_lengths`` (zerogap.study.settings records it; absent in older folders).
SOLUTION_LENGTHS = {"calibration": " of the calibration questions",
                    "evaluated": " of the evaluated questions: the study had no calibration "
                                 "split"}

# Where the shortcut neurons' calibration questions came from, by the neuron file's
# ``calibration_disjoint`` (zerogap.study.calibration chooses).
CALIBRATION_CHOICE = {True: "disjoint from the evaluated questions",
                      False: "the evaluated questions (in sample)"}

# What a setting written before study.json recorded its ``references`` (zerogap.study.run)
# meant by its labels: identity sampled the contaminated model as it is, all-zero read 0.
RECORDED_BEFORE_REFERENCES = {"unmitigated": "identity", "reads_zero": ["all-zero"]}


def reference_labels(entry: dict) -> dict:
    """A setting's reference labels: ``unmitigated``, the strategy that samples the
    contaminated model as it is (Figure 1's samples), and ``reads_zero``, the labels whose
    readout is 0 for every question (All-Zero, which the report adds when none ran)."""
    return entry.get("references") or RECORDED_BEFORE_REFERENCES


@dataclass(frozen=True)
class SettingChecks:
    """A setting's design criteria (empty when the study did not measure them), the paper's
    findings F1-F3 (:mod:`zerogap.analysis.findings`) and its controls: the strategies applied
    to the clean model, scored against the clean model (None when it ran none), with RailCap's
    collateral damage split between its answer slot and its reasoning steps when both RailCap
    and its answer-protecting variant ran there."""

    design: tuple[Criterion, ...]
    findings: tuple[Finding, ...]
    controls: Scorecard | None
    baselines: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)  # each job's own time, whenever it ran
    wall: float | None = None  # the jobs' wall time (side by side: less than their sum)
    answer_slot: AnswerSlot | None = None
    allocation: tuple[str, ...] = ()  # an allocated study's plan and samples, as lines
    # What TED kept and LNE-blocking blocked, per question group (analysis.baselines)
    readouts: tuple[FilterReadout | BlockingReadout, ...] = ()

    @property
    def premise(self) -> str:
        """The first screen's plain statement that the paper's regime is missing, from the
        design criteria (:func:`~zerogap.analysis.findings.missing_regime`); ``""`` if not."""
        return missing_regime(self.design)

    def baseline_lines(self) -> list[str]:
        """Plain-text lines: the baselines' settings at this scale and what they did (TED's
        kept samples, LNE-blocking's blocking counts; docs/baselines.md)."""
        out = []
        lengths = SOLUTION_LENGTHS.get(str(self.baselines.get("solution_lengths")), "")
        if self.baselines.get("lne_t_task") is not None:
            out.append(f"LNE-blocking: T_task {self.baselines['lne_t_task']} for this task "
                       f"(GSM8K's 7 scaled by the mean reference-solution length{lengths})")
        if self.baselines.get("lne_beta") is not None:
            quantile = self.baselines.get("lne_beta_quantile", 1)  # older folders: the largest
            read = {1: "the largest", 0.5: "the median"}.get(
                quantile, f"the {quantile:g} quantile of the")
            out.append(f"LNE-blocking: beta {self.baselines['lne_beta']:.3g}, {read} LNE "
                       "of the model's greedy decodes on the "
                       f"{self.baselines.get('calibration_questions')} calibration questions "
                       "(disjoint from the evaluated questions; the largest, the median and the "
                       "published 2 are ablation rows)")
        tau = self.baselines.get("ted_scaled_tau")
        if tau is not None:
            out.append(f"ted-scaled: tau {tau} for this task (the code's 2 edits scaled by "
                       f"the mean reference-solution length{lengths})"
                       + ("; at 0 it drops only samples that open with the greedy output and "
                          "duplicates" if tau == 0 else ""))
        cut = self.baselines.get("shortcut")
        if cut:
            # Whether the neurons were chosen on the questions they are then evaluated on.
            chosen = CALIBRATION_CHOICE.get(cut.get("calibration_disjoint"))
            chosen = f": {chosen}" if chosen else ""
            out.append(f"shortcut neurons: blocks of {cut.get('block_size')}, "
                       f"{cut.get('blocks_scored')} of {cut.get('blocks_total')} scored causally "
                       f"on {cut.get('calibration')} questions ({cut.get('calibration_leaked')} "
                       f"leaked){chosen}")
        out += [r.sentence() for r in self.readouts]
        return out

    def lines(self) -> list[str]:
        """Plain-text lines: the allocation, baselines' settings and what they did, criteria,
        findings, controls."""
        out = [*self.allocation, *self.baseline_lines()]
        if self.design:
            met = sum(c.met for c in self.design)
            out.append(f"design checks ({met} of {len(self.design)} met, measured on the two "
                       "models before any strategy sampled):")
            out += [f"  {c.sentence()}" for c in self.design]
        if self.seconds:
            total = sum(self.seconds.values())
            wall = "" if self.wall is None else f"{self.wall:.0f} s wall time, "
            line = f"time: {wall}{total:.0f} s summed over the jobs"
            located = [v for k, v in self.seconds.items() if "neurons" in k]
            if located:
                line += (f", shortcut-neuron location {sum(located):.0f} s "
                         f"({sum(located) / max(total, 1e-9):.0%} of the jobs' time)")
            out.append(line)
        out.append("findings (one-sided paired tests of the mean difference, alpha 0.05), each "
                   "with its rule:")
        for f in self.findings:
            out.append(f"  {f.sentence()}")
            if f.rule:
                out.append(f"    rule: {f.rule}")
        if self.controls is not None:
            out.append("controls on the clean model (collateral damage alone; ~0 is none):")
            for name in self.controls.strategies:
                ci = self.controls.interval(name, "sa_ppg")
                out.append(f"  {name}: SA-PPG {ci.estimate:.4f} {ci.bounds()}")
        if self.answer_slot is not None:
            out.append(f"answer slot: {self.answer_slot.sentence()}")
        return out


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote and the numbers a command prints."""

    html: Path
    markdown: Path
    tables: list[Table]
    scores: dict[str, Scorecard]
    verdicts_markdown: str
    figures: list[Path]
    checks: dict[str, SettingChecks] = field(default_factory=dict)


def check_report_destinations(folder: Path) -> None:
    """Everything the report writes can be written (folders are folders, files are files, the
    folder is writable), checked before any scoring: a read-only or damaged folder is one line,
    not a traceback halfway through the tables."""
    check_output_folder(folder, "study folder")
    for sub in ("tables", "figures"):
        check_output_folder(folder / sub, "study folder")
    for name in ("report.html", "report.md"):
        check_output(folder / name, "study folder")


def score_setting(folder: Path, entry: dict, scoring: ScoreSettings) -> Scorecard:
    """Score one setting of a study folder from its counts files.

    Its strategies (All-Zero added when the study did not run it) against its clean run, the
    clean model's second batch as the :data:`~zerogap.analysis.score.REPEAT` reference row, and
    the leaked and unleaked questions as sub-cards when the setting has a split.
    """
    counts = entry["counts"]
    clean = load_input("clean", folder / counts["clean"])
    runs = [load_input(label, folder / path) for label, path in counts["strategies"].items()]
    if not set(reference_labels(entry)["reads_zero"]) & set(counts["strategies"]):
        runs.append(all_zero(clean))
    references = [load_input(REPEAT, folder / counts["repeat"])] if counts.get("repeat") else []
    leaked = entry.get("leaked")
    plan = _plan(folder, entry)
    return score(clean, runs, scoring, references=references,
                 leaked=None if leaked is None else frozenset(leaked),
                 floor_samples=None if plan is None else plan.samples)


def _plan(folder: Path, entry: dict) -> AllocationPlan | None:
    """An allocated setting's plan (:mod:`zerogap.analysis.allocation`), None for a uniform
    one."""
    allocation = entry.get("allocation")
    return None if not allocation else read_allocation(folder / allocation["plan"])


def setting_checks(folder: Path, entry: dict, card: Scorecard,
                   scoring: ScoreSettings) -> SettingChecks:
    """The design criteria a study recorded for ``entry``, the findings on ``card`` (its
    strategies, All-Zero included, and its second clean batch) and the controls' scorecard."""
    design = tuple(read_design(folder / entry["design"])) if entry.get("design") else ()
    repeat = card.reference(REPEAT)
    found = findings(card.clean.counts, {r.name: r.counts for r in card.runs},
                     None if repeat is None else repeat.counts, bins=card.bins,
                     n_resamples=max(scoring.resamples, 1), seed=scoring.seed,
                     criteria={c.key: c.met for c in design} if design else None)
    controls = entry.get("counts", {}).get("controls") or {}
    plan = _plan(folder, entry)
    card_controls = None
    if controls:
        card_controls = score(card.clean, [load_input(label, folder / path)
                                           for label, path in controls.items()],
                              replace(scoring, bins=card.bins),
                              floor_samples=None if plan is None else plan.samples)
    return SettingChecks(design, tuple(found), card_controls, entry.get("baselines") or {},
                         entry.get("seconds") or {}, entry.get("wall_seconds"),
                         None if card_controls is None else answer_slot(card_controls.gaps),
                         () if plan is None else tuple(plan.lines(
                             entry["allocation"]["drawn"],
                             entry["allocation"].get("shift")
                             or plan_shifts(plan, card.clean.counts,
                                            {r.name: r.counts for r in card.runs},
                                            card.bins, scoring.level))),
                         setting_readouts(folder, entry, None if plan is None else plan.samples))


def _rouge(folder: Path, entry: dict, ids: Sequence[str]) -> dict[str, list[float]]:
    """ROUGE-L of every identity sample against its question's greedy decode (Figure 1 a, c)."""
    runs = entry.get("figure_runs", {})
    unmitigated = reference_labels(entry)["unmitigated"]
    if unmitigated not in runs or "greedy" not in runs:
        return {}
    wanted = set(ids)
    with RunStore(folder / runs["greedy"], create=False) as store:
        greedy = {q: g.text for q, g in store.greedy().items() if q in wanted}
    out: dict[str, list[float]] = {}
    with RunStore(folder / runs[unmitigated], create=False) as store:
        for row in store.samples():
            if row.question_id in greedy:
                out.setdefault(row.question_id, []).append(
                    figs.rouge_l(row.text, greedy[row.question_id]))
    return out


def _figures(folder: Path, entry: dict, ranks: dict[str, list[int]], card: Scorecard):
    """Draw and save a setting's figures; yields (title, caption, paths)."""
    out = folder / "figures"
    name = entry["name"]
    prefix = slug(name)
    leaked = frozenset(entry.get("leaked") or ())
    rouge = _rouge(folder, entry, card.clean.counts.ids)
    if rouge or ranks:
        yield ("Figure 1 (" + name + ")",
               "(a, c) ROUGE-L between each sample of the contaminated model (identity) and its "
               "question's greedy decode, leaked vs unleaked: faint dots are samples, solid dots "
               "per-question means. (b, d) The contaminated model teacher-forced on the clean "
               "model's greedy decode: rank of the clean model's token over the first ten "
               "decoding steps, at the steps where the two models disagree.",
               figs.save(figs.figure1(rouge, ranks, leaked), out, f"{prefix}-figure1"))
    repeat = card.reference(REPEAT)
    c = card.clean.counts
    if repeat is not None and c.first is not None and repeat.counts.first is not None:
        r = repeat.counts
        fig = figs.figure2(c.first, r.first, c.correct / c.samples, r.correct / r.samples,
                           m=card.clean_m, seed=card.settings.seed)
        yield ("Figure 2 (" + name + ")",
               "Two independent sampling batches of the clean model. Left: one sampled "
               "response per question (m = 1, small vertical jitter). Right: the solve "
               "probability from m samples. Questions sorted by the first batch; the title "
               "gives each readout's mean per-question gap (the paper: 0.190 vs 0.041).",
               figs.save(fig, out, f"{prefix}-figure2"))
    fig = figs.stratum_figure({s: card.estimate(s) for s in card.strategies})
    yield ("Per-stratum gaps (" + name + ")",
           "For each strategy, the mean under-suppression Δ+ (up) and over-suppression Δ- "
           "(down) inside each stratum of the clean solve probability; SA-PPG is the mean of "
           "their sum over the non-empty strata.",
           figs.save(fig, out, f"{prefix}-strata"))


def _headline(folder: Path, name: str, card: Scorecard, checks: SettingChecks):
    """The setting's headline figure (:func:`~zerogap.analysis.figures.headline_figure`):
    (title, caption, paths)."""
    def bounds(scorecard: Scorecard, strategy: str) -> tuple[float, float, float]:
        ci = scorecard.interval(strategy, "sa_ppg")
        return ci.estimate, ci.low, ci.high

    controls = {} if checks.controls is None else {
        s: bounds(checks.controls, s) for s in checks.controls.strategies}
    fig = figs.headline_figure({s: bounds(card, s) for s in card.strategies}, card.floor.sa_ppg,
                               controls, PAPER_SA_PPG)
    # The caption names only the marks drawn: squares where controls ran, crosses where the
    # paper reports one of the strategies.
    caption = ("Dots: each strategy on the contaminated model, with its 95% interval over new "
               "samples of these questions. "
               + ("Squares: the same strategy on the clean model (collateral damage alone). "
                  if controls else "")
               + "Grey band: the noise floor, what two batches of the clean model read."
               + (" Crosses: the paper's values for Llama-2 on GSM8K, for orientation only "
                  "(another model, task and size)." if set(card.strategies) & set(PAPER_SA_PPG)
                  else ""))
    return (f"SA-PPG per strategy ({name})", caption,
            figs.save(fig, folder / "figures", f"{slug(name)}-headline"))


def _write_text(path: Path, text: str) -> None:
    """All or nothing (:func:`~zerogap.io.files.write_text`): a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)


def _ran_by(study: dict) -> str | None:
    """What ran the study's jobs, as its record says (a study recorded before executors were
    named ran them on local threads), or None where it says nothing."""
    if study.get("workers") is None:
        return None
    return f"jobs run by the {study.get('executor') or 'local'} executor, " \
        f"{study['workers']} at a time"


def _memory_line(memory: dict) -> str:
    """The memory budget the study ran under and the peak it measured (``study.json``)."""
    def gib(size: int) -> str:
        return f"{size / (1 << 30):.1f} GiB"

    return (f"memory budget {gib(memory['budget_bytes'])} ({memory['source']}); peak resident "
            f"memory {gib(memory['peak_resident_bytes'])}")


def _markdown(study, entries, tables, verdicts_md, figures, folder, checks, headlines) -> str:
    lines = [f"# Restoration study: {study.get('title') or folder.name}", ""]
    for e in entries:
        lines.append(f"- **{e['name']}**: task {e['task']} ({e['split']}), {e['questions']} "
                     f"questions; clean `{e['clean']['spec']}` ({e['clean']['fingerprint']}), "
                     f"contaminated `{e['contaminated']['spec']}` "
                     f"({e['contaminated']['fingerprint']})")
    if study.get("dtype"):
        lines.append(f"- sampled with the weights in {study['dtype']}")
    if _ran_by(study):
        lines.append(f"- {_ran_by(study)}")
    if study.get("memory"):
        lines.append(f"- {_memory_line(study['memory'])}")
    lines += ["", "## At a glance", ""]
    for (title, path), c in zip(headlines, checks.values(), strict=True):
        lines += [f"![{title}]({path.relative_to(folder)})", ""]
        lines += [f"**{c.premise}**", ""] if c.premise else []
        lines += [f"- {f.key} {f.outcome}: {f.claim}" + (
            f" (not met: {', '.join(f.failed)})" if f.failed else "") for f in c.findings] + [""]
    lines += ["## Design checks, findings and controls", ""]
    for name, c in checks.items():
        lines += [f"**{name}**", "", "```", *c.lines(), "```", ""]
    lines += ["## Verdicts", "", VERDICT_MEANING, "", verdicts_md, "## Tables", ""]
    lines += [t.to_markdown() for t in tables]
    lines += ["## Figures", ""]
    lines += [f"![{title}]({path.relative_to(folder)})" for title, path in figures]
    lines += ["", "## Reproduce", "", "```bash", *(study.get("commands") or []), "```", ""]
    return "\n".join(lines)


def write_report(folder: str | os.PathLike, scoring: ScoreSettings | None = None) -> Report:
    """Score a study folder and write its tables, figures, ``report.html`` and ``report.md``.

    ``scoring`` defaults to the settings recorded in ``study.json``.
    """
    import jinja2

    folder = Path(folder)
    checked = read_study_folder(folder)
    check_report_destinations(folder)
    scoring = scoring or study_scoring(checked.record, folder / STUDY_FILE)
    study, entries = checked.record, checked.settings
    scores = {e["name"]: score_setting(folder, e, scoring) for e in entries}
    first_name, first_card = next(iter(scores.items()))
    tables = [*study_tables(scores), sensitivity_table(first_name, first_card)]
    for table in tables:
        base = folder / "tables" / table.key
        _write_text(base.with_suffix(".md"), table.to_markdown())
        _write_text(base.with_suffix(".csv"), table.to_csv())
        _write_text(base.with_suffix(".json"), json.dumps(table.to_dict(), indent=2) + "\n")
    drawn = [(title, caption, paths) for e in entries
             for title, caption, paths in _figures(folder, e, checked.ranks[e["name"]],
                                                   scores[e["name"]])]
    checks = {e["name"]: setting_checks(folder, e, scores[e["name"]], scoring) for e in entries}
    headlines = [_headline(folder, name, scores[name], checks[name]) for name in scores]
    write_text(folder / "tables" / "findings.json", json.dumps(
        {name: [f.to_dict() for f in c.findings] for name, c in checks.items()},
        indent=2) + "\n")
    verdicts_md = verdict_table(scores)
    _write_text(folder / "tables" / "verdicts.md", verdicts_md)
    _write_text(folder / "tables" / "verdicts.json", json.dumps(
        {name: [v.to_dict() for v in card.verdicts] for name, card in scores.items()},
        indent=2) + "\n")

    env = jinja2.Environment(loader=jinja2.PackageLoader("zerogap.analysis", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template("report.html.j2").render(
        # The optional keys may be null (the folder check accepts that): their defaults then.
        title=study.get("title") or folder.name, version=__version__, config=study["config"],
        scoring=scoring, bins=next(iter(scores.values())).bins,
        verdict_meaning=VERDICT_MEANING, tables=tables,
        settings=[{**e, "leaked_count": None if e.get("leaked") is None else len(e["leaked"])}
                  for e in entries],
        verdicts=[{"setting": name, "v": v} for name, card in scores.items()
                  for v in card.verdicts],
        figures=[{"title": t, "caption": cap,
                  "png": base64.b64encode(p["png"].read_bytes()).decode("ascii")}
                 for t, cap, p in drawn],
        commands=study.get("commands") or [], versions=study.get("versions") or {},
        dtype=study.get("dtype"), ran_by=_ran_by(study),
        checks=checks,
        headlines=[{"title": t, "caption": cap,
                    "png": base64.b64encode(p["png"].read_bytes()).decode("ascii")}
                   for t, cap, p in headlines],
    )
    _write_text(folder / "report.html", html)
    md = _markdown(study, entries, tables, verdicts_md, [(t, p["png"]) for t, _, p in drawn],
                   folder, checks, [(t, p["png"]) for t, _, p in headlines])
    _write_text(folder / "report.md", md)
    return Report(folder / "report.html", folder / "report.md", tables, scores, verdicts_md,
                  [p[k] for _, _, p in [*headlines, *drawn] for k in ("png", "svg")], checks)


def summary_table(report: Report) -> str:
    """Plain-text SA-PPG table with verdicts, for a terminal."""
    lines = []
    for name, card in report.scores.items():
        lines.append(f"{name}: {card.n_questions} questions, clean m = {card.clean_m}, "
                     f"noise floor SA-PPG {card.floor.sa_ppg:.4f}")
        if name in report.checks and report.checks[name].premise:
            lines.append(f"  {report.checks[name].premise}")
        width = max(len(n) for n in card.strategies) + 2
        for v in card.verdicts:
            ci = card.interval(v.name, "sa_ppg")
            lines.append(f"  {v.name.ljust(width)} SA-PPG {ci.estimate:.4f} {ci.bounds()}  "
                         f"{v.outcome}")
        if name in report.checks:
            lines += [f"  {line}" for line in report.checks[name].lines()]
    return "\n".join(lines)
