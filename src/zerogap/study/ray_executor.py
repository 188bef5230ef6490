"""A study's jobs on a Ray cluster: each job one Ray task (:class:`RayCluster`).

Who does what:

* *the driver* (the process running ``zerogap evaluate``) plans the jobs, decides when each may
  start (the local executor's order: :func:`zerogap.study.workers.run_side_by_side`, one driver
  thread per slot, each waiting on its job's task), shows the progress line and writes
  ``study.json`` and the report. It loads no model.
* *each job* is a task on some node: it loads its own models (a path on the node, or a hub id),
  opens its run store in the study folder and stores each question as it completes. The study
  folder is therefore on storage every node reaches (a shared file system);
  :meth:`RayCluster.check_storage` refuses it in one line before anything runs when a node
  cannot read a file the driver just wrote there, or a model folder the study names.
* *progress* travels from a task to a small actor (``_Events``) in batches, at the job's
  events; each driver thread polls it for its job and replays the events into the study's
  tracker (:class:`zerogap.study.progress.Tracker`), so the one progress line sums the
  cluster's jobs as it sums local threads.

Resources: a job's task asks for ``threads`` CPUs (torch's thread count in it; one by default,
as two jobs with one thread each beat one with two on a small model) and the GPUs its node
names (:attr:`zerogap.study.executor.Node.gpus`: the engine's). :attr:`RayCluster.width` is
how many such tasks the cluster's live nodes hold at once, or ``--workers``.

Faults: a task whose worker process dies (killed, its node lost) is retried by Ray
(:data:`RETRIES` times) on another worker; the job resumes from its run store, so the study
loses at most the questions that worker had not stored, and its samples are those of an
uninterrupted run (the engine's draws depend on the seed, question, sample and step, and on the
logits, whose last bits follow the batch size and thread count). An error the job raises is
not retried: it stops the study as it would on local threads. On Ctrl-C the driver raises the
actor's stop flag, each running task stops at its next event (its stores close cleanly), and
the driver raises ``KeyboardInterrupt`` once they have; a rerun resumes.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.errors import UserError, ZerogapError
from zerogap.study.executor import Node, Opening, Slot, register_executor
from zerogap.study.workers import run_side_by_side

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions

RETRIES = 3  # a task's reruns after its worker process died
POLL_SECONDS = 0.2  # how often a driver thread collects its job's events
SEND_SECONDS = 0.2  # how often a task sends its events (and learns of a stop)
PROBE_SECONDS = 120.0  # the storage probe's wait for every node
# The wait for a HOST:PORT address to accept a connection: Ray's own client retries an address
# where nothing listens without end.
CONNECT_SECONDS = 10.0


@dataclass(frozen=True)
class RayOptions:
    """The ``ray`` executor's own options (``--executor ray:address=auto``)."""

    address: str | None = field(default=None, metadata={
        "help": "the Ray cluster to run on: auto (the one this machine belongs to, or "
                "RAY_ADDRESS) or HOST:PORT (default: start one on this machine for the study)"})


