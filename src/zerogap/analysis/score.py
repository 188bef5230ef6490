"""The scorecard: everything ``zerogap score`` computes, as one value, apart from its rendering.

Given a clean run and one or more mitigated runs (per-question counts on the same questions),
:func:`score` computes every restoration metric of arXiv 2608.07341 (§3: G-AP, G-APP, A-PPG,
Δ+/Δ-, SA-PPG and its S-Δ+/S-Δ- split) with intervals (:func:`zerogap.uncertainty.gap_intervals`),
the finite-sample noise floor, the best strategy by SA-PPG, paired randomisation tests against
it and a restoration verdict per strategy, and returns them as a :class:`Scorecard` whose
:meth:`Scorecard.to_dict` is the JSON ``zerogap score --json`` writes. A study (§5) asks for
more of the same card: reference rows scored beside the strategies but never ranked (the clean
model's second batch, All-Zero) and the leaked and the unleaked questions as sub-cards; its
tables are rendered from these cards.
Rendering is the command line's and :mod:`zerogap.analysis.tables`' job. Torch-free.

Examples
--------
>>> import numpy as np
>>> from zerogap.io.counts import QuestionCounts
>>> ids = tuple(f"q{i}" for i in range(6))
>>> clean = QuestionCounts("c", ids, np.array([0, 2, 4, 6, 8, 10]), np.full(6, 10), None, None)
>>> same = ScoredRun("same", clean, {})
>>> card = score(ScoredRun("clean", clean, {}), [same], ScoreSettings(resamples=0, noise_sims=20))
>>> card.best, card.estimate("same").sa_ppg
('same', 0.0)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zerogap import __version__
from zerogap.config import JsonConfig, shared_field
from zerogap.errors import DataError, UserError
from zerogap.io.counts import QuestionCounts, read_counts
from zerogap.io.lmeval import (
    LmevalLog,
    check_same_documents,
    find_samples,
    is_lmeval_log,
    read_lmeval,
)
from zerogap.metrics import MAX_BINS, METRIC_NAMES, RestorationGaps, single_draw
from zerogap.provenance import file_record, run_record
from zerogap.readout import run_counts
from zerogap.store import DB_NAME, RunStore
from zerogap.tasks.extract import target_grader
from zerogap.uncertainty import (
    GapIntervals,
    Interval,
    NoiseFloor,
    PairedComparison,
    Verdict,
    choose_bins,
    compare,
    gap_intervals,
    noise_floor,
    restoration_verdicts,
)

REPEAT = "clean, 2nd batch"
"""Name of the clean model's second, independent batch as a reference row: the measured floor."""

ALL_ZERO = "all-zero"
"""Name of the All-Zero reference (paper Table 2): a model that solves nothing."""


@dataclass(frozen=True)
class ScoreSettings(JsonConfig):
    """How a scorecard is computed; recorded in its JSON."""

    bins: int | None = field(default=None, metadata={
        "help": "SA-PPG strata B (default: round(N / 26) kept within 5..50)", "min": 1,
        "max": MAX_BINS})
    resamples: int = field(default=10_000, metadata={
        "help": "swap patterns of the paired tests (0: no paired tests)", "min": 0})
    level: float = field(default=0.95, metadata={"help": "confidence level", "gt": 0, "lt": 1})
    noise_sims: int = field(default=2000, metadata={"help": "noise-floor simulations", "min": 1})
    seed: int = shared_field("seed", default=0)
    margin: float = field(default=0.05, metadata={
        "help": "equivalence margin of the restoration verdicts", "min": 0})
    paired_null: Literal["sharp", "mean"] = field(default="sharp", metadata={
        "help": "what the paired tests test: sharp (equal on every question, the exact swap "
                "test) or mean (equal on average, a stratified t)"})

    def resolved_bins(self, n_questions: int) -> int:
        """B for a benchmark of ``n_questions``: the setting, or :func:`choose_bins`."""
        return self.bins if self.bins is not None else choose_bins(n_questions)


