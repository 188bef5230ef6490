"""Does a study's verdict depend on B or m? SA-PPG and the ranking over both (beyond the paper).

A referee of arXiv 2608.07341 asks whether SA-PPG's conclusions hold for other numbers of strata
B (the paper fixes B = 50 for GSM8K's 1,319 questions) and fewer samples per question m. This
table re-scores one setting's strategies at every B of ``bins_grid`` and at m subsampled to each
fraction of ``fractions``: a question's count among m' of its m samples, drawn without
replacement, is hypergeometric, so a subsampled run is exactly what m' samples would have read
(seeded, no per-sample data needed). Each cell is SA-PPG with its interval; the notes give the
ranking per column and say whether it changes.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zerogap.analysis.score import Scorecard
from zerogap.analysis.tables import Section, Table
from zerogap.uncertainty import gap_intervals

BINS_GRID = (5, 10, 20, 50)
FRACTIONS = (0.25, 0.5, 1.0)


def subsample(correct: np.ndarray, samples: np.ndarray, fraction: float,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Counts among ``round(fraction * m)`` (at least 1) of each question's m samples.

    Examples
    --------
    >>> c, m = subsample(np.array([0, 10, 5]), np.array([10, 10, 10]), 0.5,
    ...                  np.random.default_rng(0))
    >>> m.tolist(), c[:2].tolist(), bool(0 <= c[2] <= 5)
    ([5, 5, 5], [0, 5], True)
    """
    kept = np.maximum(1, np.round(fraction * samples)).astype(np.int64)
    return rng.hypergeometric(correct, samples - correct, kept), kept


def sensitivity_table(name: str, card: Scorecard, *, bins_grid: Sequence[int] = BINS_GRID,
                      fractions: Sequence[float] = FRACTIONS) -> Table:
    """SA-PPG of every strategy of ``card`` (all questions) at each B and subsampled m."""
    rng = np.random.default_rng([card.settings.seed, 23])
    clean = card.clean.counts
    runs = [r.counts for r in card.runs]
    columns, headers, rankings = [], [], []
    cells: dict[str, dict] = {r: {} for r in card.strategies}
    for fraction in fractions:
        c_clean, m_clean = subsample(clean.correct, clean.samples, fraction, rng)
        drawn = [subsample(r.correct, r.samples, fraction, rng) for r in runs]
        m_shown = int(np.median(m_clean))
        for bins in bins_grid:
            key = f"B={bins},m={m_shown}"
            gaps = gap_intervals(c_clean, m_clean, np.stack([d[0] for d in drawn]),
                                 np.stack([d[1] for d in drawn]), names=card.strategies,
                                 bins=bins, level=card.settings.level)
            for strategy in card.strategies:
                cells[strategy][key] = gaps.interval(strategy, "sa_ppg")
            order = sorted(card.strategies, key=lambda s: cells[s][key].estimate)
            columns.append(key)
            headers.append(f"B = {bins}, m = {m_shown}")
            rankings.append(f"{key}: {' < '.join(order)}")
    stable = len({ranking.split(": ", 1)[1] for ranking in rankings}) == 1
    notes = [
        f"SA-PPG of each strategy at each B and with m subsampled (hypergeometric draws of "
        f"{', '.join(f'{f:g}' for f in fractions)} of each question's samples, seed "
        f"{card.settings.seed}); intervals as in the other tables",
        "the ranking by SA-PPG " + ("is the same in every column" if stable
                                    else "changes across columns") + ":",
        *rankings,
    ]
    section = Section("all questions", tuple((s, cells[s]) for s in card.strategies))
    return Table("sensitivity", f"Sensitivity of SA-PPG to B and m ({name})", tuple(columns),
                 tuple(headers), (section,), tuple(notes))
