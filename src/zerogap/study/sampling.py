"""The study's runs as jobs (:mod:`zerogap.study.job`): a model's greedy decodes, a strategy's
sampling run, and a filter over another run's samples (TED).

Each is requested and prepared through :mod:`zerogap.runs` (:class:`~zerogap.runs.RunRequest`,
:func:`~zerogap.runs.prepare`) on its slot's loaded model and stored in its run directory; a
rerun samples only the questions (or, at a plan's m per question, the samples) it lacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.strategies import PLAIN, strategy_class
from zerogap.study.job import Job, JobContext, Left, Planning, SettingRuns
from zerogap.study.kinds import register_job_kind
from zerogap.study.progress import counting_store

if TYPE_CHECKING:
    from zerogap.analysis.allocation import AllocationPlan
    from zerogap.runs import LoadedEngine
    from zerogap.strategies import Strategy
    from zerogap.study.settings import Setting


def _missing(run_dir: Path, ids: set[str], greedy: bool) -> int:
    """Questions of ``ids`` that ``run_dir`` has not stored (greedy decodes, or samples)."""
    from zerogap.store import DB_NAME, RunStore

    if not (run_dir / DB_NAME).exists():
        return len(ids)
    with RunStore(run_dir, create=False) as store:  # also refuses a foreign file up front
        done = store.completed_greedy() if greedy else store.completed_questions()
    return len(ids - done)


@register_job_kind("greedy")
@dataclass
class GreedyJob(Job):
    """``role``'s model's greedy decodes (``strategy``: the setting's plain strategy, None: built
    when the job runs), of
    ``questions`` where they are not the setting's (the calibration questions too)."""

    label: str
    role: str
    output: Path
    strategy: Strategy | None
    questions: list | None = None

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        return ()

    def left(self, planning: Planning) -> Left:
        if self.output in planning.seen:  # a model against itself: decoded once
            return Left()
        planning.seen.add(self.output)
        s = planning.setting
        ids = {q.id for q in (s.questions if self.questions is None else self.questions)}
        todo = _missing(self.output, ids, greedy=True)
        return Left(todo, rows=todo, questions=todo)

    def run(self, context: JobContext) -> None:
        from zerogap.engine.base import SamplingSpec
        from zerogap.runs import GreedyRun, build_strategy

        s, study = context.setting, context.study
        loaded = context.engine(self.role)
        context.progress.stage(f"{s.spec.name}: {self.label}")
        questions = s.questions if self.questions is None else self.questions
        spec = SamplingSpec(m=1, max_new_tokens=study.max_new_tokens)
        strategy = self.strategy or build_strategy(PLAIN, {})
        run = _prepare(context, loaded, self.role, questions, strategy, spec, greedy=True)
        try:
            assert isinstance(run, GreedyRun)
            with counting_store(self.output, context.progress) as store:
                run.into(store)
        finally:
            loaded.release_sources()


@dataclass
class _StrategyRun(Job):
    """What a sampling run and a filter share: strategy ``strategy`` with ``options`` on
    ``role``'s model, whose greedy decodes are in ``greedy_dir``; ``built`` is the strategy where
    the setting built it already (None: built when the job runs); ``allocation`` is the plan
    whose m per question the run holds (its clean reference batch's where ``reference``);
    ``neurons`` the neuron list its strategy patches."""

    label: str
    role: str
    output: Path
    strategy: str
    options: dict
    greedy_dir: Path
    built: Strategy | None = None
    allocation: Path | None = None
    neurons: Path | None = None
    reference: bool = False

    def planned(self, plan: AllocationPlan) -> dict[str, int]:
        """The m of each question this run holds under ``plan``."""
        return plan.reference_samples() if self.reference else plan.samples

    def _inputs(self) -> tuple[Path | None, ...]:
        return (self.greedy_dir, self.allocation, self.neurons)

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        return tuple(p for p in self._inputs() if p)

    def _left(self, planning: Planning, per_question: int | None) -> Left:
        """What is left, ``per_question`` rows each (None: a plan's m, or rows it draws none)."""
        if self.output in planning.seen:  # the same run twice (clean = contaminated)
            return Left()
        planning.seen.add(self.output)
        drawn = per_question is not None
        if self.allocation is None:
            todo = _missing(self.output, {q.id for q in planning.setting.questions}, False)
            return Left(todo, rows=todo * (per_question or 0), questions=todo if drawn else 0)
        from zerogap.study.allocation import shortfall

        if planning.plan is None:  # until a plan is computed, rows are estimated at the budget
            todo = len(planning.setting.questions)
            lacking = todo * round(planning.study.budget or planning.study.m)
        else:
            todo, lacking = shortfall(self.output, self.planned(planning.plan))
        return Left(todo, rows=lacking if drawn else 0, questions=todo if drawn else 0)

    def _strategy(self, context: JobContext, calibrated: bool) -> Strategy:
        """The strategy, built now where the setting did not (its neurons are located by the
        study, or its settings come from the calibration questions' greedy decodes); the study
        held its class against the backend before anything ran."""
        from zerogap.runs import build_strategy

        options = self.options
        if calibrated:
            options = {**options,
                       **calibration_settings(self.strategy, options, self.greedy_dir,
                                              context.setting)}
        return self.built or build_strategy(self.strategy, options)