@register_executor("ray")
class RayCluster:
    """The ``ray`` executor: each job a Ray task (see the module docstring).

    Made by :meth:`connect`; :meth:`close` disconnects, and stops the cluster where
    :meth:`connect` started it.
    """

    name = "ray"
    options = RayOptions

    @classmethod
    @contextmanager
    def opened(cls, opening: Opening, options: RayOptions) -> Iterator[RayCluster]:
        """The cluster at ``options.address`` joined (:meth:`connect`), its storage checked
        (:meth:`check_storage`), closed on exit."""
        cluster = cls.connect(options.address, opening.workers)
        try:
            cluster.check_storage(opening.folder, opening.reads)
            yield cluster
        finally:
            cluster.close()

    def __init__(self, owned: bool, workers: int | None, threads: int = 1) -> None:
        self.owned, self.workers, self.threads = owned, workers, threads
        self.width = workers or max(1, self._capacity(0.0))

    @classmethod
    def connect(cls, address: str | None, workers: int | None) -> RayCluster:
        """Join the cluster at ``address`` (``auto``: the one this machine belongs to, or
        ``RAY_ADDRESS``; ``HOST:PORT``; None: start one on this machine, or use the one this
        process joined already). Refused in one line when Ray is not installed or the cluster
        cannot be reached."""
        if workers is not None and workers < 1:
            raise UserError(f"--workers must be at least 1, got {workers}")
        try:
            import ray
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install -e '.[ray]'") from None
        if ray.is_initialized():
            return cls(False, workers)
        _check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR)
        except (ConnectionError, ValueError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"executor ray:address={address}: no Ray cluster to join ({first})"
                            ) from None
        return cls(True, workers)

    def close(self) -> None:
        import ray

        if self.owned:
            ray.shutdown()

    def _capacity(self, gpus: float) -> int:
        """How many job tasks of ``threads`` CPUs and ``gpus`` GPUs the live nodes hold."""
        import ray

        slots = 0
        for node in ray.nodes():
            if node["Alive"]:
                held = node["Resources"]
                fits = int(held.get("CPU", 0) // self.threads)
                if gpus:
                    fits = min(fits, int(held.get("GPU", 0) // gpus))
                slots += fits
        return slots

    def check_engine(self, backend: str, options: EngineOptions) -> EngineOptions:
        """``options`` checked by :func:`zerogap.runs.check_engine` in a task with a job's
        resources, on a node like those the jobs run on; the HF engine's device, when not
        given, is CUDA where the cluster has GPUs (else each task's: its CPU). Sets
        :attr:`width` for the GPUs a job takes; refused in one line when no node holds
        one job."""
        import ray

        from zerogap.engine.base import backend_capabilities
        from zerogap.study.jobs import engine_gpus

        if backend_capabilities(backend).device and options.device is None \
                and ray.cluster_resources().get("GPU"):
            options = replace(options, device="cuda")  # else each task's own: its CPU
        gpus = engine_gpus(backend, options)
        slots = self._capacity(gpus)
        if not slots:
            need = f"{self.threads} CPU" + (f" and {gpus:g} GPU" if gpus else "")
            raise UserError(f"--executor ray: no node of the cluster has {need} free for a "
                            f"job of the {backend} backend on {options.device or 'its GPUs'}")
        self.width = self.workers or slots
        task = ray.remote(max_retries=RETRIES)(_check_engine).options(num_cpus=self.threads,
                                                                      num_gpus=gpus)
        return _result(task.remote(backend, options))

    def check_storage(self, folder: Path, reads: Sequence[Path] = ()) -> None:
        """Refuse, in one line, a cluster with a live node that cannot read the study
        ``folder`` (a probe task on every node reads a nonce the driver writes there) or one
        of ``reads`` (model folders), or that cannot import this zerogap (the probe is its
        function). ``folder`` is left as it was found."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [node for node in ray.nodes() if node["Alive"]]
        created = [path for path in (folder, *folder.parents) if not path.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        nonce = secrets.token_hex(8)
        probe = folder / f".zerogap-probe-{nonce}"
        probe.write_text(nonce, encoding="utf-8")
        try:
            task = ray.remote(_probe)
            refs = [task.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(str(probe), nonce, [str(p) for p in reads])
                for node in nodes]
            try:
                unread = ray.get(refs, timeout=PROBE_SECONDS)
            except ray.exceptions.GetTimeoutError:
                raise UserError(f"--executor ray: not every node of the cluster ran the storage "
                                f"probe within {PROBE_SECONDS:g} s") from None
            except ray.exceptions.RayTaskError as err:  # zerogap missing or another version
                cause = str(err.cause).strip().splitlines() or [type(err.cause).__name__]
                raise UserError(f"--executor ray: a node of the cluster cannot run zerogap's "
                                f"tasks ({cause[-1]}); install this zerogap on every node")\
                    from None
        finally:
            probe.unlink()
            for path in created:  # the deepest first
                path.rmdir()
        for node, missing in zip(nodes, unread, strict=True):
            if missing is not None:
                raise UserError(
                    f"--executor ray: node {node['NodeManagerAddress']} cannot read {missing}; "
                    f"the study folder and the model folders must be on storage every node "
                    f"reaches (a shared file system)")

    def run(self, nodes: Sequence[Node], job: Callable[[int, Slot], None], *,
            report: Callable[[int, tuple], None] = lambda item, event: None,
            interrupted: Callable[[], None] = lambda: None) -> None:
        """Each node's job as a Ray task, at most :attr:`width` at once, in the local
        executor's order (:class:`~zerogap.study.executor.Executor`)."""
        import ray

        events: Any = ray.remote(num_cpus=0)(_Events).remote()
        shared = ray.put(job)  # pickled once, read by every task
        task = ray.remote(max_retries=RETRIES, retry_exceptions=False)(_run_task)
        stop = threading.Event()

        def stopped() -> None:
            if not stop.is_set():
                stop.set()
                ray.get(events.stop.remote())
                interrupted()

        def one(item: int, worker: int, running: Callable[[], int]) -> None:
            node = nodes[item]
            ref = task.options(num_cpus=self.threads, num_gpus=node.gpus,
                               name=f"zerogap {node.label}").remote(shared, item, events,
                                                                     self.threads)
            try:
                ended = _follow(ref, item, events, report)
            except KeyboardInterrupt:  # Ctrl-C reaches this thread when jobs run in order
                stopped()
                _follow(ref, item, events, report)
                raise
            if not ended:
                raise KeyboardInterrupt  # it stopped at an interrupt, as a local job does

        try:
            run_side_by_side([n.output for n in nodes], [n.reads for n in nodes], one,
                             self.width, interrupted=stopped)
        finally:
            ray.kill(events)


def _check_reachable(address: str | None) -> None:
    """Refuse an ``address`` of the form ``[ray://]HOST:PORT`` that accepts no TCP connection
    within :data:`CONNECT_SECONDS`, in one line; other forms (``auto``, None) are Ray's to
    resolve. A port that accepts but is no Ray cluster is left to Ray."""
    if address is None:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else err.strerror or str(err)
        raise UserError(f"executor ray:address={address}: no Ray cluster to join (connecting to "
                        f"{host}:{port}: {reason}; waited at most {CONNECT_SECONDS:g} s)"
                        ) from None


def _follow(ref: Any, item: int, events: Any, report: Callable[[int, tuple], None]) -> bool:
    """Replay task ``ref``'s events (job ``item``) into ``report`` until it ends; whether it
    ran to its end (False: it stopped at an interrupt). Its error is raised here."""
    import ray

    while True:
        done, _ = ray.wait([ref], timeout=POLL_SECONDS)
        for event in ray.get(events.take.remote(item)):
            report(item, event)
        if done:
            return _result(ref)


def _result(ref: Any) -> Any:
    """The value of task ``ref``; an error it raised is raised here: zerogap's own as itself
    (one line for the user), any other as Ray's, whose message holds the task's traceback."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        if isinstance(err.cause, ZerogapError):
            raise err.cause from None
        raise


class _Events:
    """The actor between the tasks and the driver: each job's events, queued until the driver
    takes them, and the stop flag after an interrupt."""

    def __init__(self) -> None:
        self.queues: dict[int, list[tuple]] = {}
        self.stopping = False

    def push(self, item: int, events: list[tuple]) -> bool:
        """Queue job ``item``'s ``events``; whether the jobs are to stop."""
        self.queues.setdefault(item, []).extend(events)
        return self.stopping

    def take(self, item: int) -> list[tuple]:
        return self.queues.pop(item, [])

    def stop(self) -> None:
        self.stopping = True


@dataclass
class _TaskSlot:
    """A job's slot inside its task: its events are sent to ``events`` every
    :data:`SEND_SECONDS` at its check-ins, and at its end; the reply says whether to stop."""

    item: int
    events: Any
    index: int = 0
    pending: list[tuple] = field(default_factory=list)
    sent: float = 0.0

    def report(self, *event: Any) -> None:
        self.pending.append(event)

    def event(self) -> None:
        if time.monotonic() - self.sent >= SEND_SECONDS and self.send():
            raise KeyboardInterrupt

    def send(self) -> bool:
        import ray

        events, self.pending, self.sent = self.pending, [], time.monotonic()
        return ray.get(self.events.push.remote(self.item, events))


def _run_task(job: Callable[[int, Slot], None], item: int, events: Any, threads: int) -> bool:
    """A job's task: ``job(item, slot)`` on ``threads`` torch threads; False when it stopped
    at an interrupt."""
    import torch

    torch.set_num_threads(threads)
    slot = _TaskSlot(item, events)
    try:
        job(item, slot)
    except KeyboardInterrupt:
        return False
    finally:
        slot.send()
    return True


def _check_engine(backend: str, options: EngineOptions) -> EngineOptions:
    from zerogap.runs import check_engine

    return check_engine(backend, options)


def _probe(probe: str, nonce: str, reads: list[str]) -> str | None:
    """On one node: the first of the study folder (``probe`` holding ``nonce``) and ``reads``
    that it cannot read, or None."""
    try:
        if Path(probe).read_text(encoding="utf-8") != nonce:
            return str(Path(probe).parent)
    except OSError:
        return str(Path(probe).parent)
    return next((path for path in reads if not Path(path).exists()), None)
