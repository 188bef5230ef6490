"""Tables 1-4 of the paper (arXiv 2608.07341 §5) as Markdown, CSV and JSON.

Every table is rendered from the settings' :class:`~zerogap.analysis.score.Scorecard` (by
setting name): each cell is an estimate with its interval
(:class:`zerogap.uncertainty.Interval`); each table shows all questions and, when a split is
known, the leaked and the unleaked ones (the card's sub-cards) as separate sections; every
section carries the :data:`~zerogap.analysis.score.REPEAT` reference row (the clean model's
second batch scored like a strategy: the measured noise floor) and a note with the simulated
floor. The best strategy of each column (lowest gap) is marked, reference rows
(the second clean batch, All-Zero) excluded.

=======  ==============================================================================
table    content
=======  ==============================================================================
1        G-AP (one sampled response per question, as prior work) next to SA-PPG (§5.2.1)
2        Δ+, Δ-, A-PPG, G-APP, SA-PPG with All-Zero as a row (§5.2.2)
3        SA-PPG of every strategy across settings (§5.3.1)
4        the RailCap ablation, SA-PPG with S-Δ+ and S-Δ- (§5.3.2)
=======  ==============================================================================
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zerogap.analysis.score import ALL_ZERO, REPEAT, Scorecard
from zerogap.metrics import METRIC_LABELS
from zerogap.uncertainty import Interval

REFERENCE_ROWS = frozenset({REPEAT, ALL_ZERO})


@dataclass(frozen=True)
class Section:
    """Rows of one subset: ``rows[i] = (label, {column: Interval or None})``."""

    label: str
    rows: tuple[tuple[str, dict], ...]

    def best(self, column: str) -> frozenset[str]:
        """Labels of the lowest estimate in ``column`` among non-reference rows (ties share it;
        none when every row ties, since then no strategy is better)."""
        found = {label: cells[column].estimate for label, cells in self.rows
                 if label not in REFERENCE_ROWS and cells.get(column) is not None}
        if not found:
            return frozenset()
        low = min(found.values())
        best = frozenset(label for label, v in found.items() if v - low <= 1e-12)
        return best if len(best) < len(found) or len(found) == 1 else frozenset()


@dataclass(frozen=True)
class Table:
    """One table: ``columns`` keys with display ``headers``, sections of rows, notes."""

    key: str
    title: str
    columns: tuple[str, ...]
    headers: tuple[str, ...]
    sections: tuple[Section, ...]
    notes: tuple[str, ...]

    def to_markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        for section in self.sections:
            if len(self.sections) > 1:
                lines += [f"**{section.label}**", ""]
            lines.append("| strategy | " + " | ".join(self.headers) + " |")
            lines.append("|---|" + "---|" * len(self.headers))
            best = {c: section.best(c) for c in self.columns}
            for label, cells in section.rows:
                shown = [_cell(cells.get(c), label in best[c]) for c in self.columns]
                lines.append(f"| {label} | " + " | ".join(shown) + " |")
            lines.append("")
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["table", "section", "row", "column", "estimate", "low", "high",
                         "level", "best"])
        for section in self.sections:
            best = {c: section.best(c) for c in self.columns}
            for label, cells in section.rows:
                for column in self.columns:
                    ci = cells.get(column)
                    if ci is not None:
                        writer.writerow([self.key, section.label, label, column, ci.estimate,
                                         ci.low, ci.high, ci.level, int(label in best[column])])
        return out.getvalue()

    def to_dict(self) -> dict:
        return {
            "key": self.key, "title": self.title, "columns": list(self.columns),
            "headers": list(self.headers), "notes": list(self.notes),
            "sections": [
                {"label": s.label, "best": {c: sorted(s.best(c)) for c in self.columns},
                 "rows": [{"row": label, "cells": {c: None if ci is None else ci.to_dict()
                                                   for c, ci in cells.items()}}
                          for label, cells in s.rows]}
                for s in self.sections
            ],
        }


def _cell(ci: Interval | None, best: bool) -> str:
    if ci is None:
        return "–"
    value = f"**{ci.estimate:.4f}**" if best else f"{ci.estimate:.4f}"
    return f"{value} {ci.bounds()}"


def _floor_notes(name: str, card: Scorecard) -> list[str]:
    notes = []
    for section in card.sections:
        f = section.floor
        notes.append(
            f"{name}, {section.label} (N = {section.n_questions}): simulated noise floor "
            f"SA-PPG {f.sa_ppg:.4f} (95th pct {f.sa_ppg_upper:.4f}), A-PPG {f.a_ppg:.4f} "
            f"(95th pct {f.a_ppg_upper:.4f}); the '{REPEAT}' row is the measured one"
        )
    notes.append(f"{card.settings.level:.0%} intervals: where each metric's expectation lies "
                 "for these questions over new samples of both models (sampling noise only); "
                 f"B = {card.bins} strata; best of each column in bold")
    reason = card.gaps.interval(card.gaps.names[0], "sa_ppg").reason
    if reason is not None:
        notes.append(f"no intervals: {reason}")
    return notes


def _metric_table(key: str, title: str, name: str, card: Scorecard, columns: Sequence[str],
                  rows: Sequence[str], extra_notes: Sequence[str] = ()) -> Table:
    sections = []
    for section in card.sections:
        present = [r for r in rows if r in section.gaps.names]
        sections.append(Section(section.label, tuple(
            (r, {c: section.interval(r, c) for c in columns}) for r in present)))
    return Table(key, title, tuple(columns), tuple(METRIC_LABELS[c] for c in columns),
                 tuple(sections), tuple(_floor_notes(name, card)) + tuple(extra_notes))


def table1(name: str, card: Scorecard) -> Table:
    """G-AP next to SA-PPG for every strategy (the rank reversal, paper Table 1)."""
    return _metric_table(
        "table1", f"Table 1: G-AP and SA-PPG ({name})", name, card, ("g_ap", "sa_ppg"),
        [*card.strategies, REPEAT],
        [f"G-AP reads one sampled response per question ({card.draw_note}), as prior work"],
    )


def table2(name: str, card: Scorecard) -> Table:
    """Δ+, Δ-, A-PPG, G-APP and SA-PPG with All-Zero as a row (paper Table 2)."""
    rows = [*[s for s in card.strategies if s != ALL_ZERO], ALL_ZERO, REPEAT]
    return _metric_table(
        "table2", f"Table 2: components of the gap ({name})", name, card,
        ("delta_plus", "delta_minus", "a_ppg", "g_app", "sa_ppg"), rows,
        ["Δ+ under-suppression (inflation left), Δ- over-suppression (collateral damage); "
         "A-PPG = Δ+ + Δ-, G-APP = |Δ+ - Δ-|; All-Zero reads 0 on every question"],
    )


def table3(cards: Mapping[str, Scorecard]) -> Table:
    """SA-PPG of every strategy (rows) across settings (columns), all questions (Table 3)."""
    names = [*dict.fromkeys(s for card in cards.values() for s in card.strategies), REPEAT]
    columns = tuple(cards)
    rows = []
    for name in names:
        cells = {setting: (card.interval(name, "sa_ppg") if name in card.gaps.names else None)
                 for setting, card in cards.items()}
        rows.append((name, cells))
    notes = [_floor_notes(setting, card)[0] for setting, card in cards.items()]
    return Table("table3", "Table 3: SA-PPG across settings", columns, columns,
                 (Section("all questions", tuple(rows)),), tuple(notes))


def ablation_rows(card: Scorecard) -> list[str]:
    """The RailCap variants of a study (labels starting with ``railcap``): cap before ban, then
    by n (default 4), as paper Table 4 lists them."""

    def key(label: str) -> tuple[bool, int]:
        n = re.search(r"\bn=(\d+)", label)
        return "ban" in label, int(n.group(1)) if n else 4

    return sorted((s for s in card.strategies if s.startswith("railcap")), key=key)


def table4(name: str, card: Scorecard) -> Table:
    """The RailCap ablation: SA-PPG with S-Δ+ and S-Δ- per variant, All-Zero for reference."""
    variants = ablation_rows(card)
    notes = ["S-Δ+ and S-Δ- split SA-PPG into stratified under- and over-suppression"]
    if len(variants) < 2:
        notes.append("only one RailCap variant was run; `zerogap evaluate --ablation` adds "
                     "n = 1..7 (cap) and n = 4 (ban)")
    return _metric_table(
        "table4", f"Table 4: RailCap ablation ({name})", name, card,
        ("sa_ppg", "s_delta_plus", "s_delta_minus"), [*variants, ALL_ZERO, REPEAT], notes,
    )


def study_tables(cards: Mapping[str, Scorecard]) -> list[Table]:
    """Tables 1, 2 and 4 of the first setting, and Table 3 across all settings."""
    name, first = next(iter(cards.items()))
    return [table1(name, first), table2(name, first), table3(cards), table4(name, first)]


def verdict_table(cards: Mapping[str, Scorecard]) -> str:
    """Markdown: SA-PPG with CI and the verdict of every strategy in every setting."""
    lines = ["| setting | strategy | SA-PPG | verdict |", "|---|---|---|---|"]
    for name, card in cards.items():
        for v in card.verdicts:
            ci = card.interval(v.name, "sa_ppg")
            lines.append(f"| {name} | {v.name} | {_cell(ci, False)} | {v.sentence()} |")
    return "\n".join(lines) + "\n"
