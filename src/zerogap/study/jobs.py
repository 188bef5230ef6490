"""Running a setting's jobs, with models loaded once per slot.

:func:`run_jobs` hands a setting's unfinished jobs (:mod:`zerogap.study.plan`) to an executor
(:mod:`zerogap.study.executor`; local threads by default, :mod:`zerogap.study.workers`) as a
:class:`SettingJobs`, which runs one with :func:`run_job`: the job itself says how it runs
(:meth:`zerogap.study.job.Job.run`), on the slot's :class:`Models`. A :class:`SettingJobs` is
data: an executor may pickle it and run its jobs in other processes, where each loads its own
models.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zerogap.study.executor import Executor, Node, Slot
from zerogap.study.job import Job, JobContext, SettingRuns
from zerogap.study.progress import JobProgress, Tracker
from zerogap.study.settings import Setting
from zerogap.study.spec import SettingSpec, StudySpec

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions
    from zerogap.runs import LoadedEngine


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


def run_job(job: Job, study: StudySpec, s: Setting, models: Models, runs: SettingRuns,
            progress: JobProgress) -> None:
    """Run ``job`` of setting ``s`` on ``models`` (its slot's), resuming what it stored."""
    job.run(JobContext(study, s, runs, models, progress))


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
    runs: SettingRuns
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
            run_job(self.todo[item], self.study, self.setting, models, self.runs,
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
    ``tracker``, each timed job's time lands in ``seconds`` (an untimed job's first time, where
    it stands: :attr:`~zerogap.study.job.Job.first_time_stands`) and the fingerprints of the
    models loaded in ``fingerprints``."""
    if jobs.side_by_side:
        tracker.leave()  # the line shows the slots' stages from here
    gpus = engine_gpus(jobs.study.backend, jobs.options)

    def report(item: int, event: tuple) -> None:
        if event[0] != "ended":
            tracker.replay(event)
            return
        job, (took, loaded) = jobs.todo[item], event[1:]
        if job.timed or (job.first_time_stands and job.label not in seconds):
            seconds[job.label] = took
        fingerprints.update(loaded)
        tracker.job_done()

    nodes = [Node(job.output, job.reads(jobs.runs), job.label, job.gpus(gpus))
             for job in jobs.todo]
    executor.run(nodes, jobs, report=report, interrupted=tracker.stop)
