"""Which jobs a study setting runs, in which order, in which run directories.

Run directories are named by the content of their configuration (:func:`plan_setting`), so a
rerun, a larger ``limit`` or an added strategy resumes instead of starting over, and runs that
two settings or two strategies share (greedy decodes, identity's samples that TED filters) are
made once. An allocated study's strategies are named with ``m = "per question"`` instead of
their m: whatever the budget, a strategy keeps one run, extended where a plan asks for more
(:mod:`zerogap.study.allocation`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from zerogap.analysis.score import REPEAT
from zerogap.engine.base import DEFAULT_BACKEND
from zerogap.io.files import slug
from zerogap.store import PER_QUESTION
from zerogap.strategies import PLAIN, strategy_class
from zerogap.study.allocation import PILOT_SEED, AllocateJob
from zerogap.study.checks import DesignJob, RanksJob
from zerogap.study.job import Job, Left, Planning, SettingRuns
from zerogap.study.kinds import added_kind
from zerogap.study.neurons import NeuronsJob
from zerogap.study.sampling import FilterJob, GreedyJob, SampleJob
from zerogap.study.settings import Setting
from zerogap.study.spec import StudySpec


def _digest(fields_: dict) -> str:
    text = json.dumps(fields_, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class SettingPlan:
    """A setting's jobs in execution order with what each has left (``left[i]`` is
    ``jobs[i]``'s), its run directories, and the files of its Figure 1 ranks and (an allocated
    study's) plan."""

    setting: Setting
    jobs: list[Job]
    left: list[Left]
    runs: SettingRuns
    ranks: Path
    allocation: Path | None = None

    def unfinished(self) -> list[Job]:
        """The jobs with something left to do, in order."""
        return [job for job, left in zip(self.jobs, self.left, strict=True) if left.todo]

    def by_label(self) -> dict[str, tuple[Job, Left]]:
        return {job.label: (job, left) for job, left in zip(self.jobs, self.left, strict=True)}