@register_job_kind("sample")
@dataclass
class SampleJob(_StrategyRun):
    """A sampling run: ``m`` samples per question (a plan's where ``allocation`` names one) at
    seed ``seed``; ``calibrated``: the strategy takes settings from the greedy decodes of the
    setting's calibration questions when it starts."""

    seed: int = 0
    m: int = 1
    calibrated: bool = False

    def left(self, planning: Planning) -> Left:
        return self._left(planning, self.m)

    def run(self, context: JobContext) -> None:
        from zerogap.analysis.allocation import read_allocation
        from zerogap.engine.base import SamplingSpec
        from zerogap.runs import SampleRun
        from zerogap.store import RunStore

        s, study = context.setting, context.study
        loaded = context.engine(self.role)
        context.progress.stage(f"{s.spec.name}: {self.label}")
        strategy = self._strategy(context, self.calibrated)
        spec = SamplingSpec(m=self.m, temperature=study.temperature,
                            max_new_tokens=study.max_new_tokens, seed=self.seed)
        samples = (None if self.allocation is None
                   else self.planned(read_allocation(self.allocation)))
        run = _prepare(context, loaded, self.role, s.questions, strategy, spec, samples=samples)
        try:
            assert isinstance(run, SampleRun)
            # Read-only: the greedy job wrote every decode before this job started, and jobs
            # side by side may read the same greedy store (a writer would hold its lock).
            with counting_store(self.output, context.progress) as store, \
                    RunStore(self.greedy_dir, create=False) as greedy_store:
                run.into(store, greedy_store=greedy_store)
        finally:
            loaded.release_sources()  # a patch source (shortcut's base) only lives for its run


@register_job_kind("filter")
@dataclass
class FilterJob(_StrategyRun):
    """A filter (TED) over the samples of run ``source``: it samples nothing itself."""

    source: Path = field(kw_only=True)

    def _inputs(self) -> tuple[Path | None, ...]:
        return (self.greedy_dir, self.source, self.allocation, self.neurons)

    def left(self, planning: Planning) -> Left:
        return self._left(planning, None)

    def run(self, context: JobContext) -> None:
        from zerogap.runs import run_filter
        from zerogap.store import RunStore

        loaded = context.engine(self.role)
        context.progress.stage(f"{context.setting.spec.name}: {self.label}")
        strategy = self._strategy(context, calibrated=False)
        with RunStore(self.output) as store, RunStore(self.source, create=False) as source, \
                RunStore(self.greedy_dir, create=False) as greedy_store:
            run_filter(source, store, greedy_store, loaded.loaded.tokenizer, strategy=strategy)


def _prepare(context: JobContext, loaded: LoadedEngine, role: str, questions, strategy,
             spec, *, greedy: bool = False, samples=None):
    """The run of ``questions`` requested and prepared on ``role``'s ``loaded`` engine."""
    from zerogap.runs import RunRequest, prepare

    s, models = context.setting, context.models
    return prepare(RunRequest(getattr(s.spec, role), s.task, s.spec.task_split,
                              tuple(questions), strategy, spec, greedy=greedy,
                              backend=models.backend, engine=models.options, samples=samples),
                   loaded)


def calibration_settings(name: str, options: dict[str, Any], greedy_dir: Path, s: Setting
                         ) -> dict[str, Any]:
    """What strategy ``name`` takes from the greedy decodes in ``greedy_dir`` of setting
    ``s``'s calibration questions (:meth:`~zerogap.strategies.Strategy.calibration_settings`;
    the greedy job decoded them, :attr:`~zerogap.study.settings.Setting.greedy_questions`)."""
    from zerogap.store import RunStore

    with RunStore(greedy_dir, create=False) as store:
        decoded = store.greedy()
    missing = [q.id for q in s.calibration if q.id not in decoded]
    if missing:
        raise RuntimeError(f"{greedy_dir} lacks the greedy decodes of {len(missing)} "
                           f"calibration questions (first: {missing[0]})")
    return strategy_class(name).calibration_settings([decoded[q.id] for q in s.calibration],
                                                     options)
