"""Running a setting's jobs: each job on the kind of run it is, with models loaded once per slot.

:func:`run_jobs` hands a setting's unfinished jobs (:mod:`zerogap.study.plan`) to an executor
(:mod:`zerogap.study.executor`; local threads by default, :mod:`zerogap.study.workers`) as a
:class:`SettingJobs`, which runs one with :func:`run_job`: a sampling run or greedy decodes
requested and prepared through :mod:`zerogap.runs` (:class:`~zerogap.runs.RunRequest`,
:func:`~zerogap.runs.prepare`) on the slot's loaded model, a filter over another run's samples,
neuron location, the design checks or Figure 1's ranks. A :class:`SettingJobs` is data: an
executor may pickle it and run its jobs in other processes, where each loads its own models.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.analysis.allocation import read_allocation
from zerogap.analysis.score import REPEAT
from zerogap.strategies import strategy_class
from zerogap.study.allocation import allocate_setting
from zerogap.study.checks import design_checks, figure_ranks
from zerogap.study.executor import Executor, Node, Slot
from zerogap.study.neurons import locate_for_setting
from zerogap.study.plan import Job
from zerogap.study.progress import JobProgress, Tracker, counting_store
from zerogap.study.settings import Setting
from zerogap.study.spec import SettingSpec, StudySpec

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions
    from zerogap.runs import LoadedEngine


# Jobs whose time is not the study's sampling work: the design checks (their first time is
# kept, as they run at every invocation) and Figure 1's ranks (recomputed only when their
# inputs change, so a rerun that recomputes them keeps the recorded wall and job times).
UNTIMED = ("design", "ranks")


class Models:
    """The models of one setting for one slot, each loaded once when first needed (by spec: a
    model that is both clean and contaminated loads once) on the study's backend, with
    ``options`` as :func:`zerogap.runs.check_engine` returned them.

    A vLLM engine claims most of a GPU's memory, so with vLLM only one is alive at a time:
    loading another model closes the previous one (the jobs use the clean model first, then
    the contaminated one, so each loads once per setting).
    """

    def __init__(self, spec: SettingSpec, backend: str, options: EngineOptions):
        self.spec, self.backend, self.options = spec, backend, options
        self.loaded: dict[str, LoadedEngine] = {}  # model spec -> its engine
        self.prints: dict[str, str] = {}  # role -> fingerprint

    def engine(self, role: str, progress: JobProgress) -> LoadedEngine:
        """The engine of ``role``'s model (``"clean"``, ``"contaminated"``), loaded now if
        this slot has not loaded it yet (a stage of the job's ``progress``)."""
        from zerogap.engine.base import backend_capabilities
        from zerogap.runs import start_engine

        model = getattr(self.spec, role)
        if model not in self.loaded:
            if backend_capabilities(self.backend).exclusive:
                self.close()
            progress.stage(f"{self.spec.name}: loading the {role} model")
            self.loaded[model] = start_engine(model, self.backend, self.options)
        self.prints[role] = self.loaded[model].loaded.fingerprint
        return self.loaded[model]

    def fingerprints(self) -> dict[str, str]:
        return dict(self.prints)

    def close(self) -> None:
        """Release every loaded model (vLLM engines are shut down)."""
        for engine in self.loaded.values():
            engine.close()
        self.loaded.clear()


def run_job(job: Job, study: StudySpec, s: Setting, models: Models,
            dirs: dict[str, Path], progress: JobProgress) -> None:
    """Run ``job`` of setting ``s`` on ``models`` (its slot's), resuming what it stored."""
    from zerogap.engine.base import SamplingSpec
    from zerogap.runs import GreedyRun, RunRequest, build_strategy, prepare, run_filter
    from zerogap.store import RunStore

    engine = partial(models.engine, progress=progress)
    if job.kind == "neurons":
        locate_for_setting(job.run_dir, study, s, engine, dirs["greedy"], progress)
        return
    if job.kind == "ranks":
        figure_ranks(job.run_dir, s, engine, dirs["clean greedy"], progress)
        return
    if job.kind == "allocate":
        progress.stage(f"{s.spec.name}: allocating the strategies' samples")
        allocate_setting(job.run_dir, study, s, dirs[REPEAT], job.pilots)
        return
    if job.kind == "design":
        progress.stage(f"{s.spec.name}: design checks")
        criteria = design_checks(job.run_dir, s, dirs)
        met = sum(c.met for c in criteria)
        progress.stage(f"{s.spec.name}: design checks: {met} of {len(criteria)} met")
        return
    loaded = engine(job.role)
    progress.stage(f"{s.spec.name}: {job.label}")
    # A strategy the setting did not build (its neurons are located by the study, or its
    # settings come from the calibration questions' greedy decodes) is built now; the study
    # held its class against the backend before anything ran.
    options = job.options
    if job.calibrated:
        assert job.greedy_dir is not None
        options = {**options, **calibration_settings(job.strategy, options, job.greedy_dir, s)}
    strategy = job.built or build_strategy(job.strategy, options)
    if job.kind == "filter":  # no sampling: rows are not the study's progress
        assert job.source is not None and job.greedy_dir is not None
        with RunStore(job.run_dir) as store, RunStore(job.source, create=False) as source, \
                RunStore(job.greedy_dir, create=False) as greedy_store:
            run_filter(source, store, greedy_store, loaded.loaded.tokenizer, strategy=strategy)
        return
    greedy = job.kind == "greedy"
    spec = (SamplingSpec(m=1, max_new_tokens=study.max_new_tokens) if greedy else
            SamplingSpec(m=job.m, temperature=study.temperature,
                         max_new_tokens=study.max_new_tokens, seed=job.seed))
    samples = None if job.allocation is None else read_allocation(job.allocation).samples
    questions = s.questions if job.questions is None else job.questions
    run = prepare(RunRequest(getattr(s.spec, job.role), s.task, s.spec.task_split,
                             tuple(questions), strategy, spec, greedy=greedy,
                             backend=models.backend, engine=models.options, samples=samples),
                  loaded)
    try:
        with counting_store(job.run_dir, progress) as store:
            if isinstance(run, GreedyRun):
                run.into(store)
                return
            assert job.greedy_dir is not None
            # Read-only: the greedy job wrote every decode before this job started, and jobs
            # side by side may read the same greedy store (a writer would hold its lock).
            with RunStore(job.greedy_dir, create=False) as greedy_store:
                run.into(store, greedy_store=greedy_store)
    finally:
        loaded.release_sources()  # a patch source (shortcut's base) only lives for its run


def calibration_settings(name: str, options: dict[str, Any], greedy_dir: Path, s: Setting
                         ) -> dict[str, Any]:
    """What strategy ``name`` takes from the greedy decodes in ``greedy_dir`` of setting
    ``s``'s calibration questions, by the rule its ``options`` state
    (:meth:`~zerogap.strategies.Strategy.calibration_settings`; the greedy job decoded them,
    :attr:`~zerogap.study.settings.Setting.greedy_questions`)."""
    from zerogap.store import RunStore

    with RunStore(greedy_dir, create=False) as store:
        decoded = store.greedy()
    missing = [q.id for q in s.calibration if q.id not in decoded]
    if missing:
        raise RuntimeError(f"{greedy_dir} lacks the greedy decodes of {len(missing)} "
                           f"calibration questions (first: {missing[0]})")
    return strategy_class(name).calibration_settings([decoded[q.id] for q in s.calibration],
                                                     options)


@dataclass
class SettingJobs:
    """A setting's unfinished jobs as an executor runs them: ``jobs(i, slot)`` runs
    ``todo[i]`` and reports its progress, then ``("ended", seconds, fingerprints)``: its wall
    time and the fingerprints of the models it loaded, by role (:func:`run_jobs` records
    them).

    ``pool`` holds this process's models, one :class:`Models` per slot, so that the jobs of a
    slot load each model once; it is not pickled, and a job run in another process loads its
    own models and closes them when it ends.
    """

    todo: Sequence[Job]
    study: StudySpec
    setting: Setting
    dirs: dict[str, Path]
    options: EngineOptions
    side_by_side: bool
    pool: Sequence[Models] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "pool": None}  # loaded models stay in their process

    def __call__(self, item: int, slot: Slot) -> None:
        own = self.pool is None
        models = Models(self.setting.spec, self.study.backend, self.options) \
            if self.pool is None else self.pool[slot.index]
        started = time.monotonic()
        try:
            run_job(self.todo[item], self.study, self.setting, models, self.dirs,
                    JobProgress(slot))
        finally:
            if own:
                models.close()
            if self.side_by_side:
                slot.report("leave")
        slot.report("ended", round(time.monotonic() - started, 1), models.fingerprints())


