"""How much memory the engine may still take: the device's free memory, and the budget that one
process shares among everything it runs.

**The budget** (:class:`MemoryBudget`, one per process, :func:`process_budget`): the bytes the
process may hold resident, by default :data:`DEFAULT_FRACTION` of what the machine (or its
cgroup) has available when it is first read and what the process holds then, or what
``--max-memory`` / ``ZEROGAP_MAX_MEMORY`` says. Every engine sizes its batch from its worker's
share of what is left (:meth:`MemoryBudget.room`, :func:`share`), and shrinks it while it
runs when the process goes over the budget or the machine runs low (:class:`MemoryWatch`);
where not even one row fits it stops with a :class:`MemoryShortError` instead of being killed
by the kernel. It mirrors the
thread governor (:mod:`zerogap.engine.threads`): a process-wide figure, each worker's share.

**Available memory**:
On a CPU ``/proc/meminfo``'s ``MemAvailable`` is the machine's, not the process's: in a
container (Docker's ``--memory``, a Kubernetes limit, a Slurm job's cgroup) the kernel kills
the process once its cgroup passes its own limit, while the machine still shows free memory.
So the figure here is the smaller of the two, the cgroup's room being its limit less what the
group holds that the kernel cannot simply drop (usage less its inactive file cache, as
``docker stats`` reports it), the tightest over the group and its ancestors. Both cgroup
versions are read: v2's ``memory.max`` / ``memory.current``, v1's ``memory.limit_in_bytes`` /
``memory.usage_in_bytes``.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from zerogap.engine.cgroup import CGROUP_ROOT, SELF_CGROUP, hierarchy
from zerogap.errors import UserError

UNKNOWN_BYTES = 4 << 30  # what a CPU without /proc/meminfo is assumed to have free
# cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit value.
_NO_LIMIT = 1 << 60


def available_bytes(device: torch.device | None = None) -> int:
    """Bytes free for this process on ``device``: the GPU's free memory, or on a CPU the
    smaller of the machine's available memory and its cgroup's room."""
    if device is not None and device.type == "cuda":
        import torch  # only a GPU's figure needs it: a command that loads nothing stays light

        return torch.cuda.mem_get_info(device)[0]
    machine = meminfo_available()
    room = cgroup_room()
    if machine is None:
        return room if room is not None else UNKNOWN_BYTES
    return machine if room is None else min(machine, room)


def meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable`` in bytes, or None where the file or the field is missing."""
    try:
        with open(path) as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        return info["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        return None


def cgroup_room(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> int | None:
    """Bytes this process's memory cgroup may still grow by before its limit, the least over
    the group and its ancestors; None where no group on the way has a limit (or none is
    readable)."""
    rooms = []
    for group, version in hierarchy("memory", root, self_cgroup):
        files = (("memory.max", "memory.current", "inactive_file") if version == 2 else
                 ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
        room = _room(group, *files)
        if room is not None:
            rooms.append(room)
    return min(rooms, default=None)


def _room(group: Path, limit_file: str, usage_file: str, inactive_key: str) -> int | None:
    try:
        text = (group / limit_file).read_text().strip()
        limit = _NO_LIMIT if text == "max" else int(text)
        usage = int((group / usage_file).read_text())
    except (OSError, ValueError):
        return None
    if limit >= _NO_LIMIT:
        return None
    inactive = 0
    try:
        for line in (group / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == inactive_key:
                inactive = int(value)
    except (OSError, ValueError):
        pass
    return max(0, limit - max(0, usage - inactive))


# -- the process's memory budget -------------------------------------------------------------

ENV = "ZEROGAP_MAX_MEMORY"
FLAG = "--max-memory"
DEFAULT_FRACTION = 0.3
"""The share of the memory this process could have when the budget is first read (what the
machine or the cgroup has available, plus what the process already holds) that it takes by
default: on a 23 GiB machine with 20 GiB available and 1.5 GiB held, 6.4 GiB. The rest is left
for a second study, a browser, or the other users of a shared node; the process's peak follows
the budget, since each worker's batch buffers are sized to its share of the room."""
# What the machine must keep available for everything else; below it the engine shrinks its
# batch whatever the budget says (another process grew while a run lasted).
RESERVE = 512 << 20
# What each worker may add under a default budget however full the process is, where the
# machine has it: enough for the decode's rate, not the machine's whole free memory. On the
# embedded model in float32 (46 kB of keys and values a token, 0.8 MB of logits a row) it
# holds a question encode (0.4 GB) and the batch sizer's 64-row floor of rows up to 300 tokens.
SOFT_ROOM = 3 << 29
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1000 ** 4, "tib": 1 << 40}


def parse_size(text: str, name: str) -> int:
    """Bytes in ``text`` (``6GiB``, ``512MiB``, ``1.5G``, ``8e9``; k/M/G/T and KiB/MiB/GiB/TiB
    are powers of 1024, kB/MB/GB/TB of 1000). Anything else, or under 64 MiB, is a
    :class:`UserError` naming ``name`` (the flag or variable) and the value.

    >>> parse_size("6GiB", "--max-memory") == 6 << 30
    True
    """
    body = text.strip().replace(" ", "")
    number = body.rstrip("kKmMgGtTiIbB")
    unit = body[len(number):].lower()
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if unit not in _UNITS or not value == value or value in (float("inf"), float("-inf")):
        raise UserError(f"{name} {text!r}: not a size; give e.g. 6GiB, 512MiB or 8GB")
    size = int(value * _UNITS[unit])
    if size < 64 << 20:
        raise UserError(f"{name} {text!r}: at least 64MiB is needed to run a model")
    return size


# The size ``--max-memory`` gave in this process, if it gave one: the budget it set is named
# by the flag, as the user typed it, not by the variable that carries it to the processes this
# one starts (they see the variable alone).
_FLAGGED: str | None = None


def from_flag(size: str | None) -> None:
    """``--max-memory SIZE``: checked (a bad value is a one-line :class:`UserError` naming the
    flag), then set as ``ZEROGAP_MAX_MEMORY`` for this process and those it starts. None: the
    command gave no flag, and the variable, if set, speaks for itself."""
    global _FLAGGED
    if size is not None:
        parse_size(size, FLAG)
        os.environ[ENV] = size
    _FLAGGED = size


def override(environ: Mapping[str, str] = os.environ) -> int | None:
    """The budget ``ZEROGAP_MAX_MEMORY`` fixes in bytes, or None where it is unset or empty (the
    command line's ``--max-memory`` sets it); a bad value is a one-line :class:`UserError`."""
    text = environ.get(ENV, "").strip()
    return parse_size(text, ENV) if text else None


def resident_bytes(statm: Path = Path("/proc/self/statm")) -> int | None:
    """This process's resident memory now, or None where ``/proc`` cannot be read."""
    try:
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def peak_resident_bytes() -> int:
    """The most memory this process has held resident so far (the kernel's high-water mark, as
    GNU time's "maximum resident set size" reports it for the whole run)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux counts KiB


def format_size(size: int) -> str:
    """``size`` bytes in GiB or MiB, as a budget is worded (``6.0 GiB``)."""
    return f"{size / (1 << 30):.1f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):.0f} MiB"


class MemoryShortError(UserError):
    """Not even one decode row fits in the memory budget: stopped before the kernel kills the
    process; what was stored stays, and the same command resumes it with a larger budget."""


@dataclass
class MemoryBudget:
    """The bytes this whole process may hold resident, shared by everything in it: a study's
    workers, every engine, the fine-tunes, neuron location, the lm-eval model.

    An engine sizes its batch from :meth:`room`: what the process may still add, split evenly
    among the workers running side by side (:func:`share`), so a second worker started beside
    the first does not plan for the same free memory. It re-reads :meth:`short` as it decodes
    and shrinks its batch when the process has gone over the budget or the machine's
    available memory has fallen under :data:`RESERVE` (another process grew).

    ``total``: the budget in bytes; ``source``: where it came from, in words, for the record;
    ``strict``: a bound never passed (the user's), or the default (see :meth:`room`).
    ``resident`` and ``available`` read the process and the machine (injectable for tests).
    """

    total: int
    source: str
    strict: bool = True
    resident: Callable[[], int | None] = resident_bytes
    available: Callable[[], int] = field(default=available_bytes)

    def room(self) -> int:
        """Bytes the calling worker may still add: its share of what the process has left
        under the budget, never more than the machine has available less :data:`RESERVE`. A
        default budget (not :attr:`strict`) gives each worker at least :data:`SOFT_ROOM` where
        the machine has it: the models a study loads after the budget was read may fill it
        alone, and a budget nobody asked for must not stop a run the machine can hold."""
        held = self.resident() or 0
        machine = max(0, self.available() - RESERVE)
        workers = workers_here()
        share = max(0, min(self.total - held, machine)) // workers
        return share if self.strict else max(share, min(machine // workers, SOFT_ROOM))

    def short(self) -> bool:
        """Whether memory is short now: the machine under its reserve, or the process over its
        budget (a default budget: over it by more than its workers' :data:`SOFT_ROOM`)."""
        held = self.resident()
        ceiling = self.total + (0 if self.strict else SOFT_ROOM * workers_here())
        return (held is not None and held > ceiling) or self.available() < RESERVE

    def record(self) -> dict:
        """What a study records (``study.json``'s ``memory``): the budget in bytes, where it
        came from, and the most this process has held resident so far."""
        return {"budget_bytes": self.total, "source": self.source,
                "peak_resident_bytes": peak_resident_bytes()}


_LOCK = threading.Lock()
_BUDGET: MemoryBudget | None = None
_LOCAL = threading.local()


def process_budget() -> MemoryBudget:
    """The process's budget, fixed at its first read: ``ZEROGAP_MAX_MEMORY`` (or
    ``--max-memory``), else :data:`DEFAULT_FRACTION` of what the machine or its cgroup has
    available then. Reading it starts the process's trimmer (:func:`keep_trimmed`)."""
    global _BUDGET
    with _LOCK:
        if _BUDGET is None:
            _BUDGET = default_budget()
        keep_trimmed()
        return _BUDGET


def default_budget(environ: Mapping[str, str] = os.environ,
                   available: Callable[[], int] | None = None) -> MemoryBudget:
    """The budget a process starts with (see :func:`process_budget`); a GPU's own memory is
    not in it (an engine on a GPU sizes from the device's free memory)."""
    fixed = override(environ)
    if fixed is not None:
        text = environ[ENV].strip()
        named = f"{FLAG} {text}" if text == _FLAGGED else f"{ENV}={text}"
        return MemoryBudget(fixed, named)
    start = available() if available is not None else available_bytes()
    # What this process already holds (the interpreter, torch, a model) is its own already.
    held = resident_bytes() or 0
    total = int(DEFAULT_FRACTION * (start + held))
    return MemoryBudget(total, f"{DEFAULT_FRACTION:.0%} of the {format_size(start)} available "
                               f"and the {format_size(held)} held at the start", strict=False)


def reset_budget() -> None:
    """Forget the process's budget: the next read fixes it anew (after ``--max-memory``)."""
    global _BUDGET
    with _LOCK:
        _BUDGET = None


def share(workers: int) -> None:
    """The calling OS thread is one of ``workers`` running side by side (a study's worker): its
    engines plan for that share of the budget's room (:meth:`MemoryBudget.room`)."""
    _LOCAL.workers = max(1, workers)


def workers_here() -> int:
    """How many workers the calling thread shares the budget with, itself included."""
    return getattr(_LOCAL, "workers", 1)


def decode_row_bytes(*, per_token: int, own_tokens: int, attended: int, heads: int,
                     vocab: int) -> int:
    """One decode row's memory at its peak, in bytes.

    ``per_token``: the keys and values of one token over every cache layer (a patch's source
    model keeps its own there too); ``own_tokens``: the row's generated tokens (its
    cache grown to ``max_new_tokens``) and its share of its question's (a question's keys are
    held once for the rows that sample it); ``attended``: the most keys one query reads
    (prefix included); ``heads``: query heads; ``vocab``: the output vocabulary. Summed: the
    row's keys and values, the attention's float32 scores and their softmax (a layer at a
    time), four vocabulary-wide float32 vectors alive at once (the step's logits, the draw's
    noise and perturbed scores, an intervention's edit), and a tenth on top for the
    allocator's slack and the forward's activations.

    Set against what rows really hold, the slope of peak resident memory between fixed batch
    sizes (as ``bench/bench_memory.py --rows`` measures it): on the demo's contaminated model,
    48 new tokens and 9 samples of each of 128 questions (256 to 1,024 rows), it gives 2.2 MB
    a row in bfloat16 where plain rows take 1.3 MB, and 3.4 MB in float32 where they take 2.8
    MB. RailCap's rows take more than it counts in bfloat16 (3.3 MB; 3.5 MB in float32, about
    the estimate): the decode's watch (:class:`MemoryWatch`) halves a batch that grows
    past the budget.
    """
    cache = per_token * own_tokens
    scores = heads * attended * 4 * 3
    logits = vocab * 4 * 4
    return (cache + scores + logits) * 11 // 10


class MemoryWatch:
    """Reads :meth:`MemoryBudget.short` while a decode runs, at most every :attr:`INTERVAL`
    seconds (a read costs tens of microseconds, a decode step milliseconds)."""

    INTERVAL = 0.5

    def __init__(self, budget: MemoryBudget, clock: Callable[[], float] = time.monotonic):
        self.budget, self.clock = budget, clock
        self._next = clock() + self.INTERVAL

    def short(self) -> bool:
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.INTERVAL
        return self.budget.short()


TRIM_INTERVAL = 5.0  # seconds between two hand-backs of freed heap memory (keep_trimmed)
_TRIMMER: threading.Thread | None = None


def keep_trimmed(interval: float = TRIM_INTERVAL) -> None:
    """Hand freed heap memory back to the kernel every ``interval`` seconds for the rest of the
    process (:func:`release_freed`'s ``malloc_trim``, without its collection), from a daemon
    thread started once.

    Why: glibc keeps what tensors free in its heaps for reuse, and on a CPU most of a decode's
    buffers (a layer's cache, a batch's logits) come from there, so a process's resident
    memory only ever rose: each job left its largest buffers resident for the next. In the
    demo's study (two workers, bfloat16) the process held 5.5 GiB while locating shortcut
    neurons and never fell back; handing the freed memory back every 5 seconds held the same
    phase at 3.5-3.8 GiB. The budget reads resident memory, so what the heap keeps would
    otherwise count against every later batch. Not glibc (macOS, musl): nothing to do."""
    global _TRIMMER
    if _TRIMMER is not None:
        return
    trim = _malloc_trim()
    if trim is None:
        return

    def run() -> None:
        while True:
            time.sleep(interval)
            trim(0)

    _TRIMMER = threading.Thread(target=run, name="zerogap-trim", daemon=True)
    _TRIMMER.start()


def release_freed() -> None:
    """Hand memory that freed tensors left in the C heap back to the kernel (glibc's
    ``malloc_trim``), so that the resident figure the budget reads falls after a shrink."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``; None where the C library is another (macOS, musl): nothing to
    hand back there."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
