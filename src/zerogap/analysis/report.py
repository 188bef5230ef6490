"""The study report: one self-contained HTML page and a Markdown summary, from a study folder.

A study folder (written by :mod:`zerogap.analysis.evaluate`) holds ``study.json`` (what was
run: settings, models and fingerprints, run directories, counts files, the commands to
reproduce) and the per-question counts of every run. :func:`write_report` scores it
(:mod:`zerogap.analysis.scores`), writes the tables (Markdown, CSV, JSON) under ``tables/``, the
figures (PNG, SVG) under ``figures/``, then ``report.html`` (jinja2; figures embedded as data
URIs, so the page needs no network and no neighbouring files) and ``report.md``. It reads run
stores through :mod:`zerogap.store` (SQLite) only: no torch.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zerogap import __version__
from zerogap.analysis import figures as figs
from zerogap.analysis.scores import ScoreSettings, SettingCounts, SettingScores, score_setting
from zerogap.analysis.tables import Table, study_tables, verdict_table
from zerogap.errors import DataError
from zerogap.io.counts import read_counts
from zerogap.io.jsonlines import read_json_object
from zerogap.store import RunStore

STUDY_FILE = "study.json"
STUDY_FORMAT = "zerogap-study"

VERDICT_MEANING = (
    "Each verdict is an equivalence test against the clean model's own batch-to-batch noise "
    "floor (the SA-PPG two independent batches of the clean model read, simulated from its "
    "counts). The excess SA-PPG - floor gets one-sided bounds at the stated level from a "
    "two-level bootstrap (questions, then samples). Restored: the upper bound lies below the "
    "margin. Not restored: the lower bound lies above it. Otherwise inconclusive, with the "
    "number of questions (or samples per question) that would decide it."
)


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote and the numbers a command prints."""

    html: Path
    markdown: Path
    tables: list[Table]
    scores: list[SettingScores]
    verdicts_markdown: str
    figures: list[Path]


def read_study(folder: Path) -> dict:
    """``study.json`` of a study folder; ``ValueError``/``FileNotFoundError`` naming the file."""
    path = Path(folder) / STUDY_FILE
    study = read_json_object(path, f"file (is {folder} a zerogap evaluate folder?)")
    if study.get("format") != STUDY_FORMAT:
        raise DataError(f"{path}: not a zerogap study file (format {STUDY_FORMAT!r} expected)")
    return study


def setting_counts(folder: Path, entry: dict) -> SettingCounts:
    """Read one setting's counts files, aligned to its clean run."""
    counts = entry["counts"]
    clean = read_counts(folder / counts["clean"])
    strategies = {label: read_counts(folder / path).aligned_to(clean)
                  for label, path in counts["strategies"].items()}
    repeat = read_counts(folder / counts["repeat"]).aligned_to(clean) if counts.get("repeat") \
        else None
    leaked = entry.get("leaked")
    return SettingCounts(entry["name"], clean, strategies, repeat,
                         None if leaked is None else frozenset(leaked))


def _rouge(folder: Path, entry: dict, ids: Sequence[str]) -> dict[str, list[float]]:
    """ROUGE-L of every identity sample against its question's greedy decode (Figure 1 a, c)."""
    runs = entry.get("figure_runs", {})
    if "identity" not in runs or "greedy" not in runs:
        return {}
    wanted = set(ids)
    with RunStore(folder / runs["greedy"], create=False) as store:
        greedy = {q: g.text for q, g in store.greedy().items() if q in wanted}
    out: dict[str, list[float]] = {}
    with RunStore(folder / runs["identity"], create=False) as store:
        for row in store.samples():
            if row.question_id in greedy:
                out.setdefault(row.question_id, []).append(
                    figs.rouge_l(row.text, greedy[row.question_id]))
    return out


def _figures(folder: Path, entry: dict, setting: SettingCounts, scores: SettingScores):
    """Draw and save a setting's figures; yields (title, caption, paths)."""
    out = folder / "figures"
    prefix = slug(setting.name)
    leaked = setting.leaked or frozenset()
    rouge = _rouge(folder, entry, setting.clean.ids)
    ranks_file = entry.get("ranks")
    ranks = json.loads((folder / ranks_file).read_text())["ranks"] if ranks_file else {}
    if rouge or ranks:
        yield ("Figure 1 (" + setting.name + ")",
               "(a, c) ROUGE-L between each sample of the contaminated model (identity) and its "
               "question's greedy decode, leaked vs unleaked: faint dots are samples, solid dots "
               "per-question means. (b, d) The contaminated model teacher-forced on the clean "
               "model's greedy decode: rank of the clean model's token over the first ten "
               "decoding steps, at the steps where the two models disagree.",
               figs.save(figs.figure1(rouge, ranks, leaked), out, f"{prefix}-figure1"))
    if setting.repeat is not None and setting.clean.first is not None \
            and setting.repeat.first is not None:
        c, r = setting.clean, setting.repeat
        fig = figs.figure2(c.first, r.first, c.correct / c.samples, r.correct / r.samples,
                           m=scores.clean_m, seed=scores.settings.seed)
        yield ("Figure 2 (" + setting.name + ")",
               "Two independent sampling batches of the clean model. Left: one sampled "
               "response per question (m = 1, small vertical jitter). Right: the solve "
               "probability from m samples. Questions sorted by the first batch; the title "
               "gives each readout's mean per-question gap (the paper: 0.190 vs 0.041).",
               figs.save(fig, out, f"{prefix}-figure2"))
    r_clean = setting.clean.correct / setting.clean.samples
    mitigated = {name: c.correct / c.samples for name, c in setting.with_all_zero()
                 .strategies.items()}
    fig = figs.stratum_figure(r_clean, mitigated, bins=scores.settings.bins)
    yield ("Per-stratum gaps (" + setting.name + ")",
           "For each strategy, the mean under-suppression Δ+ (up) and over-suppression Δ- "
           "(down) inside each stratum of the clean solve probability; SA-PPG is the mean of "
           "their sum over the non-empty strata.",
           figs.save(fig, out, f"{prefix}-strata"))


def slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name) or "setting"


def _write_text(path: Path, text: str) -> None:
    """Write beside the destination and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _markdown(study, entries, tables, verdicts_md, figures, folder) -> str:
    lines = [f"# Restoration study: {study.get('title', folder.name)}", ""]
    for e in entries:
        lines.append(f"- **{e['name']}**: task {e['task']} ({e['split']}), {e['questions']} "
                     f"questions; clean `{e['clean']['spec']}` ({e['clean']['fingerprint']}), "
                     f"contaminated `{e['contaminated']['spec']}` "
                     f"({e['contaminated']['fingerprint']})")
    lines += ["", "## Verdicts", "", VERDICT_MEANING, "", verdicts_md, "## Tables", ""]
    lines += [t.to_markdown() for t in tables]
    lines += ["## Figures", ""]
    lines += [f"![{title}]({path.relative_to(folder)})" for title, path in figures]
    lines += ["", "## Reproduce", "", "```bash", *study.get("commands", []), "```", ""]
    return "\n".join(lines)


def write_report(folder: str | os.PathLike, scoring: ScoreSettings | None = None) -> Report:
    """Score a study folder and write its tables, figures, ``report.html`` and ``report.md``.

    ``scoring`` defaults to the settings recorded in ``study.json``.
    """
    import jinja2

    folder = Path(folder)
    study = read_study(folder)
    scoring = scoring or ScoreSettings(**study.get("scoring", {}))
    entries = study["settings"]
    counts = [setting_counts(folder, e) for e in entries]
    scores = [score_setting(c, scoring) for c in counts]
    tables = study_tables(scores)
    for table in tables:
        base = folder / "tables" / table.key
        _write_text(base.with_suffix(".md"), table.to_markdown())
        _write_text(base.with_suffix(".csv"), table.to_csv())
        _write_text(base.with_suffix(".json"), json.dumps(table.to_dict(), indent=2) + "\n")
    drawn = [(title, caption, paths) for e, c, s in zip(entries, counts, scores, strict=True)
             for title, caption, paths in _figures(folder, e, c, s)]
    verdicts_md = verdict_table(scores)
    _write_text(folder / "tables" / "verdicts.md", verdicts_md)
    _write_text(folder / "tables" / "verdicts.json", json.dumps(
        {s.name: [v.to_dict() for v in s.verdicts] for s in scores}, indent=2) + "\n")

    env = jinja2.Environment(loader=jinja2.PackageLoader("zerogap.analysis", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template("report.html.j2").render(
        title=study.get("title", folder.name), version=__version__, config=study["config"],
        scoring=scoring, verdict_meaning=VERDICT_MEANING, tables=tables,
        settings=[{**e, "leaked_count": None if e.get("leaked") is None else len(e["leaked"])}
                  for e in entries],
        verdicts=[{"setting": s.name, "v": v} for s in scores for v in s.verdicts],
        figures=[{"title": t, "caption": cap,
                  "png": base64.b64encode(p["png"].read_bytes()).decode("ascii")}
                 for t, cap, p in drawn],
        commands=study.get("commands", []), versions=study.get("versions", {}),
    )
    _write_text(folder / "report.html", html)
    md = _markdown(study, entries, tables, verdicts_md, [(t, p["png"]) for t, _, p in drawn],
                   folder)
    _write_text(folder / "report.md", md)
    return Report(folder / "report.html", folder / "report.md", tables, scores, verdicts_md,
                  [p[k] for _, _, p in drawn for k in ("png", "svg")])


def summary_table(report: Report) -> str:
    """Plain-text SA-PPG table with verdicts, for a terminal."""
    lines = []
    for scores in report.scores:
        lines.append(f"{scores.name}: {scores.overall.n_questions} questions, clean m = "
                     f"{scores.clean_m}, noise floor SA-PPG {scores.overall.floor.sa_ppg:.4f}")
        width = max(len(n) for n in scores.strategies) + 2
        for v in scores.verdicts:
            ci = scores.overall.interval(v.name, "sa_ppg")
            lines.append(f"  {v.name.ljust(width)} SA-PPG {ci.estimate:.4f} "
                         f"[{ci.low:.3f}, {ci.high:.3f}]  {v.outcome}")
    return "\n".join(lines)

