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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from zerogap.analysis.report import slug
from zerogap.analysis.score import REPEAT
from zerogap.engine.base import DEFAULT_BACKEND
from zerogap.store import PER_QUESTION
from zerogap.strategies import PLAIN, strategy_class
from zerogap.study.allocation import PILOT_SEED, plan_inputs, recorded_plan, shortfall
from zerogap.study.checks import ranks_current
from zerogap.study.settings import Setting
from zerogap.study.spec import StudySpec

if TYPE_CHECKING:
    from zerogap.strategies import Strategy


def _digest(fields_: dict) -> str:
    text = json.dumps(fields_, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class Job:
    """One resumable unit of a study: a sampling run, greedy decodes, a filter over another
    run's samples (TED), neuron location, the design checks, Figure 1's ranks, or an allocated
    study's plan.

    ``greedy_dir`` holds the greedy decodes of ``role``'s model that the strategy reads;
    ``source`` is the run a filter reads its samples from; ``built`` is the strategy named by
    ``strategy`` and ``options`` where the setting built it already (None: built at its run).
    ``m`` is a sampling run's samples per question, unless ``allocation`` names the plan
    (:mod:`zerogap.study.allocation`) that gives each question its own (a filter over such a
    run names it too); ``pilots`` are the runs a plan reads beside the second clean batch.
    ``reads`` lists the other jobs' outputs (run directories, files) this one opens: it starts
    only after the jobs that write them (:func:`zerogap.study.workers.run_side_by_side`).
    ``questions`` are the ones it decodes where they are not the setting's (greedy decodes
    covering the calibration questions too); ``calibrated``: its strategy takes settings from
    the greedy decodes of the setting's calibration questions when it starts
    (:meth:`~zerogap.strategies.Strategy.calibration_settings`).
    """

    kind: str  # "sample" | "greedy" | "filter" | "neurons" | "design" | "ranks" | "allocate"
    label: str
    role: str  # whose model: "clean" | "contaminated"
    run_dir: Path
    strategy: str = PLAIN
    options: dict = field(default_factory=dict)
    seed: int = 0
    greedy_dir: Path | None = None
    source: Path | None = None
    built: Strategy | None = None
    todo: int = 0
    rows: int = 0
    reads: tuple[Path, ...] = ()
    m: int = 1
    allocation: Path | None = None
    pilots: dict[str, Path] = field(default_factory=dict)
    questions: list | None = None
    calibrated: bool = False

    def ids(self, s: Setting) -> set[str]:
        """The ids of the questions this job of setting ``s`` covers."""
        return {q.id for q in (s.questions if self.questions is None else self.questions)}


def _missing(run_dir: Path, ids: set[str], greedy: bool) -> int:
    from zerogap.store import DB_NAME, RunStore

    if not (run_dir / DB_NAME).exists():
        return len(ids)
    with RunStore(run_dir, create=False) as store:  # also refuses a foreign file up front
        done = store.completed_greedy() if greedy else store.completed_questions()
    return len(ids - done)


def plan_setting(study: StudySpec, s: Setting, out: Path, dtype: str = "float32"
                 ) -> tuple[list[Job], dict[str, Path], dict[str, Path]]:
    """The jobs of one setting in execution order, each strategy label's run dir, and each
    control's (a strategy applied to the clean model) run dir.

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
    ids = {q.id for q in s.questions}
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
    decoded = s.greedy_questions
    jobs = [
        Job("greedy", "clean greedy", "clean", greedy["clean"], built=s.plain,
            questions=decoded),
        Job("greedy", "contaminated greedy", "contaminated", greedy["contaminated"],
             built=s.plain, questions=decoded),
        Job("sample", "clean", "clean", run_dir("clean", spec.clean, seed=study.seed,
                                                 **sampling(study.m)), seed=study.seed,
             greedy_dir=greedy["clean"], built=s.plain, m=study.m),
        Job("sample", REPEAT, "clean", run_dir("clean", spec.clean, seed=study.seed + 1,
                                                **sampling(study.m)), seed=study.seed + 1,
             greedy_dir=greedy["clean"], built=s.plain, m=study.m),
    ]
    dirs: dict[str, Path] = {"clean": jobs[2].run_dir, REPEAT: jobs[3].run_dir,
                             "greedy": greedy["contaminated"], "clean greedy": greedy["clean"]}
    neurons = out / "neurons" / (_digest({
        "models": [spec.base, spec.contaminated, spec.clean], **task_id,
        "leaked": sorted(q.id for q in s.located), "calibration": [q.id for q in s.calibration],
        "block": study.neuron_block, "candidates": study.neuron_candidates,
        "max_new_tokens": study.max_new_tokens,
    }) + ".json")

    def strategy_job(label: str, role: str, plain: Path | None, *, seed: int = study.seed + 2,
                     m: int = study.m, allocation: Path | None = None, shown: str = ""
                     ) -> Job | None:
        name, options = s.strategies[label]
        chosen = strategy_class(name)
        if not chosen.samples_model:
            return None
        model = getattr(spec, role)
        named = options
        if chosen.needs_neurons:
            if not any(job.kind == "neurons" for job in jobs):
                jobs.append(Job("neurons", f"{name} neurons", "contaminated", neurons))
            # The run records the list's absolute path; its name (a digest) names the run.
            options = chosen.neuron_settings(str(neurons.resolve()), spec.base)
            named = chosen.neuron_settings(neurons.name, spec.base)
        calibrated = label in s.calibrated
        if calibrated:  # set from the calibration questions' decodes: named by that rule
            named = {**options, **dict.fromkeys(chosen.calibration_records, "calibration")}
        shown = shown or (label if role == "contaminated" else f"{label} on the clean model")
        if chosen.filters_only and plain is not None:
            # A filter holds its source's samples: allocated where its source is.
            return Job("filter", shown, role,
                        run_dir(slug(name), model, strategy=name, options=named,
                                samples_of=plain.name),
                        strategy=name, options=options, greedy_dir=greedy[role], source=plain,
                        built=s.built.get(label),
                        allocation=allocation if plain in allocated else None)
        path = run_dir(slug(name), model, strategy=name, options=named, seed=seed,
                       **sampling(m if allocation is None else PER_QUESTION))
        if allocation is not None:
            allocated.add(path)
        return Job("sample", shown, role, path, strategy=name, options=options, seed=seed,
                    greedy_dir=greedy[role], built=s.built.get(label), m=m,
                    allocation=allocation, calibrated=calibrated)

    allocated: set[Path] = set()  # the runs sampled at the plan's m
    labels = study.labels()
    # Identity first: the design checks read it before any strategy samples (and a filter
    # reads identity's run).
    in_order = sorted(labels, key=lambda label: label != PLAIN)
    allocation = None
    if study.allocated:
        allocation = out / "allocation" / f"{slug(spec.name)}.json"
        pilots: dict[str, Path] = {}
        for label in in_order if study.pilot else ():
            job = strategy_job(label, "contaminated", pilots.get(PLAIN),
                               seed=study.seed + PILOT_SEED, m=study.pilot,
                               shown=f"{label} pilot")
            if job is not None:
                jobs.append(job)
                pilots[label] = job.run_dir
        jobs.append(Job("allocate", "allocation", "clean", allocation, pilots=pilots))
    made: dict[str, Path] = {}
    for label in in_order:
        job = strategy_job(label, "contaminated", made.get(PLAIN), allocation=allocation)
        if job is not None:
            jobs.append(job)
            made[label] = job.run_dir
        if label == PLAIN:
            jobs.append(Job("design", "design checks", "contaminated",
                             out / "design" / f"{slug(spec.name)}.json"))
    dirs.update({label: made[label] for label in labels if label in made})  # table order
    jobs.append(Job("ranks", "Figure 1 ranks", "contaminated",
                    out / "ranks" / f"{slug(spec.name)}.json"))
    controls: dict[str, Path] = {}
    for label in study.control_labels():
        job = strategy_job(label, "clean", dirs[REPEAT], allocation=allocation)
        if job is not None:
            jobs.append(job)
            controls[label] = job.run_dir
    _schedule(jobs, dirs, ids, neurons, study, s)
    return jobs, dirs, controls


def _schedule(jobs: list[Job], dirs: dict[str, Path], ids: set[str], neurons: Path,
              study: StudySpec, s: Setting) -> None:
    """Each job's ``reads`` (what it waits for), ``todo`` (questions it has left; 0: skipped)
    and ``rows`` (samples or decodes it has left, for the progress line)."""
    plan = None
    for job in jobs:
        if job.kind == "allocate":
            kept = recorded_plan(job.run_dir, plan_inputs(study, s, dirs[REPEAT], job.pilots))
            plan = None if kept is None else kept.samples
    # Until a plan is computed, an allocated run's rows are estimated at the budget (or m).
    estimate = round(study.budget or study.m)
    seen: set[Path] = set()
    for job in jobs:
        if job.kind == "design":
            job.reads = (dirs["clean"], dirs[REPEAT], dirs[PLAIN], dirs["greedy"],
                         dirs["clean greedy"])
        elif job.kind == "neurons":
            job.reads = (dirs["greedy"],)
        elif job.kind == "ranks":
            job.reads = (dirs["clean greedy"],)
        elif job.kind == "allocate":
            job.reads = (dirs[REPEAT], *job.pilots.values())
        else:  # every sampling job opens its model's greedy store, even if it reads nothing
            located = strategy_class(job.strategy).needs_neurons
            job.reads = tuple(p for p in (job.greedy_dir, job.source, job.allocation,
                                          neurons if located else None) if p)
        if job.kind == "neurons":
            job.todo = 0 if job.run_dir.is_file() else 1
        elif job.kind == "design":
            job.todo = 1  # cheap, and it reads runs that may have grown: always recomputed
        elif job.kind == "ranks":
            job.todo = 0 if ranks_current(job.run_dir, s, dirs["clean greedy"]) else 1
        elif job.kind == "allocate":
            job.todo = int(plan is None)
        elif job.run_dir in seen:  # the same run twice (clean = contaminated): sampled once
            job.todo = 0
        elif job.allocation is not None:
            seen.add(job.run_dir)
            if plan is None:
                job.todo = len(ids)
                job.rows = len(ids) * estimate if job.kind == "sample" else 0
            else:
                job.todo, lacking = shortfall(job.run_dir, plan)
                job.rows = lacking if job.kind == "sample" else 0
        else:
            seen.add(job.run_dir)
            job.todo = _missing(job.run_dir, job.ids(s), job.kind == "greedy")
            job.rows = job.todo * (job.m if job.kind == "sample" else
                                   1 if job.kind == "greedy" else 0)