@dataclass(frozen=True)
class ScoredRun:
    """One input of a scorecard: a name, its per-question counts and where they came from.

    ``lmeval`` holds the harness log it was read from (its documents' hashes), if it was one.
    """

    name: str
    counts: QuestionCounts
    provenance: dict[str, Any]
    lmeval: LmevalLog | None = None


@dataclass(frozen=True)
class Scorecard:
    """Everything ``zerogap score`` reports (see the module docstring).

    ``gaps`` holds the strategies (``runs``), then the ``references``; only strategies are
    ranked (``best``), compared and given verdicts. ``subsets`` are the same card on the leaked
    and the unleaked questions when a split was given, at the same B.
    """

    settings: ScoreSettings
    clean: ScoredRun
    runs: tuple[ScoredRun, ...]
    gaps: GapIntervals
    draw_note: str
    floor: NoiseFloor
    best: str
    comparisons: tuple[PairedComparison, ...]
    references: tuple[ScoredRun, ...] = ()
    label: str = "all questions"
    subsets: tuple[Scorecard, ...] = ()
    verdicts: tuple[Verdict, ...] = ()

    @property
    def strategies(self) -> tuple[str, ...]:
        """The scored strategies' names, in input order (references excluded)."""
        return tuple(run.name for run in self.runs)

    @property
    def n_questions(self) -> int:
        return len(self.clean.counts)

    @property
    def bins(self) -> int:
        """The strata B every section of this card uses."""
        return self.gaps.estimates[0].bins

    @property
    def clean_m(self) -> int:
        """The clean run's median samples per question."""
        return int(np.median(self.clean.counts.samples))

    @property
    def sections(self) -> tuple[Scorecard, ...]:
        """This card (all questions), then its leaked and unleaked sub-cards, if any."""
        return (self, *self.subsets)

    def estimate(self, name: str) -> RestorationGaps:
        """The :class:`~zerogap.metrics.RestorationGaps` of strategy or reference ``name``."""
        return self.gaps.estimates[self.gaps.index(name)]

    def interval(self, name: str, metric: str) -> Interval:
        """``metric`` of strategy or reference ``name`` with its interval."""
        return self.gaps.interval(name, metric)

    def reference(self, name: str) -> ScoredRun | None:
        """The reference row called ``name``, if it was scored."""
        return next((r for r in self.references if r.name == name), None)

    def verdict(self, name: str) -> Verdict:
        """The restoration verdict of strategy ``name``."""
        return next(v for v in self.verdicts if v.name == name)

    def _metrics(self) -> dict[str, Any]:
        """Per strategy and reference: every metric with its interval, strata, verdict."""
        verdicts = {v.name: v for v in self.verdicts}
        strategies = {}
        for name, est in zip(self.gaps.names, self.gaps.estimates, strict=True):
            entry: dict[str, Any] = {"strata_used": est.strata_used,
                                     "strata_sizes": est.strata_sizes}
            for m in METRIC_NAMES:
                if getattr(est, m) is not None:
                    entry[m] = self.gaps.interval(name, m).to_dict()
            if name in verdicts:
                entry["verdict"] = verdicts[name].to_dict()
            strategies[name] = entry
        return strategies

    def truncation(self) -> dict[str, tuple[int, int]]:
        """``{input name: (responses cut at the token limit, responses counted)}`` of the clean
        run and each strategy whose counts record it (a run; a counts file it exported)."""
        return {run.name: (int(run.counts.truncated.sum()), int(run.counts.samples.sum()))
                for run in (self.clean, *self.runs) if run.counts.truncated is not None}

    def to_dict(self) -> dict[str, Any]:
        """The JSON record: versions, inputs with provenance, settings, metrics, floor, tests,
        and the responses cut at the token limit."""
        inputs: dict[str, Any] = {
            "clean": self.clean.provenance,
            "mitigated": {run.name: run.provenance for run in self.runs},
        }
        if self.references:
            inputs["references"] = {run.name: run.provenance for run in self.references}
        out = {
            "zerogap_version": __version__,
            "inputs": inputs,
            "settings": {
                "n_questions": self.n_questions,
                **self.settings.to_dict(),
                "bins_used": self.bins,
                "g_ap_readout": self.draw_note,
            },
            "strategies": self._metrics(),
            "best": self.best,
            "noise_floor": self.floor.to_dict(),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "truncated": {name: {"responses": cut, "of": total}
                          for name, (cut, total) in self.truncation().items()},
        }
        if self.subsets:
            out["subsets"] = {sub.label: {"n_questions": sub.n_questions,
                                          "strategies": sub._metrics(),
                                          "noise_floor": sub.floor.to_dict()}
                              for sub in self.subsets}
        return out


