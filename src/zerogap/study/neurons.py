"""Shortcut-neuron location for a study setting, resumable, reusing the study's greedy decodes:
the ``neurons`` job kind (:mod:`zerogap.study.job`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from zerogap.study.job import Job, JobContext, Left, Planning, SettingRuns
from zerogap.study.kinds import register_job_kind
from zerogap.study.settings import Setting
from zerogap.study.spec import StudySpec

if TYPE_CHECKING:
    from zerogap.runs import LoadedEngine
    from zerogap.study.progress import JobProgress


@register_job_kind("neurons")
@dataclass
class NeuronsJob(Job):
    """The setting's shortcut neurons ranked into the file ``output``, located once per
    (models, leaked questions, calibration) and shared by every strategy that patches them."""

    label: str
    output: Path

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        return (runs.contaminated_greedy,)

    def left(self, planning: Planning) -> Left:
        return Left(0 if self.output.is_file() else 1)

    def run(self, context: JobContext) -> None:
        locate_for_setting(self.output, context.study, context.setting, context.engine,
                           context.runs.contaminated_greedy, context.progress)


def locate_for_setting(path: Path, study: StudySpec, s: Setting,
                       engine: Callable[[str], LoadedEngine], greedy_dir: Path,
                       progress: JobProgress) -> None:
    """Rank the setting's neurons into ``path`` (:func:`zerogap.pipelines.neurons.locate_neurons`
    on ``engine(role)``'s models and the base model loaded beside them); each question's result
    is journaled beside it first, so a study stopped during this (hours on a 7B model) resumes
    where it stopped.

    The neurons are located on the setting's ``located`` leaked questions and scored on its
    ``calibration`` questions, disjoint from the evaluated ones where the split allows
    (:func:`~zerogap.study.calibration.split_questions`; the file's meta records which in
    ``calibration_disjoint``). The contaminated model's unpatched greedy passes over those
    that the study evaluated (its answers to leaked questions, its grades on calibration
    questions) are the study's own greedy decodes of that model in ``greedy_dir`` (same
    prompts, token limit and stop strings), so they enter the journal from there instead of
    being decoded again; the others are decoded here, journaled as any pass is.
    """
    from zerogap.decoding.shortcut import mlp_width
    from zerogap.io.neurons import save_neurons
    from zerogap.models import load_beside
    from zerogap.pipelines.neurons import (
        Journal,
        journal_path,
        locate_neurons,
        nearest_block_size,
    )
    from zerogap.store import RunStore

    contaminated, clean = engine("contaminated").loaded, engine("clean").loaded
    progress.stage(f"{s.spec.name}: loading the base model")
    base = load_beside(s.spec.base, contaminated.model)
    progress.stage(f"{s.spec.name}: locating shortcut neurons")
    leaked = s.located
    d_ff = mlp_width(contaminated.model)[1]
    block = nearest_block_size(d_ff, study.neuron_block or d_ff)
    setup = {"task": s.task.name, "task_config": s.task.config(), "split": s.spec.task_split,
             "leaked_ids": [q.id for q in leaked],
             "calibration_ids": [q.id for q in s.calibration]}
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = journal_path(path)
    journal = Journal(kept, {**setup, "block_size": block,
                             "candidates": study.neuron_candidates,
                             "max_new_tokens": study.max_new_tokens})
    journal.check_models({"base": base.fingerprint, "contaminated": contaminated.fingerprint,
                          "uncontaminated": clean.fingerprint})
    with RunStore(greedy_dir, create=False) as store:
        decoded = store.greedy()
    for key, questions, value in (
            ("leaked", leaked, lambda g: list(g.token_ids)),
            ("contaminated", s.calibration, lambda g: int(g.correct))):
        done = journal.results.get(key, {})
        for q in questions:
            if q.id in decoded and q.id not in done:
                journal.record(key, q.id, value(decoded[q.id]))
    ranking, meta = locate_neurons(
        base.model, contaminated.model, clean.model, contaminated.tokenizer, s.task, leaked,
        s.calibration, block_size=block, candidates=study.neuron_candidates,
        max_new_tokens=study.max_new_tokens, journal=journal,
        progress=lambda event: progress.part("neuron decodes", event.done, event.total),
    )
    meta.update({
        "base": {"spec": s.spec.base, "fingerprint": base.fingerprint},
        "contaminated": {"spec": s.spec.contaminated, "fingerprint": contaminated.fingerprint},
        "uncontaminated": {"spec": s.spec.clean, "fingerprint": clean.fingerprint},
        "calibration_disjoint": s.calibration_disjoint, **setup,
    })
    save_neurons(path, ranking, meta)
    kept.unlink()  # everything it kept is in the ranking now
