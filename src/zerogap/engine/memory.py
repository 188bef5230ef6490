"""How much memory the engine may still take on its device, for sizing its batches.

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

from pathlib import Path

import torch

from zerogap.engine.cgroup import CGROUP_ROOT, SELF_CGROUP, hierarchy

UNKNOWN_BYTES = 4 << 30  # what a CPU without /proc/meminfo is assumed to have free
# cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit value.
_NO_LIMIT = 1 << 60


def available_bytes(device: torch.device) -> int:
    """Bytes free for this process on ``device``: the GPU's free memory, or on a CPU the
    smaller of the machine's available memory and its cgroup's room."""
    if device.type == "cuda":
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
