"""A study's jobs run side by side: worker threads, each with its own share of the CPU's threads.

:class:`LocalThreads` is the default :class:`~zerogap.study.executor.Executor`.

One decode step of a small model on a CPU does not use two cores well: its matrix products
are a few hundred rows tall, and the step's many small operations run on one core while the
other waits. Two jobs decoding at once with one thread each got more done than one job with
two threads (the embedded model, bfloat16, 2 cores: 1.31x the tokens per second; README,
"How it is fast"). A study has such jobs to spare: the clean model's two batches, each
strategy's run, the controls, most of which read nothing another job writes.

Each worker is a thread of this process, not a process: torch releases the GIL inside its
operations, its OpenMP thread count (``torch.set_num_threads``) is the calling thread's own,
and a thread needs no model pickled or imports repeated. What workers share, they must not
change under each other: every worker loads its own copy of the models it runs (a shortcut
patch hooks its model, the engine switches a model's attention implementation for a call).

A worker with nothing it may start (the study's last job runs, or the job the rest wait for)
leaves its core idle; the item still running then takes every thread at its next event
(``running`` in :func:`run_side_by_side`), and gives the share back when another item starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.errors import UserError
from zerogap.study.executor import Node, NoOptions, Opening, Slot, register_executor

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions


def default_workers(device: str, backend_exclusive: bool, threads: int | None = None) -> int:
    """How many jobs a study runs at once when the user does not say: two on a CPU with at
    least two threads for torch, one otherwise (a GPU already runs one job's rows in parallel,
    and an exclusive backend such as vLLM holds one engine at a time)."""
    if backend_exclusive or device != "cpu":
        return 1
    if threads is None:
        import torch

        from zerogap.engine.threads import core_limit

        threads = min(torch.get_num_threads(), core_limit())
    return 2 if threads >= 2 else 1


def threads_per_worker(running: int, threads: int) -> int:
    """Torch threads for each of ``running`` items side by side: the caller's ``threads``
    split evenly (at least one each), so an item left running alone takes them all. Each is
    the ceiling of its item's engine, which uses fewer while other processes hold cores
    (:mod:`zerogap.engine.threads`)."""
    return max(1, threads // running)


def run_side_by_side(outputs: Sequence[Path], reads: Sequence[Sequence[Path]],
                     run: Callable[[int, int, Callable[[], int]], None], workers: int,
                     interrupted: Callable[[], None] = lambda: None) -> None:
    """Run items ``0 .. len(outputs) - 1``, ``workers`` at a time, each once every earlier item
    whose output it reads has finished; of the items free to start, the one most others wait
    on (directly or not) first, then the earliest.

    Parameters
    ----------
    outputs : (N,) paths
        What each item writes (a run directory, a file).
    reads : (N,) sequences of paths
        What each item reads; an item waits only for *earlier* items that write one of them,
        so the order given is always a valid order and no wait can be circular.
    run : callable ``(item, worker, running) -> None``
        Runs one item on worker ``worker`` (``0 .. workers - 1``); a worker runs one item at a
        time, so per-worker state (loaded models, the thread count) is its own. ``running()``
        says how many items run at that moment, this one included: an item may ask it as it
        goes and take a larger share of the CPU once the other workers have nothing to do
        (the last job of a study, or one that the rest wait for).
    workers : int
        At most this many items at once; 1 runs them in order in the calling thread.

    interrupted : callable, optional
        Called in this thread on Ctrl-C (``KeyboardInterrupt``) while items run: it must make
        the running items end soon (the study's stop at their next stored question). They are
        waited for, so their stores close cleanly, and the ``KeyboardInterrupt`` is raised
        here; a second Ctrl-C stops waiting.

    The first item to raise stops further items from starting; the items already running are
    left to finish (a sampling run stores each question as it completes, so nothing is lost),
    and the exception is raised here with its traceback.
    """
    n = len(outputs)
    if workers <= 1:
        for item in range(n):
            run(item, 0, lambda: 1)
        return
    waits = [{j for j in range(i) if outputs[j] in set(reads[i])} for i in range(n)]
    # Items that others wait on go first (the most waiting, directly or not): a chain such as
    # neuron location -> the shortcut run then starts early instead of ending the study on one
    # worker while the other has nothing left to take.
    behind: list[set[int]] = [set() for _ in range(n)]
    for i in reversed(range(n)):
        for j in waits[i]:
            behind[j] |= {i} | behind[i]
    pending = list(range(n))
    done: set[int] = set()
    running: set[int] = set()
    failed: list[BaseException] = []
    ready = threading.Condition()

    def take() -> int | None:
        with ready:
            while not failed and pending:
                item = min((i for i in pending if waits[i] <= done),
                           key=lambda i: (-len(behind[i]), i), default=None)
                if item is not None:
                    pending.remove(item)
                    running.add(item)
                    return item
                ready.wait()
            return None

    begun = [threading.Event() for _ in range(workers)]
    finished = [threading.Event() for _ in range(workers)]

    def work(worker: int) -> None:
        begun[worker].set()
        try:
            while (item := take()) is not None:
                try:
                    run(item, worker, lambda: len(running))
                except BaseException as err:  # noqa: BLE001 -- handed to the caller's thread
                    with ready:
                        running.discard(item)
                        failed.append(err)
                        ready.notify_all()
                    return
                with ready:
                    running.discard(item)
                    done.add(item)
                    ready.notify_all()
        finally:
            finished[worker].set()

    # Daemon threads: an interrupted study exits without waiting for a run to end (each
    # question it stored stays stored; SQLite rolls back the one being written).
    threads = [threading.Thread(target=work, args=(w,), daemon=True,
                                name=f"zerogap-study-worker-{w}") for w in range(workers)]
    try:
        for thread in threads:
            thread.start()
        _join(finished)
    except KeyboardInterrupt:
        with ready:
            failed.append(KeyboardInterrupt())  # no item starts from here on
            ready.notify_all()
        interrupted()
        # A worker that has not begun (the Ctrl-C came while the workers started) takes no
        # item from here on: only those that began can hold one.
        _join([end for start, end in zip(begun, finished, strict=True) if start.is_set()])
        raise
    if failed:
        raise failed[0]


def _join(finished: Sequence[threading.Event]) -> None:
    """Wait until every worker has ``finished``, in short waits: a Ctrl-C the kernel hands to
    a worker thread only sets CPython's flag, which this thread reads when it wakes (a plain
    wait sleeps through it). The workers' own events, not ``Thread.join``: a Ctrl-C that lands
    in a join marks the thread joined as ended while it still runs (CPython 3.11's
    ``_wait_for_tstate_lock`` releases the lock the running thread holds), and the jobs it
    was to wait for would outlive the study."""
    for event in finished:
        while not event.wait(0.2):
            pass


@register_executor("local")
class LocalThreads:
    """The default executor: ``width`` worker threads of this process (:func:`run_side_by_side`);
    side by side, each job runs on an even share of torch's threads among the jobs running,
    retaken at each of its events, and an interrupt ends each at its next event. A job's
    events reach ``report`` at once, in its own thread. It takes no options."""

    name = "local"
    options = NoOptions

    def __init__(self, width: int) -> None:
        self.width = width

    @classmethod
    @contextmanager
    def opened(cls, opening: Opening, options: NoOptions) -> Iterator[LocalThreads]:
        """``workers`` threads (:func:`study_workers`: checked, or the device's default)."""
        yield cls(study_workers(opening.workers, opening.backend, opening.device))

    def check_engine(self, backend: str, options: EngineOptions) -> EngineOptions:
        """:func:`zerogap.runs.check_engine` in this process: the jobs run here."""
        from zerogap.runs import check_engine

        return check_engine(backend, options)

    def run(self, nodes: Sequence[Node], job: Callable[[int, Slot], None], *,
            report: Callable[[int, tuple], None] = lambda item, event: None,
            interrupted: Callable[[], None] = lambda: None) -> None:
        outputs, reads = [n.output for n in nodes], [n.reads for n in nodes]
        if self.width <= 1:  # in order, in this thread: its own Ctrl-C stops it
            run_side_by_side(outputs, reads,
                             lambda item, _, __: job(item, _Reported(_Alone(), item, report)),
                             1)
            return
        import torch

        from zerogap.engine.threads import core_limit

        threads = torch.get_num_threads()
        budget = min(threads, core_limit())  # the cores a cgroup's CPU quota leaves, at most
        stopping = threading.Event()

        def run(item: int, worker: int, running: Callable[[], int]) -> None:
            slot = _Share(worker, running, budget, stopping)
            slot.event()
            job(item, _Reported(slot, item, report))

        def interrupt() -> None:
            stopping.set()
            interrupted()

        try:
            run_side_by_side(outputs, reads, run, self.width, interrupted=interrupt)
        finally:
            torch.set_num_threads(threads)  # MKL's count is process-wide: give it back


@dataclass
class _Reported:
    """``slot`` as job ``item`` gets it: its events go to ``to`` at once, in its thread."""

    slot: _Alone | _Share
    item: int
    to: Callable[[int, tuple], None]

    @property
    def index(self) -> int:
        return self.slot.index

    def event(self) -> None:
        self.slot.event()

    def report(self, *event: Any) -> None:
        self.to(self.item, event)


@dataclass
class _Alone:
    """The one slot of a run in order: every thread is its own already."""

    index: int = 0

    def event(self) -> None:
        """Nothing to retake: no other job runs."""


@dataclass
class _Share:
    """A worker thread's slot: ``running()`` jobs share the caller's ``threads`` and the
    process's memory budget (:mod:`zerogap.engine.memory`)."""

    index: int
    running: Callable[[], int]
    threads: int
    stopping: threading.Event

    def event(self) -> None:
        from zerogap.engine import memory
        from zerogap.engine.threads import share

        if self.stopping.is_set():
            raise KeyboardInterrupt
        running = self.running()
        # The calling thread's own OpenMP count, or its running engine's ceiling mid-call.
        share(threads_per_worker(running, self.threads))
        # And its share of the process's memory budget, read when its engines size a batch.
        memory.share(running)


def study_workers(workers: int | None, backend: str, device: str | None) -> int:
    """The study's worker count on local threads (:func:`~zerogap.study.run.evaluate`):
    ``workers`` checked (:class:`UserError` in one line), or the default for the device."""
    from zerogap.engine.base import backend_capabilities

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