def plan_setting(study: StudySpec, s: Setting, out: Path, dtype: str = "float32"
                 ) -> SettingPlan:
    """The jobs of one setting in execution order, what each has left, and its run
    directories (each strategy label's, each control's: a strategy applied to the clean model).

    The greedy decodes come first: every sampling job opens its model's greedy store, read-only
    (jobs side by side share it; the strategies that need greedy decodes read them there).

    The backend and the weight dtype are part of a run's configuration: runs made otherwise
    get other directories (named as before for the HF engine in float32). Identity comes
    first, then the design checks (which read it), then the other strategies, then the
    controls. A strategy that samples nothing (All-Zero) gets no run: the report scores it
    from the clean counts. A filtering strategy (TED) reads the plain samples of its model
    (identity's run; for the clean model, its second batch) instead of sampling them again.
    An allocated study (``study.allocated``) samples each strategy's pilot (with
    ``study.pilot``) and computes its plan after the clean batches, before any strategy: the
    strategies and controls then sample at the plan's m per question.
    """
    spec = s.spec
    task_id = {"task": spec.task, "task_config": s.task.config(), "split": spec.task_split}
    if study.backend != DEFAULT_BACKEND:  # the default's runs are named as before backends
        task_id["backend"] = study.backend
    if dtype != "float32":
        task_id["dtype"] = dtype

    def sampling(m: int | str) -> dict:
        return {"m": m, "temperature": study.temperature, "max_new_tokens": study.max_new_tokens}

    def run_dir(kind: str, model: str, **extra) -> Path:
        return out / "runs" / f"{kind}-{_digest({'model': model, **task_id, **extra})}"

    greedy = {role: run_dir("greedy", getattr(spec, role),
                            greedy_max_new_tokens=study.max_new_tokens)
              for role in ("clean", "contaminated")}
    # An allocated study's clean reference batch samples at the plan's m per question (upward
    # from m), once the plan is computed from the second batch.
    allocation = out / "allocation" / f"{slug(spec.name)}.json" if study.allocated else None
    runs = SettingRuns(
        clean=run_dir("clean", spec.clean, seed=study.seed,
                      **sampling(study.m if allocation is None else PER_QUESTION)),
        repeat=run_dir("clean", spec.clean, seed=study.seed + 1, **sampling(study.m)),
        clean_greedy=greedy["clean"], contaminated_greedy=greedy["contaminated"])
    decoded = s.greedy_questions
    jobs: list[Job] = [
        GreedyJob("clean greedy", "clean", greedy["clean"], s.plain, questions=decoded),
        GreedyJob("contaminated greedy", "contaminated", greedy["contaminated"], s.plain,
                  questions=decoded),
        SampleJob(REPEAT, "clean", runs.repeat, PLAIN, {}, greedy["clean"], built=s.plain,
                  seed=study.seed + 1, m=study.m),
    ]
    neurons = out / "neurons" / (_digest({
        "models": [spec.base, spec.contaminated, spec.clean], **task_id,
        "leaked": sorted(q.id for q in s.located), "calibration": [q.id for q in s.calibration],
        "block": study.neuron_block, "candidates": study.neuron_candidates,
        "max_new_tokens": study.max_new_tokens,
    }) + ".json")
    located: list[NeuronsJob] = []

    def strategy_job(label: str, role: str, plain: Path | None, *, seed: int = study.seed + 2,
                     m: int = study.m, allocation: Path | None = None, shown: str = ""
                     ) -> Job | None:
        name, options = s.strategies[label]
        chosen = strategy_class(name)
        if not chosen.samples_model:
            return None
        model = getattr(spec, role)
        named = options
        patched = None
        if chosen.needs_neurons:
            if not located:
                located.append(NeuronsJob(f"{name} neurons", neurons))
                jobs.append(located[0])
            patched = neurons
            # The run records the list's absolute path; its name (a digest) names the run.
            options = chosen.neuron_settings(str(neurons.resolve()), spec.base)
            named = chosen.neuron_settings(neurons.name, spec.base)
        calibrated = label in s.calibrated
        if calibrated:  # set from the calibration questions' decodes: named by that rule
            named = {**options, **dict.fromkeys(chosen.calibration_records, "calibration")}
        shown = shown or (label if role == "contaminated" else f"{label} on the clean model")
        if chosen.filters_only and plain is not None:
            # A filter holds its source's samples: allocated where its source is.
            return FilterJob(shown, role,
                             run_dir(slug(name), model, strategy=name, options=named,
                                     samples_of=plain.name),
                             name, options, greedy[role], built=s.built.get(label),
                             allocation=allocation if plain in allocated else None,
                             neurons=patched, source=plain)
        path = run_dir(slug(name), model, strategy=name, options=named, seed=seed,
                       **sampling(m if allocation is None else PER_QUESTION))
        if allocation is not None:
            allocated.add(path)
        return SampleJob(shown, role, path, name, options, greedy[role],
                         built=s.built.get(label), allocation=allocation, neurons=patched,
                         seed=seed, m=m, calibrated=calibrated)

    allocated: set[Path] = set()  # the runs sampled at the plan's m
    labels = study.labels()
    # Identity first: the design checks read it before any strategy samples (and a filter
    # reads identity's run).
    in_order = sorted(labels, key=lambda label: label != PLAIN)
    reference = SampleJob("clean", "clean", runs.clean, PLAIN, {}, greedy["clean"],
                          built=s.plain, allocation=allocation, reference=True, seed=study.seed,
                          m=study.m)
    plan = None
    if allocation is None:
        jobs.append(reference)
    else:
        pilots: dict[str, Path] = {}
        for label in in_order if study.pilot else ():
            job = strategy_job(label, "contaminated", pilots.get(PLAIN),
                               seed=study.seed + PILOT_SEED, m=study.pilot,
                               shown=f"{label} pilot")
            if job is not None:
                jobs.append(job)
                pilots[label] = job.output
        allocate = AllocateJob("allocation", allocation, pilots)
        jobs.extend((allocate, reference))
        plan = allocate.recorded(study, s, runs)
    for label in in_order:
        job = strategy_job(label, "contaminated", runs.strategies.get(PLAIN),
                           allocation=allocation)
        if job is not None:
            jobs.append(job)
            runs.strategies[label] = job.output
        if label == PLAIN:
            jobs.append(DesignJob("design checks", out / "design" / f"{slug(spec.name)}.json"))
    runs.strategies = {label: runs.strategies[label] for label in labels
                       if label in runs.strategies}  # table order
    ranks = out / "ranks" / f"{slug(spec.name)}.json"
    jobs.append(RanksJob("Figure 1 ranks", ranks))
    for label in study.control_labels():
        job = strategy_job(label, "clean", runs.repeat, allocation=allocation)
        if job is not None:
            jobs.append(job)
            runs.controls[label] = job.output
    planning = Planning(study, s, runs, out, plan)
    for name in study.jobs:  # kinds of work the study adds, planned by their own classes
        jobs.extend(added_kind(name).plan(planning))
    return SettingPlan(s, jobs, [job.left(planning) for job in jobs], runs, ranks, allocation)