def load_input(name: str, path: str | Path, *, lmeval_grading: str = "anchor") -> ScoredRun:
    """A scorecard input from a counts file, a run directory (read under its readout) or an
    lm-evaluation-harness sample log or ``--output_path`` folder holding one (its raw responses
    graded with ``lmeval_grading``).

    A run directory contributes its stored configuration as provenance; a counts file its path,
    digest and the provenance header ``zerogap runs export`` writes into it, if any; a harness
    log its path, digest, repeats and grading mode.
    """
    path = Path(path)
    harness_folder = path.is_dir() and not (path / DB_NAME).is_file()  # lm-eval --output_path
    if harness_folder:
        found = find_samples(path)
        if found is None:
            raise DataError(f"{path}: a directory without a run store ({DB_NAME}) or "
                            "lm-evaluation-harness samples_*.jsonl")
        path = found
    if harness_folder or (path.is_file() and is_lmeval_log(path)):
        log = read_lmeval(path, grade=target_grader(lmeval_grading))
        return ScoredRun(name, log.counts, file_record(path, lmeval={
            "repeats": log.repeats, "grading": lmeval_grading}), log)
    if path.is_dir():
        with RunStore(path, create=False) as store:
            rows, config = run_counts(store), store.config()
        if not rows:
            raise DataError(f"{path}: the run holds no samples yet")
        counts = QuestionCounts(
            path=str(path), ids=tuple(r["id"] for r in rows),
            correct=np.array([r["correct"] for r in rows], dtype=np.int64),
            samples=np.array([r["samples"] for r in rows], dtype=np.int64),
            first=np.array([r["first"] for r in rows], dtype=np.int64), provenance=None,
            truncated=np.array([r["truncated"] for r in rows], dtype=np.int64),
        )
        return ScoredRun(name, counts, run_record(path, config))
    counts = read_counts(path)
    extra = {} if counts.provenance is None else {"exported_from": counts.provenance}
    return ScoredRun(name, counts, file_record(path, **extra))


def _draws(clean: QuestionCounts, runs: list[QuestionCounts], seed: int):
    """Single 0/1 readouts for G-AP: each input's first sample, or a seeded draw from its counts."""
    firsts = [run.first for run in runs if run.first is not None]
    if clean.first is not None and len(firsts) == len(runs):
        return clean.first, np.stack(firsts), "first sample"
    rng = np.random.default_rng([seed, 1])
    draw_clean = single_draw(clean.correct, clean.samples, seed=rng)
    draw_mit = np.stack([single_draw(run.correct, run.samples, seed=rng) for run in runs])
    return draw_clean, draw_mit, f"one seeded draw per question from the counts (seed {seed})"


def all_zero(clean: ScoredRun) -> ScoredRun:
    """The All-Zero reference (paper Table 2) on ``clean``'s questions: no sample ever correct."""
    c = clean.counts
    zero = np.zeros(len(c), np.int64)
    counts = QuestionCounts("(synthetic)", c.ids, zero, c.samples.copy(), zero.copy())
    return ScoredRun(ALL_ZERO, counts, {"synthetic": "every question reads 0"})


def _subset(run: ScoredRun, mask: np.ndarray) -> ScoredRun:
    """``run`` restricted to the questions where ``mask`` (shape (n_questions,)) is true."""
    c = run.counts
    counts = QuestionCounts(c.path, tuple(np.asarray(c.ids)[mask]), c.correct[mask],
                            c.samples[mask], None if c.first is None else c.first[mask],
                            c.provenance)
    return ScoredRun(run.name, counts, run.provenance)


