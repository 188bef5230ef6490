"""What a study measures on the two models alone: the design checks and Figure 1's ranks, the
``design`` and ``ranks`` job kinds (:mod:`zerogap.study.job`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from zerogap.errors import DataError
from zerogap.io.files import write_text
from zerogap.io.jsonlines import read_json_object
from zerogap.strategies import PLAIN
from zerogap.study.job import Job, JobContext, Left, Planning, SettingRuns
from zerogap.study.kinds import register_job_kind
from zerogap.study.settings import Setting

if TYPE_CHECKING:
    from zerogap.runs import LoadedEngine
    from zerogap.study.progress import JobProgress

RANK_STEPS = 10  # Figure 1 b/d reads the first ten decoding steps


@register_job_kind("design")
@dataclass
class DesignJob(Job):
    """The design checks into the file ``output``: cheap, and they read runs that may have
    grown, so they run at every invocation (their first time stands in the record); they load
    no model."""

    label: str
    output: Path
    timed = False
    first_time_stands = True

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        return (runs.clean, runs.repeat, runs.strategies[PLAIN], runs.contaminated_greedy,
                runs.clean_greedy)

    def left(self, planning: Planning) -> Left:
        return Left(1)

    def gpus(self, engine: float) -> float:
        return 0.0

    def run(self, context: JobContext) -> None:
        name = context.setting.spec.name
        context.progress.stage(f"{name}: design checks")
        criteria = design_checks(self.output, context.setting, context.runs)
        met = sum(c.met for c in criteria)
        context.progress.stage(f"{name}: design checks: {met} of {len(criteria)} met")


@register_job_kind("ranks")
@dataclass
class RanksJob(Job):
    """Figure 1 b/d's ranks into the file ``output``, recomputed only when their inputs change
    (so untimed: a rerun that recomputes them keeps the recorded times)."""

    label: str
    output: Path
    timed = False

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        return (runs.clean_greedy,)

    def left(self, planning: Planning) -> Left:
        return Left(0 if ranks_current(self.output, planning.setting,
                                       planning.runs.clean_greedy) else 1)

    def run(self, context: JobContext) -> None:
        figure_ranks(self.output, context.setting, context.engine, context.runs.clean_greedy,
                     context.progress)


def design_checks(path: Path, s: Setting, runs: SettingRuns) -> list:
    """Measure the design criteria on the two models alone (clean batches, identity, both
    models' greedy decodes) and write them to ``path``; see :mod:`zerogap.analysis.design`.

    The store keeps no sample's token ids, so for the trigger rate every sample and greedy
    text is tokenised again with its model's tokenizer (both sides alike)."""
    import numpy as np

    from zerogap.analysis.design import design_criteria, trajectory_stats, write_design
    from zerogap.models import load_tokenizer
    from zerogap.readout import run_counts
    from zerogap.store import RunStore

    ids = [q.id for q in s.questions]

    def solve(run_dir: Path) -> np.ndarray:
        with RunStore(run_dir, create=False) as store:
            rows = {r["id"]: r for r in run_counts(store)}
        return np.array([rows[q]["correct"] / rows[q]["samples"] for q in ids])

    def against_greedy(run_dir: Path, greedy_dir: Path, model: str):
        tokenizer = load_tokenizer(model)
        with RunStore(greedy_dir, create=False) as store:
            greedy = {q: g.text for q, g in store.greedy().items()}
        samples: dict[str, list[str]] = {q: [] for q in ids}
        with RunStore(run_dir, create=False) as store:
            for row in store.samples():
                if row.question_id in samples:
                    samples[row.question_id].append(row.text)
        return trajectory_stats([samples[q] for q in ids], [greedy[q] for q in ids],
                                lambda text: tokenizer(text, add_special_tokens=False)["input_ids"])

    leaked = set(s.leaked or ())
    criteria = design_criteria(
        solve(runs.clean), solve(runs.repeat), solve(runs.strategies[PLAIN]),
        np.array([q in leaked for q in ids]),
        co=against_greedy(runs.strategies[PLAIN], runs.contaminated_greedy, s.spec.contaminated),
        cl=against_greedy(runs.clean, runs.clean_greedy, s.spec.clean),
    )
    write_design(path, criteria, ids)
    return criteria


def ranks_current(path: Path, s: Setting, greedy_clean: Path) -> bool:
    """Whether Figure 1 b/d's ranks in ``path`` were computed from setting ``s``'s inputs as
    they are now: the questions, the clean model's greedy decodes (``greedy_clean``, a
    directory named by its run's content: model, task, backend, dtype, token limit) and the
    contaminated model they are forced into. A file of a study made before the inputs were
    recorded counts as current when its questions are the same."""
    kept = _kept_ranks(path) if path.is_file() else {}
    return kept.get("questions") == [q.id for q in s.questions] \
        and kept.get("inputs", _rank_inputs(s, greedy_clean)) == _rank_inputs(s, greedy_clean)


def _rank_inputs(s: Setting, greedy_clean: Path) -> dict:
    return {"greedy": greedy_clean.name, "contaminated": s.spec.contaminated}


def figure_ranks(path: Path, s: Setting, engine: Callable[[str], LoadedEngine],
                 greedy_clean: Path, progress: JobProgress) -> None:
    """Figure 1 b/d's teacher-forced ranks of setting ``s`` into ``path``, unless they are
    current (:func:`ranks_current`; ``engine(role)`` loads a model only when they are
    computed)."""
    from zerogap.store import RunStore

    if ranks_current(path, s, greedy_clean):
        return
    progress.stage(f"{s.spec.name}: Figure 1 ranks (teacher-forced)")
    with RunStore(greedy_clean, create=False) as store:
        greedy = store.greedy()
    prompts = [s.task.prompt(q) for q in s.questions]
    # The clean model's greedy tokens, teacher-forced into the contaminated model; only the
    # steps where the two disagree (rank > 1) are kept, as in paper Figure 1 b/d.
    forced = [greedy[q.id].token_ids[:RANK_STEPS] for q in s.questions]
    scored = engine("contaminated").backend.forced_ranks(prompts, forced)
    ranks = {q.id: [r for r in rs if r > 1] for q, rs in zip(s.questions, scored, strict=True)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({"questions": [q.id for q in s.questions], "ranks": ranks,
                                 "inputs": _rank_inputs(s, greedy_clean)}) + "\n")


def _kept_ranks(path: Path) -> dict:
    """The ranks file a previous run left, or ``{}`` (computed again) when it is unreadable:
    it is derived data, so a damaged one costs a recomputation, not a failed rerun."""
    try:
        return read_json_object(path, "ranks file")
    except DataError:
        return {}
