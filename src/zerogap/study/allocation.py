"""An allocated study's plan: each question's m, computed once the clean model's second batch
(and the strategies' pilots) are sampled (issue 48; :mod:`zerogap.uncertainty.allocation`).

The plan is a cheap job of the setting's job graph (:mod:`zerogap.study.plan`), the ``allocate``
job kind (:class:`AllocateJob`): it reads the
second clean batch, so the executor runs it once that batch is stored, and every allocated
strategy's run reads the plan, so none samples before it; nor does the clean reference batch,
which the plan allocates upward from the study's m for the K strategies that share it. It is
recorded beside the runs
(:mod:`zerogap.analysis.allocation`) with the inputs it was computed from:

* the same inputs again (a resumed study, a strategy added later): the recorded plan is used
  as it is, so every strategy samples at the same m;
* other inputs (a raised budget, another target, B or bound): computed again from the same
  clean batch; a larger budget only ever adds samples to a question (the rule's scale grows),
  so the runs sample only what they lack.

Sampling order, so that no sample the estimate scores chose the allocation: the clean model's
second batch (``seed + 1``) at m, the pilots (``seed + 3``, never scored), the plan, then the
reference batch's samples ``0 .. r_q - 1`` (seed ``seed``) and each strategy's ``0 .. m_q - 1``
(``seed + 2``), the very samples a uniform run of that seed draws there. A strategy added later
samples at the recorded plan and leaves the reference batch as it was allocated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerogap.analysis.allocation import AllocationPlan, read_allocation, write_allocation
from zerogap.errors import DataError, UserError
from zerogap.strategies import strategy_class
from zerogap.study.job import Job, JobContext, Left, Planning, SettingRuns
from zerogap.study.kinds import register_job_kind
from zerogap.study.settings import Setting
from zerogap.study.spec import StudySpec

PILOT_SEED = 3
"""The pilots' seed, relative to the study's: the clean batches draw on ``seed`` and
``seed + 1`` and the strategies on ``seed + 2``, so no pilot shares noise with a scored run."""
MAX_SAMPLES = 1 << 16
"""The most samples of a question when the study sets no ``max_samples`` (a run's m bound)."""


def budget_notes(study: StudySpec) -> list[str]:
    """What a budget buys, said before the study runs: a budget at or above ``max_samples``
    gives every question ``max_samples``, which a uniform m of that many samples gives
    without a plan (``--budget 1e9``)."""
    if study.budget is None:
        return []
    most = study.max_samples or MAX_SAMPLES
    if study.budget < most:
        return []
    return [f"budget {study.budget:g} is at least max_samples ({most}): every question of every "
            f"strategy gets {most} samples, what a uniform m = {most} needs; the allocation "
            "changes nothing (lower the budget, or give m instead)"]


def sampled_strategies(study: StudySpec, s: Setting) -> int:
    """K, the study's strategies that sample the contaminated model and so share the clean
    reference batch's cost in Neyman's rule (a filter reuses identity's samples and All-Zero
    draws none)."""
    chosen = (strategy_class(s.strategies[label][0]) for label in study.labels())
    return max(1, sum(c.samples_model and not c.filters_only for c in chosen))


def plan_inputs(study: StudySpec, s: Setting, repeat: Path, pilots: Mapping[str, Path]
                ) -> dict[str, Any]:
    """What setting ``s``'s plan is computed from: the second clean batch's run (``repeat``),
    its questions, B, the budget or target, the bounds, the level, the reference batch's m and
    the pilots' seed, m and runs (label -> run directory)."""
    ids = [q.id for q in s.questions]
    return {
        "rule": "neyman", "clean_batch": repeat.name, "questions": len(ids),
        "question_ids": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16],
        "bins": study.scoring().resolved_bins(len(ids)), "budget": study.budget,
        "target_half_width": study.target_half_width, "min_samples": study.min_samples,
        "max_samples": study.max_samples or MAX_SAMPLES, "level": study.level,
        "reference_m": study.m,
        "pilot": {"seed": study.seed + PILOT_SEED, "m": study.pilot,
                  "runs": {label: path.name for label, path in pilots.items()}}
        if pilots else None,
    }


@register_job_kind("allocate")
@dataclass
class AllocateJob(Job):
    """Setting's plan into the file ``output``, from the second clean batch and the runs
    ``pilots`` (label -> run directory)."""

    label: str
    output: Path
    pilots: dict[str, Path] = field(default_factory=dict)

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        return (runs.repeat, *self.pilots.values())

    def recorded(self, study: StudySpec, s: Setting, runs: SettingRuns) -> AllocationPlan | None:
        """The plan recorded for the inputs as they are now (None: it is to be computed)."""
        return recorded_plan(self.output, plan_inputs(study, s, runs.repeat, self.pilots))

    def left(self, planning: Planning) -> Left:
        return Left(int(planning.plan is None))

    def run(self, context: JobContext) -> None:
        s = context.setting
        context.progress.stage(f"{s.spec.name}: allocating the strategies' samples")
        allocate_setting(self.output, context.study, s, context.runs.repeat, self.pilots)


def recorded_plan(path: Path, inputs: Mapping[str, Any]) -> AllocationPlan | None:
    """The plan recorded at ``path`` if it was computed from ``inputs``; None when there is
    none, it came from other inputs, or it cannot be read (derived data: computed again)."""
    if not path.is_file():
        return None
    try:
        plan = read_allocation(path)
    except DataError:
        return None
    return plan if plan.inputs == json.loads(json.dumps(inputs)) else None


