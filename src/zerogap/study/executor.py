"""The executor contract: how a study's jobs get run, wherever they run.

A setting's jobs form a small graph: each writes one output (a run directory, a file) and may
read others' (the greedy decodes a sampling run reuses, identity's samples that TED filters,
the neuron list shortcut patches). An executor runs such a graph. It

* checks the engine's options where the jobs will run (:meth:`Executor.check_engine`: the
  device present, ``dtype="auto"`` made concrete), before any job starts;
* submits a job once every earlier job whose output it reads has ended (the order given is
  always a valid order, so no wait is circular), at most :attr:`Executor.width` at once;
* runs it in a slot with the resources its engine needs (:attr:`Node.gpus`; CPU threads
  otherwise);
* carries the job's progress to the caller: the job calls :meth:`Slot.report` where it runs,
  and the executor calls the caller's ``report(i, event)`` in this process, in order, in one
  thread per running job (so state kept per thread, such as the stage a progress line shows,
  is the job's own);
* lets the job check in at each of its events (:meth:`Slot.event`: a stored question, a neuron
  decode), where it may change the job's share of the resources;
* on an interrupt, has the running jobs stop at their next event, so every store closes
  cleanly, then raises ``KeyboardInterrupt``; the first job to fail stops further jobs from
  starting and its exception is raised once the running ones have ended.

The job is a callable ``job(i, slot)``; an executor that runs jobs in other processes pickles
it, so it must carry what it needs as data (the setting, the run directories, the engine's
options) and load its own models there.

Executors are registered by name (a study's ``executor`` key, ``NAME[:KEY=VALUE,...]``):
``local``, :class:`zerogap.study.workers.LocalThreads`, worker threads of this process, each
with an even share of torch's threads (the default); ``ray``,
:class:`zerogap.study.ray_executor.RayCluster`, each job a task on a Ray cluster (its own
option: ``address``). An executor class (:class:`ExecutorKind`) declares its options as a
config dataclass and opens itself for a study (:meth:`ExecutorKind.opened`). Another (Dask,
Slurm through submitit) is one module: such a class, registered with
:func:`register_executor` and named by a ``zerogap.executors`` entry point
(``examples/serial-executor`` is one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from zerogap.config import from_strings, parse_pairs
from zerogap.registry import Registry

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions

EXECUTOR_ENTRY_POINTS = "zerogap.executors"
DEFAULT_EXECUTOR = "local"


@dataclass(frozen=True)
class Node:
    """One job of the graph: the output it writes, the outputs it reads, its name (a cluster
    shows it beside the job's task) and the GPUs its engine needs (0 on a CPU, or for a job
    that loads no model)."""

    output: Path
    reads: tuple[Path, ...] = ()
    label: str = ""
    gpus: float = 0.0


class Slot(Protocol):
    """Where one job runs, as the executor hands it over.

    ``index`` (``0 .. width - 1``) names the slot: state kept per slot (loaded models) is
    keyed by it, and a slot runs one job at a time. A job run in another process gets a slot
    whose index means nothing there: it keeps no state beyond itself.
    """

    @property
    def index(self) -> int: ...

    def event(self) -> None:
        """Called by the job at each of its events: the executor may change the job's share
        of the resources here, and raises ``KeyboardInterrupt`` once the run is interrupted."""
        ...

    def report(self, *event: Any) -> None:
        """Hand ``event`` (picklable values) to the caller's ``report(i, event)``."""
        ...


class Executor(Protocol):
    """Runs a graph of jobs, at most :attr:`width` at once (see the module docstring);
    :attr:`name` is its registered name (``local``, ``ray``), recorded with the study."""

    name: str
    width: int

    def check_engine(self, backend: str, options: EngineOptions) -> EngineOptions:
        """``options`` checked for ``backend`` where the jobs run
        (:func:`zerogap.runs.check_engine`), ``dtype="auto"`` made concrete there."""
        ...

    def run(self, nodes: Sequence[Node], job: Callable[[int, Slot], None], *,
            report: Callable[[int, tuple], None] = lambda item, event: None,
            interrupted: Callable[[], None] = lambda: None) -> None:
        """Call ``job(i, slot)`` once for every node ``i`` in a slot of its own, node ``i``
        once every earlier node whose output it reads has ended; each event the job reports
        reaches ``report(i, event)`` here. ``interrupted`` is called on an interrupt, before
        the running jobs are waited for."""
        ...


@dataclass(frozen=True)
class Opening:
    """What an executor is opened for: a study written into ``folder`` whose jobs read the
    files and folders ``reads`` (model folders) and run on ``backend`` (``device``: the HF
    engine's, None: the default); ``workers`` caps the jobs run at once (None: the executor's
    own default)."""

    folder: Path
    backend: str
    device: str | None = None
    workers: int | None = None
    reads: Sequence[Path] = ()


@dataclass(frozen=True)
class NoOptions:
    """The options of an executor that takes none."""


class ExecutorKind(Protocol):
    """A registered executor: its own ``options`` (a config dataclass, whose fields are the
    ``KEY=VALUE`` pairs its name takes) and how it opens for a study."""

    options: ClassVar[type]

    @classmethod
    def opened(cls, opening: Opening, options: Any) -> AbstractContextManager[Executor]:
        """The executor for ``opening``, closed on exit. Refused in one line
        (:class:`~zerogap.errors.UserError`) before any job runs where it cannot run the study
        (a worker count the backend cannot use, a cluster that cannot be reached, a node that
        cannot read ``opening.folder`` or ``opening.reads``)."""
        ...


_EXECUTORS: Registry[type[ExecutorKind]] = Registry("executor", group=EXECUTOR_ENTRY_POINTS)
for _name, _module in (("local", "zerogap.study.workers"), ("ray", "zerogap.study.ray_executor")):
    _EXECUTORS.register_lazy(_name, _module)


def register_executor(name: str) -> Callable[[type], type]:
    """Class decorator: register an executor class as ``name`` (the ``name`` it records).

    A third-party package decorates its class in a module and names that module in a
    ``zerogap.executors`` entry point under the same name."""
    return _EXECUTORS.register(name)


executor_names = _EXECUTORS.names
"""The registered executor names (entry points included, none imported), sorted."""


def executor_choice(label: str) -> tuple[type[ExecutorKind], Any]:
    """``"ray:address=auto"`` -> the executor class and its options, checked (a
    :class:`~zerogap.errors.UserError` naming the label for an unknown name or option).

    >>> executor_choice("local")[0].name
    'local'
    """
    name, _, rest = label.partition(":")
    chosen = _EXECUTORS.get(name)
    pairs = parse_pairs(f"executor {name}", [p for p in rest.split(",") if p.strip()])
    return chosen, chosen.options(**from_strings(chosen.options, pairs, owner=f"executor {name}",
                                                 option=f"executor {name}"))
