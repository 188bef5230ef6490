"""Running a setting's jobs: models loaded once per worker, each job on its own kind of run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.errors import UserError
from zerogap.study.checks import design_checks
from zerogap.study.neurons import locate_neurons
from zerogap.study.plan import Job
from zerogap.study.progress import Tracker, counting_store
from zerogap.study.settings import Setting
from zerogap.study.spec import SettingSpec, StudySpec

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions


class Models:
    """Models of one setting, each loaded once when first needed (by spec: a model that is
    both clean and contaminated loads once), with the backend that samples it.

    A vLLM engine claims most of a GPU's memory, so with vLLM only one is alive at a time:
    loading another model closes the previous one (the jobs use the clean model first, then
    the contaminated one, so each loads once per setting).
    """

    def __init__(self, spec: SettingSpec, backend: str, engine: EngineOptions,
                 tracker: Tracker):
        self.spec, self.backend, self.engine, self.tracker = spec, backend, engine, tracker
        self.loaded: dict[str, tuple[Any, Any]] = {}  # model spec -> (LoadedModel, Backend)
        self.prints: dict[str, str] = {}  # role -> fingerprint

    def _load(self, role: str) -> tuple[Any, Any]:
        from zerogap.engine.base import backend_capabilities, load_engine

        model = getattr(self.spec, role)
        if model not in self.loaded:
            if backend_capabilities(self.backend).exclusive:
                self.close()
            self.tracker.stage(f"{self.spec.name}: loading the {role} model")
            self.loaded[model] = load_engine(model, self.backend, self.engine)
        self.prints[role] = self.loaded[model][0].fingerprint
        return self.loaded[model]

    def __call__(self, role: str):
        return self._load(role)[0]

    def backend_of(self, role: str):
        return self._load(role)[1]

    def fingerprints(self) -> dict[str, str]:
        return dict(self.prints)

    def close(self) -> None:
        """Release every loaded model (vLLM engines are shut down)."""
        for _, backend in self.loaded.values():
            backend.close()
        self.loaded.clear()


def run_job(job: Job, study: StudySpec, s: Setting, models: Models,
             dirs: dict[str, Path], tracker: Tracker) -> None:
    from zerogap.engine.base import SamplingSpec
    from zerogap.runs import run_filter, run_greedy, run_sample
    from zerogap.store import RunStore

    if job.kind == "neurons":
        locate_neurons(job.run_dir, study, s, models, dirs["greedy"], tracker)
        return
    if job.kind == "design":
        tracker.stage(f"{s.spec.name}: design checks")
        criteria = design_checks(job.run_dir, s, dirs)
        met = sum(c.met for c in criteria)
        tracker.stage(f"{s.spec.name}: design checks: {met} of {len(criteria)} met")
        return
    loaded, backend = models(job.role), models.backend_of(job.role)
    tracker.stage(f"{s.spec.name}: {job.label}")
    if job.kind == "filter":  # no sampling: rows are not the study's progress
        assert job.source is not None and job.greedy_dir is not None
        with RunStore(job.run_dir) as store, RunStore(job.source, create=False) as source, \
                RunStore(job.greedy_dir, create=False) as greedy_store:
            run_filter(source, store, greedy_store, loaded.tokenizer,
                       strategy=job.built or job.strategy, strategy_options=job.options)
        return
    with counting_store(job.run_dir, tracker) as store:
        if job.kind == "greedy":
            run_greedy(loaded, s.task, s.questions, store, split=s.spec.task_split,
                       max_new_tokens=study.max_new_tokens, strategy=job.built or job.strategy,
                       backend=backend)
            return
        settings = SamplingSpec(m=study.m, temperature=study.temperature,
                                max_new_tokens=study.max_new_tokens, seed=job.seed)
        assert job.greedy_dir is not None
        # Read-only: the greedy job wrote every decode before this job started, and jobs side
        # by side may read the same greedy store (a writer would hold its lock).
        with RunStore(job.greedy_dir, create=False) as greedy_store:
            run_sample(loaded, s.task, s.questions, store, settings, split=s.spec.task_split,
                       strategy=job.built or job.strategy, strategy_options=job.options,
                       greedy_store=greedy_store, backend=backend)


def study_workers(workers: int | None, backend: str, device: str | None) -> int:
    """The study's worker count (:func:`evaluate`): ``workers`` checked (:class:`UserError`
    in one line), or the default for the device."""
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
              dirs: dict[str, Path], tracker: Tracker, seconds: dict[str, float]) -> None:
    """Run a setting's unfinished jobs, one per model set of ``pool`` at a time; with more
    than one, each worker thread gets an even share of torch's threads among the jobs running,
    retaken at each of its events (a stored question, a neuron decode)."""
    from zerogap.study.workers import run_side_by_side, threads_per_worker

    side_by_side = len(pool) > 1
    if side_by_side:
        import torch

        saved = torch.get_num_threads()
        tracker.leave()  # the line shows the workers' stages from here

    def run(item: int, worker: int, running: Callable[[], int]) -> None:
        job = todo[item]
        if side_by_side:
            def take_share() -> None:
                share = threads_per_worker(running(), saved)
                if torch.get_num_threads() != share:
                    torch.set_num_threads(share)  # the calling thread's own OpenMP count

            take_share()
            tracker.on_event(take_share)
        started = time.monotonic()
        try:
            run_job(job, study, s, pool[worker], dirs, tracker)
        finally:
            if side_by_side:
                tracker.leave()
        if job.kind != "design" or job.label not in seconds:
            seconds[job.label] = round(time.monotonic() - started, 1)
        tracker.job_done()

    try:
        run_side_by_side([job.run_dir for job in todo], [job.reads for job in todo], run,
                         len(pool), interrupted=tracker.stop)
    finally:
        if side_by_side:
            torch.set_num_threads(saved)  # MKL's count is process-wide: give it back
