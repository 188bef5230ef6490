"""How many threads torch's CPU operations use: the cores this process may use, as many of
them as other processes leave free, and what the work's own timing says.

Torch runs an operation on all its threads, and the threads wait for each other at the end of
every operation (OpenMP's barrier; libgomp spins there before it sleeps). On an idle machine
that is fastest. Once another process holds one of the cores, the thread that shares it is
descheduled for a time slice at a time, and every operation waits for it: on a 2-core machine
one spinning process made two-thread sampling 13-14 times slower, one thread 1.4 times
(docs/engine.md, "Threads on a shared machine", with the measurements behind each choice here).
So the count follows three readings, window by window of the work:

* the cores this process may use (:func:`core_limit`): its CPU affinity, capped by its cgroup's
  CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``, the tightest
  up the tree), rounded up;
* how busy they are (:class:`CpuMeter`): the busy time ``/proc/stat`` counts on those cores,
  less this process's own CPU time, is what other processes held;
* the work's own rate, timed at each count tried (:class:`ThreadChooser`): a move the meter
  suggests is kept only if the next window's rate bears it out, and the current count is
  re-checked against one thread fewer now and then, in case the meter misses a contention
  (another virtual machine's share of a physical core, say).

A count that lost is not tried again for a while, and that while doubles each time it loses, so
a machine where the meter misleads pays for a probe ever more rarely.

The caller's own count (``torch.set_num_threads``, a study worker's share, ``OMP_NUM_THREADS``)
is the ceiling; :func:`governed` puts it back when the work ends. ``ZEROGAP_THREADS`` (and the
engine's ``threads`` option, the command line's ``--threads``) fixes the count instead: it
wins over everything here. Torch's thread count is the calling OS thread's own (OpenMP), so
each thread (a study's worker) keeps its own choosers, one per kind of work (``phase``): a
decode step, a training step and a scoring pass are timed apart.

Changing the count changes how kernels split their sums, so logits can differ in the last bits
between counts, as between batch shapes (the batch sizer's choice): a draw moves only where
its two best scores are that close (:func:`zerogap.engine.hf.sample`'s guarantee).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerogap.engine.cgroup import CGROUP_ROOT, SELF_CGROUP, hierarchy
from zerogap.errors import UserError

_log = logging.getLogger("zerogap.engine")

ENV = "ZEROGAP_THREADS"
PROC_STAT = Path("/proc/stat")


def override(environ: Mapping[str, str] = os.environ) -> int | None:
    """The thread count ``ZEROGAP_THREADS`` fixes, or None where it is unset or empty; any
    other value than a whole number >= 1 is a :class:`UserError` naming the variable."""
    text = environ.get(ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"{ENV}={environ[ENV]!r}: must be a whole number of threads >= 1")
    return int(text)


def allowed_cpus() -> frozenset[int]:
    """The CPUs this process may run on (its affinity; every CPU where it cannot be read)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return frozenset(range(os.cpu_count() or 1))


