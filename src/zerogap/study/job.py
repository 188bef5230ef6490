"""A unit of a study's work: the :class:`Job` protocol, a setting's run directories
(:class:`SettingRuns`) and the registry of job kinds.

A setting's work is a list of jobs (:mod:`zerogap.study.plan`), each one object of a kind:
greedy decodes, a sampling run, a filter over another run's samples
(:mod:`zerogap.study.sampling`), shortcut-neuron location (:mod:`zerogap.study.neurons`), the
design checks and Figure 1's ranks (:mod:`zerogap.study.checks`), an allocated study's plan
(:mod:`zerogap.study.allocation`). A job says

* what it writes (:attr:`Job.output`, one run directory or file) and what it reads
  (:meth:`Job.reads`: other jobs' outputs; it starts once their jobs have ended);
* what is left to do (:meth:`Job.left`: questions, or 0 when it is done, and the rows the
  progress line counts);
* the resources it needs (:meth:`Job.gpus`) and whether its time is the study's sampling work
  (:attr:`Job.timed`);
* how it runs (:meth:`Job.run`, on the models of the slot the executor gave it).

Nothing outside a kind's own module asks which kind a job is. A new kind of work is one module:
a class implementing :class:`Job` with a ``plan`` class method (:class:`JobKind`), registered
with :func:`zerogap.study.kinds.register_job_kind`, and named by a ``zerogap.job_kinds``
entry point when it lives in another package; a study runs it in every setting when its
``jobs`` key names it (``examples/answer-lengths`` is one). A job is data: an executor may
pickle it and run it in another process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from zerogap.analysis.score import REPEAT

if TYPE_CHECKING:
    from zerogap.analysis.allocation import AllocationPlan
    from zerogap.engine.base import EngineOptions
    from zerogap.runs import LoadedEngine
    from zerogap.study.progress import JobProgress
    from zerogap.study.settings import Setting
    from zerogap.study.spec import StudySpec

@dataclass
class SettingRuns:
    """A setting's run directories, by what they hold.

    ``clean`` and ``repeat`` are the clean model's reference batch (seed ``seed``) and its
    independent second batch (``seed + 1``); ``clean_greedy`` and ``contaminated_greedy`` each
    model's greedy decodes; ``strategies`` each strategy label's run on the contaminated model
    (table order; a strategy that samples nothing has none) and ``controls`` each control's run
    on the clean model.
    """

    clean: Path
    repeat: Path
    clean_greedy: Path
    contaminated_greedy: Path
    strategies: dict[str, Path] = field(default_factory=dict)
    controls: dict[str, Path] = field(default_factory=dict)

    def greedy(self, role: str) -> Path:
        """The greedy decodes of ``role``'s model (``"clean"``, ``"contaminated"``)."""
        return self.clean_greedy if role == "clean" else self.contaminated_greedy

    def scored(self) -> dict[str, Path]:
        """The runs a report scores, by label: ``"clean"``, the second batch, the strategies."""
        return {"clean": self.clean, REPEAT: self.repeat, **self.strategies}

    def labelled(self) -> dict[str, Path]:
        """Every run by its label in ``study.json`` (``"greedy"``: the contaminated model's
        greedy decodes, ``"clean greedy"``: the clean model's)."""
        return {"clean": self.clean, REPEAT: self.repeat, "greedy": self.contaminated_greedy,
                "clean greedy": self.clean_greedy, **self.strategies}


@dataclass(frozen=True)
class Left:
    """What a job has left: ``todo`` questions (1 for a job that writes one file; 0: done,
    skipped), of which ``questions`` are sampled or decoded ones, and ``rows`` samples or
    decodes (the progress line's counts)."""

    todo: int = 0
    rows: int = 0
    questions: int = 0


@dataclass
class Planning:
    """What a job's plan and its :meth:`Job.left` see: the study, the setting, its run
    directories, the study folder ``out``, and ``plan``: an allocated setting's recorded plan
    (None while it is to be computed). ``seen`` holds the run directories a job
    already counts (a model against itself has one greedy run: decoded once)."""

    study: StudySpec
    setting: Setting
    runs: SettingRuns
    out: Path
    plan: AllocationPlan | None = None
    seen: set[Path] = field(default_factory=set)


class Engines(Protocol):
    """A slot's models (:class:`zerogap.study.jobs.Models`), loaded when first asked for."""

    backend: str
    options: EngineOptions

    def engine(self, role: str, progress: JobProgress) -> LoadedEngine: ...


@dataclass
class JobContext:
    """Where a job runs: the study, the setting, its run directories, the slot's models and
    the job's progress."""

    study: StudySpec
    setting: Setting
    runs: SettingRuns
    models: Engines
    progress: JobProgress

    def engine(self, role: str) -> LoadedEngine:
        """The engine of ``role``'s model, loaded now if the slot has not loaded it yet."""
        return self.models.engine(role, self.progress)


class Job(Protocol):
    """One resumable unit of a setting's work (see the module docstring).

    ``label`` names it on the progress line and keys its time in ``study.json``; ``output`` is
    the run directory or file it writes. ``timed``: its time is the study's sampling work,
    recorded at every run and counted in the wall time; ``first_time_stands``: an untimed job
    whose first time is recorded all the same (the design checks, which run at every
    invocation).
    """

    label: str
    output: Path
    timed: ClassVar[bool] = True
    first_time_stands: ClassVar[bool] = False

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        """Other jobs' outputs this one opens (it starts once they have ended)."""
        ...

    def left(self, planning: Planning) -> Left:
        """What is left to do, as the stored outputs say now."""
        ...

    def gpus(self, engine: float) -> float:
        """GPUs the job needs, where one engine needs ``engine``."""
        return engine

    def run(self, context: JobContext) -> None:
        """Do what is left, resuming what was stored."""
        ...


class JobKind(Job, Protocol):
    """A kind of work a study adds to each setting by name (its ``jobs`` key): a :class:`Job`
    that plans itself. The built-in kinds are planned by :func:`zerogap.study.plan.plan_setting`
    (their order and run directories depend on each other) and have no ``plan``."""

    @classmethod
    def plan(cls, planning: Planning) -> Sequence[Job]:
        """This kind's jobs for the setting ``planning`` describes, run after the built-in
        ones (their outputs are in ``planning.runs``)."""
        ...