def allocate_setting(path: Path, study: StudySpec, s: Setting, repeat: Path,
                     pilots: Mapping[str, Path]) -> AllocationPlan:
    """Setting ``s``'s plan, recorded at ``path``: the recorded one while its inputs are the
    same, else :func:`~zerogap.uncertainty.allocate_samples` on the second clean batch
    (``repeat``) and the pilots' counts (label -> run), written there.

    A target the clean batch's own noise (or ``max_samples``) puts out of reach is a
    :class:`~zerogap.errors.UserError` naming the setting.
    """
    import numpy as np

    from zerogap.uncertainty import allocate_samples

    inputs = plan_inputs(study, s, repeat, pilots)
    kept = recorded_plan(path, inputs)
    if kept is not None:
        return kept
    ids = [q.id for q in s.questions]
    # Not an input: a strategy added later samples at the plan it finds, reference included.
    strategies = sampled_strategies(study, s)
    clean = _counts(repeat, ids)
    pilot = [_counts(run, ids) for run in pilots.values()]
    try:
        plan = allocate_samples(
            clean[0], clean[1],
            np.stack([c for c, _ in pilot]) if pilot else None,
            np.stack([m for _, m in pilot]) if pilot else None,
            _joint(list(pilots.values()), ids) if pilot else None,
            budget=study.budget, target_half_width=study.target_half_width,
            names=list(pilots), bins=inputs["bins"], level=study.level,
            min_samples=study.min_samples, max_samples=inputs["max_samples"],
            reference_samples=study.m, reference_strategies=strategies)
    except ValueError as err:
        raise UserError(f"setting {s.spec.name}: {err}") from None
    recorded = AllocationPlan(inputs, {q: int(m) for q, m in zip(ids, plan.samples, strict=True)},
                              plan.level, plan.half_widths, plan.uniform_samples,
                              {q: int(r) for q, r in zip(ids, plan.reference, strict=True)},
                              strategies)
    write_allocation(path, recorded)
    return recorded


def _counts(run_dir: Path, ids: Sequence[str]):
    """(correct, samples) of ``ids`` in ``run_dir``, each (N,), under the run's readout."""
    import numpy as np

    from zerogap.readout import run_counts
    from zerogap.store import RunStore

    with RunStore(run_dir, create=False) as store:
        rows = {r["id"]: r for r in run_counts(store)}
    return (np.array([rows[q]["correct"] for q in ids]),
            np.array([rows[q]["samples"] for q in ids]))


def _joint(runs: Sequence[Path], ids: Sequence[str]):
    """(K, K, N) sample indices at which both of two pilots solved each question, or None when
    a pilot's readout is not its plain samples (a filter's kept ones are not paired by index).

    The pilots sample on one seed, so their j-th samples share noise until a strategy
    intervenes: :func:`~zerogap.uncertainty.allocate_samples` reads that from these counts."""
    import numpy as np

    from zerogap.readout import readout_of
    from zerogap.store import RunStore

    index = {q: i for i, q in enumerate(ids)}
    outcomes = []
    for run in runs:
        with RunStore(run, create=False) as store:
            if readout_of(store.config()) != "plain":
                return None
            rows = [(index[r.question_id], r.sample, int(r.correct)) for r in store.samples()
                    if r.question_id in index]
        outcomes.append({(q, j): c for q, j, c in rows})
    joint = np.zeros((len(runs), len(runs), len(ids)), dtype=np.int64)
    for a, first in enumerate(outcomes):
        for b, second in enumerate(outcomes):
            for (q, j), c in first.items():
                joint[a, b, q] += c * second.get((q, j), 0)
    return joint


def shortfall(run_dir: Path, plan: Mapping[str, int]) -> tuple[int, int]:
    """``(questions, samples)`` that ``run_dir`` lacks of ``plan`` (question id -> m)."""
    from zerogap.store import DB_NAME, RunStore

    stored: dict[str, int] = {}
    if (run_dir / DB_NAME).exists():
        with RunStore(run_dir, create=False) as store:
            stored = store.sample_counts()
    lacking = [m - stored.get(q, 0) for q, m in plan.items() if stored.get(q, 0) < m]
    return len(lacking), sum(lacking)


def samples_drawn(plan: AllocationPlan, folder: Path, runs: SettingRuns) -> dict[str, int]:
    """Samples each run of an allocated setting holds, by label (greedy decodes and filters,
    which draw none of their own, left out; controls as ``"LABEL on the clean model"``), and
    ``"pilot"``: the pilots' sum (``folder``: the study's run folder)."""
    from zerogap.store import RunStore

    def drawn(run_dir: Path) -> int | None:
        with RunStore(run_dir, create=False) as store:
            if "samples_of" in store.config():
                return None
            return sum(store.sample_counts().values())

    named = runs.scored()
    named.update({f"{label} on the clean model": d for label, d in runs.controls.items()})
    out = {label: n for label, d in named.items() if (n := drawn(d)) is not None}
    pilot = plan.inputs.get("pilot") or {"runs": {}}
    out["pilot"] = sum(drawn(folder / name) or 0 for name in pilot["runs"].values())
    return out


def shift_record(plan: AllocationPlan, out: Path, clean: str, strategies: Mapping[str, str],
                 level: float) -> dict[str, dict[str, float | None]]:
    """Each strategy's shift of its expected SA-PPG at ``plan`` from uniform m
    (:func:`~zerogap.analysis.allocation.plan_shifts`), read from the counts files the study
    exported (paths relative to the study folder ``out``), for study.json."""
    from zerogap.analysis.allocation import plan_shifts
    from zerogap.io.counts import read_counts

    reference = read_counts(out / clean)
    runs = {label: read_counts(out / path).aligned_to(reference)
            for label, path in strategies.items()}
    return plan_shifts(plan, reference, runs, int(plan.inputs["bins"]), level)