def cpu_quota(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> float | None:
    """Cores' worth of CPU time per period this process's cgroup grants, the least over the
    group and its ancestors (v2 ``cpu.max`` "150000 100000" is 1.5); None without a quota."""
    quotas = []
    for group, version in hierarchy("cpu", root, self_cgroup):
        try:
            if version == 2:
                limit, _, period = (group / "cpu.max").read_text().strip().partition(" ")
            else:
                limit = (group / "cpu.cfs_quota_us").read_text().strip()
                period = (group / "cpu.cfs_period_us").read_text().strip()
            if limit != "max" and int(limit) > 0:  # v1 writes "no quota" as -1
                quotas.append(int(limit) / int(period))
        except (OSError, ValueError, ZeroDivisionError):
            continue
    return min(quotas, default=None)


def core_limit(cpus: int | None = None, quota: float | None = None) -> int:
    """Threads this process can keep busy at once: its allowed CPUs, capped by its cgroup's
    quota rounded up (1.5 cores run two threads for three quarters of each period, which
    beats one). ``cpus`` and ``quota`` default to this process's."""
    cpus = len(allowed_cpus()) if cpus is None else cpus
    quota = cpu_quota() if quota is None else quota
    if quota is not None:
        cpus = min(cpus, math.ceil(quota - 1e-9))
    return max(1, cpus)


@dataclass(frozen=True)
class Reading:
    """One look at the CPU: ``wall`` seconds on the meter's clock, ``busy`` CPU seconds the
    watched cores spent on any work since boot (time stolen by the hypervisor included: it
    is time this process could not run), ``own`` CPU seconds of this process."""

    wall: float
    busy: float
    own: float


class CpuMeter:
    """Reads how much of ``cpus`` went to work, and how much of that was this process's."""

    def __init__(self, cpus: frozenset[int], stat: Path = PROC_STAT,
                 clock: Callable[[], float] = time.monotonic,
                 own: Callable[[], float] = time.process_time):
        self.cpus, self.stat, self.clock, self.own = cpus, stat, clock, own
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read(self) -> Reading | None:
        """The reading now, or None where ``/proc/stat`` cannot be read (not Linux)."""
        try:
            text = self.stat.read_text()
        except OSError:
            return None
        ticks = 0
        for line in text.splitlines():
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or not name[3:].isdigit() \
                    or int(name[3:]) not in self.cpus:
                continue
            # user nice system idle iowait irq softirq steal (guest time is inside user)
            fields = [int(x) for x in rest.split()[:8]]
            ticks += sum(fields) - fields[3] - fields[4]
        return Reading(self.clock(), ticks / self.tick, self.own())


def others_busy(before: Reading, after: Reading) -> float:
    """Cores' worth of the watched CPUs that other processes held between two readings."""
    wall = after.wall - before.wall
    if wall <= 0:
        return 0.0
    return max(0.0, ((after.busy - before.busy) - (after.own - before.own)) / wall)


class ThreadChooser:
    """The thread count for one kind of work in one OS thread, from readings and timings.

    The work calls :meth:`step` after each unit (a decode step's rows, a training step).
    Once :attr:`WINDOW` seconds of timed units have passed, the window's rate (work per second)
    and the meter's free cores are read:

    * the free cores, this thread's share of them (``ceiling / limit``), rounded with
      :attr:`SLACK` to spare, give the *target*, at most ``ceiling``;
    * a target below the count is tried at once (one thread fewer on a busy machine costs
      little: 1.4x at worst in the measurements), a target above it only when the batch is
      settled (``settled``; two threads on a busy core cost 13x);
    * with the target met, one thread fewer is tried every so often all the same;
    * a try lasts one window and is kept if its rate is at least the window before's, less
      :attr:`TOLERANCE` for a move the meter asked for downwards and plus it for any other:
      more threads must pay for themselves, and fewer must be clearly faster when the meter
      did not ask for them. A try that loses puts the count back and holds that move off
      for :attr:`HOLD` seconds, doubled at each further loss up to :attr:`MAX_HOLD`.

    Without readings (``read`` returns None: not Linux) the target is the ceiling, so timing
    alone decides. ``clock`` and ``read`` are injectable: the tests drive a simulated machine.
    """

    WINDOW = 0.5  # seconds of timed work per reading: /proc/stat counts in 10 ms ticks
    SLACK = 0.25  # a core three quarters free counts as free
    TOLERANCE = 0.05
    HOLD, MAX_HOLD = 10.0, 160.0
    MIN_INTERVAL = 0.1  # the shortest interval a reading between calls is trusted over

    def __init__(self, ceiling: int, *, cpus: int, limit: int,
                 clock: Callable[[], float] = time.monotonic,
                 read: Callable[[], Reading | None] = lambda: None,
                 since: Reading | None = None):
        self.cpus, self.limit, self.clock, self.read = cpus, max(1, limit), clock, read
        self.ceiling = self.threads = max(1, ceiling)
        self.rates: dict[int, float] = {}  # the latest window's rate at each count
        now = clock()
        self._hold = {"up": self.HOLD, "down": self.HOLD, "check": self.HOLD}
        # The first check comes after the first window: without readings it is what finds
        # that the ceiling stalls on a busy machine.
        self._until = {"up": now, "down": now, "check": now}
        self._probe: tuple[int, float, str] | None = None  # (count before, its rate, move)
        self._reading = since if since is not None else read()
        self._work, self._spent, self._last = 0.0, 0.0, now  # the window so far

    def target(self, before: Reading | None, after: Reading | None) -> int | None:
        """The count the free cores between two readings suggest; None without both."""
        if before is None or after is None or after.wall - before.wall < self.MIN_INTERVAL:
            return None
        free = min(self.cpus - others_busy(before, after), self.limit)
        share = free * self.ceiling / self.limit
        return min(self.ceiling, max(1, math.floor(share + self.SLACK)))

    def begin(self, ceiling: int) -> int:
        """The count to start a call with: the last one, within the new ``ceiling``, lowered
        at once if the cores have been busy since the last reading."""
        self.ceiling = max(1, ceiling)
        self.threads = min(self.threads, self.ceiling)
        reading = self.read()
        target = self.target(self._reading, reading)
        now = self.clock()
        if target is not None and target < self.threads and now >= self._until["down"]:
            assert self._reading is not None and reading is not None  # a target needs both
            _log.info("%d threads instead of %d: other processes held %.1f of %d cores",
                      target, self.threads, others_busy(self._reading, reading), self.cpus,
                      extra={"engine": {"threads": target}})
            self.threads = target
        self._reading, self._probe = reading, None
        self._open(now)
        return self.threads

    def set_ceiling(self, ceiling: int) -> int:
        """The caller changed the ceiling during the work (a study worker's share)."""
        self.ceiling = max(1, ceiling)
        if self.threads > self.ceiling or self._probe is not None:
            self.threads = min(self._probe[0] if self._probe else self.threads, self.ceiling)
            self._probe = None
            self._open(self.clock())
        return self.threads

    def step(self, work: float, *, timed: bool = True, settled: bool = True) -> int:
        """After a unit of ``work``: the count for the next unit. ``timed=False`` for a unit
        that did other work besides (rows joined and were encoded); ``settled=False`` while
        the batch size is still being chosen (no upward try then)."""
        now = self.clock()
        if timed:
            self._work += work
            self._spent += now - self._last
        self._last = now
        if self._spent < self.WINDOW:
            return self.threads
        rate = self._work / self._spent
        self.rates[self.threads] = rate
        reading = self.read()
        target = self.target(self._reading, reading)
        self._reading = reading
        self._open(now)
        if self._probe is not None:
            self._judge(rate, now)
        else:
            self._consider(rate, self.ceiling if target is None else target, now, settled)
        return self.threads

    def _open(self, now: float) -> None:
        self._work, self._spent, self._last = 0.0, 0.0, now

    def _consider(self, rate: float, target: int, now: float, settled: bool) -> None:
        if target < self.threads and now >= self._until["down"]:
            self._try(target, rate, "down")
        elif settled and target > self.threads and now >= self._until["up"]:
            self._try(target, rate, "up")
        elif settled and target == self.threads > 1 and now >= self._until["check"]:
            self._try(self.threads - 1, rate, "check")

    def _try(self, threads: int, rate: float, move: str) -> None:
        self._probe = (self.threads, rate, move)
        self.threads = threads

    def _judge(self, rate: float, now: float) -> None:
        before, reference, move = self._probe  # type: ignore[misc]
        self._probe = None
        bar = 1 - self.TOLERANCE if move == "down" else 1 + self.TOLERANCE
        if rate >= reference * bar:
            self._hold[move] = self.HOLD
            _log.info("%d threads instead of %d: %.0f against %.0f a second (%s)",
                      self.threads, before, rate, reference, move,
                      extra={"engine": {"threads": self.threads, "rates": dict(self.rates)}})
        else:
            _log.debug("%d threads kept: %d read %.0f against %.0f a second (%s)", before,
                       self.threads, rate, reference, move)
            self.threads = before
            self._hold[move] = min(2 * self._hold[move], self.MAX_HOLD)
            self._until[move] = now + self._hold[move]
        self._until["check"] = max(self._until["check"], now + self._hold["check"])


# The first reading, at import: a process's first call reads how busy the cores were while it
# loaded its model, so it need not start with threads that other processes' work would stall.
_CPUS = allowed_cpus()
_METER = CpuMeter(_CPUS)
_FIRST = _METER.read()
_LOCAL = threading.local()


class Governor:
    """Applies a :class:`ThreadChooser`'s count (or a fixed one) to torch in the calling OS
    thread for one stretch of work; made by :func:`governed`. Inactive (``active=False``:
    work on a GPU, whose CPU threads only feed it) it changes nothing."""

    def __init__(self, phase: str, fixed: int | None, active: bool = True):
        import torch

        self._torch, self.phase, self.fixed, self.active = torch, phase, fixed, active
        self._caller = self._applied = torch.get_num_threads()
        self._limit = core_limit(len(_CPUS))
        self.chooser: ThreadChooser | None = None
        if not active:
            return
        self._outer = getattr(_LOCAL, "governor", None)
        _LOCAL.governor = self
        if fixed is None:
            choosers = _LOCAL.__dict__.setdefault("choosers", {})
            if phase not in choosers:
                choosers[phase] = ThreadChooser(self._ceiling(), cpus=len(_CPUS),
                                                limit=self._limit, read=_METER.read,
                                                since=_FIRST)
            self.chooser = choosers[phase]
            self._apply(self.chooser.begin(self._ceiling()))
        else:
            self._apply(fixed)

    @property
    def threads(self) -> int:
        """The count torch uses in this thread now."""
        return self._applied

    def step(self, work: float, *, timed: bool = True, settled: bool = True) -> None:
        """After a unit of work (see :meth:`ThreadChooser.step`)."""
        if not self.active:
            return
        current = self._torch.get_num_threads()
        if current != self._applied:  # the caller changed it meanwhile: its new ceiling
            self.share(current)
        if self.chooser is None:
            self._apply(self.fixed or self._caller)
        else:
            self._apply(self.chooser.step(work, timed=timed, settled=settled))

    def share(self, threads: int) -> None:
        """The caller's count is now ``threads`` (see :func:`share`)."""
        self._caller = threads
        if self.chooser is not None:
            self._apply(self.chooser.set_ceiling(self._ceiling()))
        else:
            self._apply(self.fixed or threads)

    def close(self) -> None:
        """Give the caller its count back."""
        if self.active:
            self._apply(self._caller)
            _LOCAL.governor = self._outer

    def _ceiling(self) -> int:
        return min(self._caller, self._limit)

    def _apply(self, threads: int) -> None:
        if threads != self._applied:
            self._torch.set_num_threads(threads)
            self._applied = threads


def share(threads: int) -> None:
    """Make ``threads`` the calling OS thread's count (a study worker's share of the cores):
    the work governed in this thread now (:func:`governed`) takes it as its ceiling at once,
    and gives it back when it ends; with none, torch's count is set."""
    governor = getattr(_LOCAL, "governor", None)
    if governor is not None:
        governor.share(threads)
    else:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


@contextmanager
def governed(phase: str, threads: int | None = None, *, device: Any = "cpu"
             ) -> Iterator[Governor]:
    """Torch's thread count in this OS thread follows the CPU while the block runs, for work
    on ``device`` (a GPU's leaves it alone); call :meth:`Governor.step` after each unit of
    work. ``threads`` (else ``ZEROGAP_THREADS``) fixes the count instead. The caller's count
    is back afterwards."""
    active = str(device).split(":")[0] == "cpu"
    governor = Governor(phase, threads if threads is not None else override(), active)
    try:
        yield governor
    finally:
        governor.close()
