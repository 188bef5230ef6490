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

Executors by name (a study's ``executor`` key, :func:`zerogap.study.run.open_executor`): ``local``,
:class:`zerogap.study.workers.LocalThreads`, worker threads of this process, each with an even
share of torch's threads (the default); ``ray``,
:class:`zerogap.study.ray_executor.RayCluster`, each job a task on a Ray cluster. Another
(Dask, Slurm through submitit) is one module implementing these members and a name here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions

ExecutorName = Literal["local", "ray"]


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
    :attr:`name` is its key (``local``, ``ray``), recorded with the study."""

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
