"""The memory the engine sizes its batches from: the machine's, capped by the process's cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from zerogap.engine.memory import available_bytes, cgroup_room, meminfo_available

GIB = 1 << 30


def test_v2_room_is_the_tightest_limit_up_the_tree_less_what_cannot_be_dropped(
        tmp_path, cgroup_folder):
    root = tmp_path / "cgroup"
    cgroup_folder(root / "job", memory__max=f"{8 * GIB}\n", memory__current=f"{1 * GIB}\n",
                  memory__stat="anon 1\ninactive_file 0\n")
    cgroup_folder(root / "job" / "step", memory__max="max\n", memory__current=f"{3 * GIB}\n",
                  memory__stat=f"anon 5\ninactive_file {2 * GIB}\n")
    self_cgroup = tmp_path / "self"
    self_cgroup.write_text("0::/job/step\n")
    # The step has no limit of its own; the job's 8 GiB less its 1 GiB held bounds it.
    assert cgroup_room(root, self_cgroup) == 7 * GIB
    cgroup_folder(root / "job" / "step", memory__max=f"{4 * GIB}\n")
    # 4 GiB less (3 GiB held - 2 GiB of inactive file cache the kernel can drop).
    assert cgroup_room(root, self_cgroup) == 3 * GIB


def test_v1_no_limit_and_a_missing_group_read_as_none_or_the_mount_root(tmp_path, cgroup_folder):
    root = tmp_path / "cgroup"
    unlimited = str(9223372036854771712)
    cgroup_folder(root / "memory", memory__limit_in_bytes=f"{2 * GIB}\n",
                  memory__usage_in_bytes=f"{GIB}\n",
                  memory__stat=f"total_inactive_file {GIB // 2}\n")
    cgroup_folder(root / "memory" / "svc", memory__limit_in_bytes=unlimited,
                  memory__usage_in_bytes="0\n")
    self_cgroup = tmp_path / "self"
    self_cgroup.write_text("5:cpu,cpuacct:/svc\n4:memory:/svc\n0::/\n")
    assert cgroup_room(root, self_cgroup) == 2 * GIB - GIB // 2
    # Inside a cgroup namespace the path names the host's tree: the mount's root is ours.
    self_cgroup.write_text("4:memory:/host/only/path\n")
    assert cgroup_room(root, self_cgroup) == 2 * GIB - GIB // 2
    cgroup_folder(root / "memory", memory__limit_in_bytes=unlimited)
    assert cgroup_room(root, self_cgroup) is None
    assert cgroup_room(root, tmp_path / "no-such-file") is None


def test_meminfo_and_the_cpu_figure_are_positive_and_capped_by_the_group():
    machine = meminfo_available()
    assert machine is None or machine > 0
    figure = available_bytes(torch.device("cpu"))
    assert figure > 0
    room = cgroup_room()
    if room is not None:
        assert figure <= room
    if machine is not None:
        # Free memory moves between the two reads (another process frees some): the figure is
        # capped by what /proc/meminfo said before it or after it.
        assert figure <= max(machine, meminfo_available())


def _writable_memory_cgroup() -> Path | None:
    for mount, limit in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                         (Path("/sys/fs/cgroup"), "memory.max")):
        if limit == "memory.max" and "memory" not in _read(mount / "cgroup.subtree_control"):
            continue
        if mount.is_dir() and os.access(mount, os.W_OK):
            return mount
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cgroups are Linux's")
def test_a_process_in_a_real_limited_cgroup_sizes_from_its_limit():
    mount = _writable_memory_cgroup()
    if mount is None:
        pytest.skip("no writable memory cgroup here (needs root and cgroup access)")
    group = mount / f"zerogap-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup here: {exc}")
    limit_file = "memory.limit_in_bytes" if mount.name == "memory" else "memory.max"
    child = None
    try:
        (group / limit_file).write_text(str(GIB))
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys, torch; sys.stdin.readline(); "
             "from zerogap.engine.memory import available_bytes; "
             "print(available_bytes(torch.device('cpu')))"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        (group / "cgroup.procs").write_text(str(child.pid))
        out, _ = child.communicate("go\n", timeout=120)
        assert child.returncode == 0
        # The machine has more than 1 GiB free; the group's limit is what counts.
        assert 0 < int(out) <= GIB
        assert (meminfo_available() or 0) > GIB
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        group.rmdir()