def score(clean: ScoredRun, mitigated: Sequence[ScoredRun], settings: ScoreSettings, *,
          references: Sequence[ScoredRun] = (), leaked: Collection[str] | None = None,
          floor_samples: Mapping[str, int] | None = None) -> Scorecard:
    """Score every mitigated run against ``clean`` (question sets must match; order may differ).

    ``references`` are scored beside them but never ranked or compared (the clean model's
    second batch, :func:`all_zero`); ``leaked`` (question ids) adds the leaked and the
    unleaked questions as sub-cards. The noise floor's second batch has the strategies'
    median m, or ``floor_samples`` (question id -> m: an allocated study's plan, which its
    strategies share). Raises :class:`~zerogap.errors.UserError` for no or
    repeated names and :class:`~zerogap.errors.DataError` (naming the file) for differing
    question sets, or for a split that leaves one side without questions.
    """
    names = [run.name for run in (*mitigated, *references)]
    if not mitigated:
        raise UserError("give at least one mitigated run")
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise UserError(f"strategy name {twice!r} given twice")
    for run in (*mitigated, *references):
        if clean.lmeval is not None and run.lmeval is not None:
            check_same_documents(clean.lmeval, run.lmeval)
    runs = [ScoredRun(r.name, r.counts.aligned_to(clean.counts), r.provenance) for r in mitigated]
    refs = [ScoredRun(r.name, r.counts.aligned_to(clean.counts), r.provenance)
            for r in references]
    bins = settings.resolved_bins(len(clean.counts))
    card = _card(clean, runs, refs, settings, bins, "all questions", floor_samples)
    subsets = []
    if leaked is not None:
        inside = np.array([q in leaked for q in clean.counts.ids])
        for label, mask in (("leaked", inside), ("unleaked", ~inside)):
            if not mask.any():
                raise DataError(f"the split leaves no {label} questions among the "
                                f"{card.n_questions} scored")
            subsets.append(_card(_subset(clean, mask), [_subset(r, mask) for r in runs],
                                 [_subset(r, mask) for r in refs], settings, bins, label,
                                 floor_samples))
    return replace(card, subsets=tuple(subsets))


def _card(clean: ScoredRun, runs: list[ScoredRun], refs: list[ScoredRun],
          settings: ScoreSettings, bins: int, label: str,
          floor_samples: Mapping[str, int] | None) -> Scorecard:
    """The scorecard of aligned runs on one set of questions (no subsets)."""
    rows = [*runs, *refs]
    names = [r.name for r in rows]
    counts = [r.counts for r in rows]
    c = clean.counts
    draw_clean, draw_mit, draw_note = _draws(c, counts, settings.seed)
    mit_samples = np.stack([r.samples for r in counts])
    gaps = gap_intervals(
        c.correct, c.samples, np.stack([r.correct for r in counts]), mit_samples,
        names=names, bins=bins, level=settings.level, n_resamples=max(settings.resamples, 1),
        seed=settings.seed, draw_clean=draw_clean, draw_mitigated=draw_mit,
    )
    other: int | np.ndarray | None
    if floor_samples is not None:
        other = np.array([floor_samples[q] for q in c.ids])
    else:
        median = int(np.median(np.concatenate([r.counts.samples for r in runs])))
        other = None if median == int(np.median(c.samples)) else median
    floor = noise_floor(c.correct, c.samples, other_samples=other, bins=bins,
                        n_sim=settings.noise_sims, seed=settings.seed)
    ranked = [r.name for r in runs]
    best = min(ranked, key=lambda n: gaps.estimates[names.index(n)].sa_ppg)
    comparisons = tuple(
        compare(gaps, name, best, metric=metric, null=settings.paired_null)
        for metric in ("sa_ppg", "a_ppg")
        for name in ranked
        if name != best and settings.resamples > 0
    )
    verdicts = tuple(v for v in restoration_verdicts(
        gaps, c.correct, c.samples, mit_samples, margin=settings.margin,
        n_sim=settings.noise_sims) if v.name in ranked)
    return Scorecard(settings, clean, tuple(runs), gaps, draw_note, floor, best, comparisons,
                     tuple(refs), label, verdicts=verdicts)
