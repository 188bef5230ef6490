"""The executor contract: how a study's jobs get run, wherever they run.

A setting's jobs form a small graph: each writes one output (a run directory, a file) and may
read others' (the greedy decodes a sampling run reuses, identity's samples that TED filters,
the neuron list shortcut patches). An executor runs such a graph. It

* submits a job once every earlier job whose output it reads has ended (the order given is
  always a valid order, so no wait is circular);
* runs it in one of its ``width`` slots, with that slot's share of the resources;
* lets the job report its events as it goes (:meth:`Slot.event`: a stored question, a neuron
  decode), where it may change the job's share;
* on an interrupt, has the running jobs stop at their next event, so every store closes
  cleanly, then raises ``KeyboardInterrupt``; the first job to fail stops further jobs from
  starting and its exception is raised once the running ones have ended.

:class:`zerogap.study.workers.LocalThreads` is the default: worker threads of this process,
each with an even share of torch's threads. An executor for a cluster (one job per GPU of a
Ray cluster, one per Slurm allocation) implements the same two members.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Node:
    """One job of the graph: the output it writes and the outputs it reads."""

    output: Path
    reads: tuple[Path, ...] = ()


class Slot(Protocol):
    """Where one job runs, as the executor hands it over.

    ``index`` (``0 .. width - 1``) names the slot: state kept per slot (loaded models) is
    keyed by it, and a slot runs one job at a time.
    """

    index: int

    def event(self) -> None:
        """Called by the job at each of its events: the executor may change the job's share
        of the resources here, and raises ``KeyboardInterrupt`` once the run is interrupted."""
        ...


class Executor(Protocol):
    """Runs a graph of jobs, at most :attr:`width` at once (see the module docstring)."""

    width: int

    def run(self, nodes: Sequence[Node], job: Callable[[int, Slot], None], *,
            interrupted: Callable[[], None] = lambda: None) -> None:
        """Call ``job(i, slot)`` once for every node ``i`` in a slot of its own, node ``i``
        once every earlier node whose output it reads has ended. ``interrupted`` is called
        on an interrupt, before the running jobs are waited for."""
        ...