def engine_gpus(backend: str, options: EngineOptions) -> float:
    """GPUs one job's engine needs: vLLM's tensor-parallel times pipeline-parallel size, one
    for the HF engine on a CUDA device, none on a CPU."""
    from zerogap.engine.base import backend_capabilities

    if not backend_capabilities(backend).device:  # vLLM places its own model
        return float(options.tensor_parallel_size * options.pipeline_parallel_size)
    return 1.0 if (options.device or "cpu").startswith("cuda") else 0.0


def run_jobs(jobs: SettingJobs, tracker: Tracker, seconds: dict[str, float],
             fingerprints: dict[str, str], executor: Executor) -> None:
    """Run a setting's unfinished ``jobs`` through ``executor``: their events feed
    ``tracker``, each job's time lands in ``seconds`` (the design checks' first time stands:
    they run at every invocation; Figure 1's ranks are not timed) and the fingerprints of the
    models loaded in ``fingerprints``."""
    if jobs.side_by_side:
        tracker.leave()  # the line shows the slots' stages from here
    gpus = engine_gpus(jobs.study.backend, jobs.options)

    def report(item: int, event: tuple) -> None:
        if event[0] != "ended":
            tracker.replay(event)
            return
        job, (took, loaded) = jobs.todo[item], event[1:]
        if job.kind not in UNTIMED or (job.kind == "design" and job.label not in seconds):
            seconds[job.label] = took
        fingerprints.update(loaded)
        tracker.job_done()

    nodes = [Node(job.run_dir, job.reads, job.label, 0.0 if job.kind == "design" else gpus)
             for job in jobs.todo]
    executor.run(nodes, jobs, report=report, interrupted=tracker.stop)
