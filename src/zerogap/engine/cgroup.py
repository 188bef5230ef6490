"""The control groups that bound this process: where a controller's limits are read.

A container (Docker's ``--memory`` and ``--cpus``, a Kubernetes limit, a Slurm job) bounds a
process through its cgroup and the cgroup's ancestors, while ``/proc/meminfo`` and the core
count still describe the whole machine. Both cgroup versions are read: v2's one unified
hierarchy (a ``0::/path`` line in ``/proc/self/cgroup``) and v1's hierarchy per controller
(``4:memory:/path``, ``1:cpu,cpuacct:/path``, mounted under the root by controller name).
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def hierarchy(controller: str, root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP
              ) -> list[tuple[Path, int]]:
    """``(folder, version)`` of every group that may hold a ``controller`` limit for this
    process: its own group first, then each ancestor up to the mount's root, for each
    hierarchy that carries the controller. Empty where ``self_cgroup`` cannot be read.

    Inside a cgroup namespace the listed path may name the host's tree, which the mount does
    not show: then the mount's root is this process's group.
    """
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            mount, version = root, 2
        elif controller in controllers.split(","):
            mount, version = root / controller, 1
        else:
            continue
        group = mount / path.strip("/")
        if not group.is_dir():
            group = mount
        while True:
            found.append((group, version))
            if group == mount:
                break
            group = group.parent
    return found
