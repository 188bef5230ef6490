"""Running a setting's jobs: each job on the kind of run it is, with models loaded once per slot.

:func:`run_jobs` hands a setting's unfinished jobs (:mod:`zerogap.study.plan`) to an executor
(:mod:`zerogap.study.executor`; local threads by default, :mod:`zerogap.study.workers`) and
:func:`run_job` runs one: a sampling run or greedy decodes requested and prepared through
:mod:`zerogap.runs` (:class:`~zerogap.runs.RunRequest`, :func:`~zerogap.runs.prepare`) on the
slot's loaded model, a filter over another run's samples, neuron location or the design checks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from zerogap.analysis.allocation import read_allocation
from zerogap.analysis.score import REPEAT
from zerogap.errors import UserError
from zerogap.study.allocation import allocate_setting
from zerogap.study.checks import design_checks
from zerogap.study.executor import Executor, Node, Slot
from zerogap.study.neurons import locate_for_setting
from zerogap.study.plan import Job
from zerogap.study.progress import Tracker, counting_store
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

    def __init__(self, spec: SettingSpec, backend: str, options: EngineOptions,
                 tracker: Tracker):
        self.spec, self.backend, self.options, self.tracker = spec, backend, options, tracker
        self.loaded: dict[str, LoadedEngine] = {}  # model spec -> its engine
        self.prints: dict[str, str] = {}  # role -> fingerprint

    def engine(self, role: str) -> LoadedEngine:
        """The engine of ``role``'s model (``"clean"``, ``"contaminated"``), loaded now if
        this slot has not loaded it yet."""
        from zerogap.engine.base import backend_capabilities
        from zerogap.runs import start_engine

        model = getattr(self.spec, role)
        if model not in self.loaded:
            if backend_capabilities(self.backend).exclusive:
                self.close()
            self.tracker.stage(f"{self.spec.name}: loading the {role} model")
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
            dirs: dict[str, Path], tracker: Tracker) -> None:
    """Run ``job`` of setting ``s`` on ``models`` (its slot's), resuming what it stored."""
    from zerogap.engine.base import SamplingSpec
    from zerogap.runs import GreedyRun, RunRequest, build_strategy, prepare, run_filter
    from zerogap.store import RunStore

    if job.kind == "neurons":
        locate_for_setting(job.run_dir, study, s, models.engine, dirs["greedy"], tracker)
        return
    if job.kind == "allocate":
        tracker.stage(f"{s.spec.name}: allocating the strategies' samples")
        allocate_setting(job.run_dir, study, s, dirs[REPEAT], job.pilots)
        return
    if job.kind == "design":
        tracker.stage(f"{s.spec.name}: design checks")
        criteria = design_checks(job.run_dir, s, dirs)
        met = sum(c.met for c in criteria)
        tracker.stage(f"{s.spec.name}: design checks: {met} of {len(criteria)} met")
        return
    engine = models.engine(job.role)
    tracker.stage(f"{s.spec.name}: {job.label}")
    # A strategy the setting did not build (its neurons are located by the study) is built
    # now; the study held its class against the backend before anything ran.
    strategy = job.built or build_strategy(job.strategy, job.options)
    if job.kind == "filter":  # no sampling: rows are not the study's progress
        assert job.source is not None and job.greedy_dir is not None
        with RunStore(job.run_dir) as store, RunStore(job.source, create=False) as source, \
                RunStore(job.greedy_dir, create=False) as greedy_store:
            run_filter(source, store, greedy_store, engine.loaded.tokenizer, strategy=strategy)
        return
    greedy = job.kind == "greedy"
    spec = (SamplingSpec(m=1, max_new_tokens=study.max_new_tokens) if greedy else
            SamplingSpec(m=job.m, temperature=study.temperature,
                         max_new_tokens=study.max_new_tokens, seed=job.seed))
    samples = None if job.allocation is None else read_allocation(job.allocation).samples
    run = prepare(RunRequest(getattr(s.spec, job.role), s.task, s.spec.task_split,
                             tuple(s.questions), strategy, spec, greedy=greedy,
                             backend=models.backend, engine=models.options, samples=samples),
                  engine)
    try:
        with counting_store(job.run_dir, tracker) as store:
            if isinstance(run, GreedyRun):
                run.into(store)
                return
            assert job.greedy_dir is not None
            # Read-only: the greedy job wrote every decode before this job started, and jobs
            # side by side may read the same greedy store (a writer would hold its lock).
            with RunStore(job.greedy_dir, create=False) as greedy_store:
                run.into(store, greedy_store=greedy_store)
    finally:
        engine.release_sources()  # a patch source (shortcut's base) only lives for its run


def study_workers(workers: int | None, backend: str, device: str | None) -> int:
    """The study's worker count (:func:`~zerogap.study.run.evaluate`): ``workers`` checked
    (:class:`UserError` in one line), or the default for the device."""
    from zerogap.engine.base import backend_capabilities
    from zerogap.study.workers import default_workers

    exclusive = backend_capabilities(backend).exclusive
    if workers is None:
        from zerogap.models import check_device

        return default_workers(check_device(device).split(":")[0], exclusive)
    if workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    if workers > 1 and exclusive:
        raise UserError(f"--workers {workers}: the {backend} backend holds one engine at a "
                        "time; use --workers 1")
    return workers


def run_jobs(todo: Sequence[Job], study: StudySpec, s: Setting, pool: Sequence[Models],
             dirs: dict[str, Path], tracker: Tracker, seconds: dict[str, float],
             executor: Executor) -> None:
    """Run a setting's unfinished jobs through ``executor``, a job in slot ``i`` on the
    models of ``pool[i]``; each job's time lands in ``seconds`` (the design checks' first
    time stands: they run at every invocation)."""
    side_by_side = executor.width > 1
    if side_by_side:
        tracker.leave()  # the line shows the slots' stages from here

    def run(item: int, slot: Slot) -> None:
        job = todo[item]
        tracker.on_event(slot.event)
        started = time.monotonic()
        try:
            run_job(job, study, s, pool[slot.index], dirs, tracker)
        finally:
            if side_by_side:
                tracker.leave()
        if job.kind != "design" or job.label not in seconds:
            seconds[job.label] = round(time.monotonic() - started, 1)
        tracker.job_done()

    executor.run([Node(job.run_dir, job.reads) for job in todo], run, interrupted=tracker.stop)
