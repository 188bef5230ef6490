"""Torch's thread count following the CPU the process gets.

The choice is driven by a simulated machine (its clock, its busy time and this process's CPU
time), so every figure the chooser reads is one written here; the limits come from real files
(a cgroup-like tree, this process's affinity, /proc/stat), and the override is checked on the
real engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zerogap.engine import greedy, sample
from zerogap.engine.base import EngineOptions, SamplingSpec
from zerogap.engine.hf import HFBackend
from zerogap.engine.threads import (
    ENV,
    CpuMeter,
    Reading,
    ThreadChooser,
    core_limit,
    cpu_quota,
    governed,
    others_busy,
    override,
    share,
)
from zerogap.errors import UserError

SRC = Path(__file__).resolve().parents[2] / "src"

# The measurements on a 2-core machine, as rows a second: two threads 28% faster than
# one when idle; beside a spinning process, one thread gets its fair share of a core and two
# threads that spin-wait on each other run 13 times slower than idle.
IDLE = {1: 100.0, 2: 128.0}
STALL = 13.0


class Machine:
    """A simulated ``cores``-core machine on which ``others(t)`` other processes spin.

    Work of ``w`` units at ``n`` threads takes ``w / speed`` seconds; the machine's busy time
    and this process's CPU time grow as the kernel would share the cores (fairly, each
    runnable thread alike), which is all :class:`ThreadChooser` reads.
    """

    def __init__(self, others=lambda t: 0, cores: int = 2, idle: dict | None = None):
        self.others, self.cores, self.idle = others, cores, idle or IDLE
        self.now = self.busy = self.own = 0.0

    def speed(self, threads: int, others: int) -> float:
        if threads + others <= self.cores:
            return self.idle[threads]
        if threads == 1:
            return self.idle[1] * min(1.0, self.cores / (1 + others))
        return self.idle[threads] / STALL

    def run(self, threads: int, work: float) -> None:
        others = self.others(self.now)
        seconds = work / self.speed(threads, others)
        runnable = threads + others
        mine = threads * min(1.0, self.cores / runnable)  # spinning counts as CPU time
        theirs = min(others * min(1.0, self.cores / runnable), self.cores - mine)
        self.now += seconds
        self.own += mine * seconds
        self.busy += (mine + theirs) * seconds

    def read(self) -> Reading:
        return Reading(self.now, self.busy, self.own)

    def chooser(self, ceiling: int = 2, since: Reading | None = None) -> ThreadChooser:
        return ThreadChooser(ceiling, cpus=self.cores, limit=self.cores,
                             clock=lambda: self.now, read=self.read, since=since)


def drive(machine: Machine, chooser: ThreadChooser, work: float, step: float = 20.0
          ) -> list[tuple[float, int]]:
    """Run ``work`` units in steps of ``step`` as the engine does; the (start, count) of each
    step."""
    threads = chooser.begin(chooser.ceiling)
    trace = []
    while work > 0:
        trace.append((machine.now, threads))
        machine.run(threads, min(step, work))
        work -= step
        threads = chooser.step(step)
    return trace


WORK = 6_000.0  # a minute of two-thread decoding on an idle simulated machine


def test_an_idle_machine_keeps_both_threads_and_rechecks_seldom():
    machine = Machine()
    trace = drive(machine, machine.chooser(), WORK)
    assert trace[-1][1] == 2
    assert machine.now <= 1.05 * WORK / IDLE[2]  # the re-checks at one thread cost little
    assert sum(1 for _, n in trace if n == 1) < 0.05 * len(trace)


def test_a_core_busy_since_the_model_loaded_starts_on_one_thread():
    machine = Machine(others=lambda t: 1)
    before = machine.read()
    machine.run(1, 200.0)  # the model load, beside the spinner
    trace = drive(machine, machine.chooser(since=before), WORK)
    assert trace[0][1] == 1
    assert machine.now <= 2 * WORK / IDLE[2]
    assert all(n == 1 for _, n in trace)  # the meter never shows the core free again


def test_a_core_that_becomes_busy_and_free_again_is_followed():
    machine = Machine(others=lambda t: 1 if 10 <= t < 40 else 0)
    trace = drive(machine, machine.chooser(), 2 * WORK)
    stalled = [t for t, n in trace if 10 <= t < 40 and n == 2]
    assert len(stalled) == 1  # one step at two threads beside the spinner (the window's end)
    assert all(n == 1 for t, n in trace if stalled[0] < t < 40)
    after = [n for t, n in trace if t >= 41.5]
    assert after[0] == 2  # back two windows after the meter shows the core free
    assert after.count(1) < 0.05 * len(after)  # but for a re-check now and then
    spinning = 30.0
    idle_seconds = (2 * WORK - spinning * IDLE[1]) / IDLE[2]  # the best a chooser could do
    assert machine.now <= 1.15 * (spinning + idle_seconds)


def test_without_readings_timing_alone_finds_the_faster_count():
    machine = Machine(others=lambda t: 1)
    chooser = ThreadChooser(2, cpus=2, limit=2, clock=lambda: machine.now, read=lambda: None)
    trace = drive(machine, chooser, 4 * WORK)
    ones = sum(1 for _, n in trace if n == 1)
    assert ones > 0.95 * len(trace)
    # Each losing try at two threads doubles the wait before the next one.
    assert machine.now <= 2 * (4 * WORK) / IDLE[2]


def test_more_threads_that_do_not_pay_are_tried_ever_more_rarely():
    # A machine whose second thread slows the work (a core shared with its hyperthread's
    # sibling, say), while the meter shows it free.
    machine = Machine(idle={1: 100.0, 2: 80.0})
    trace = drive(machine, machine.chooser(), 4 * WORK)
    switches = sum(1 for a, b in zip(trace, trace[1:], strict=False) if a[1] != b[1])
    assert trace[-1][1] == 1
    assert switches <= 2 * 8  # tries after 10, 20, 40, 80, 160, 160 ... seconds
    assert machine.now <= 1.05 * (4 * WORK) / 100.0


def test_the_ceiling_is_never_passed_and_a_lower_one_takes_effect_at_once():
    machine = Machine()
    chooser = machine.chooser(ceiling=1)
    assert all(n == 1 for _, n in drive(machine, chooser, WORK / 4))
    chooser = machine.chooser(ceiling=2)
    drive(machine, chooser, WORK / 4)
    assert chooser.threads == 2
    assert chooser.set_ceiling(1) == 1 and chooser.threads == 1


def test_a_share_of_the_free_cores_is_the_target():
    machine = Machine()
    chooser = ThreadChooser(4, cpus=8, limit=8, clock=lambda: machine.now, read=machine.read)
    quiet = Reading(0.0, 0.0, 0.0)
    # 8 cores, 3 held by others: 5 free, half of them for a worker whose ceiling is 4 of 8.
    assert chooser.target(quiet, Reading(1.0, 3.0, 0.0)) == 2
    assert chooser.target(quiet, Reading(1.0, 0.0, 0.0)) == 4
    assert chooser.target(quiet, Reading(1.0, 8.0, 0.0)) == 1
    assert chooser.target(quiet, Reading(0.01, 0.0, 0.0)) is None  # too short to read
    assert others_busy(quiet, Reading(2.0, 3.0, 1.0)) == 1.0  # our own second of CPU is not


def test_the_quota_is_the_tightest_up_a_v2_tree(tmp_path, cgroup_folder):
    root = tmp_path / "cgroup"
    cgroup_folder(root / "job", cpu__max="150000 100000\n")
    cgroup_folder(root / "job" / "step", cpu__max="max 100000\n")
    self_cgroup = tmp_path / "self"
    self_cgroup.write_text("0::/job/step\n")
    assert cpu_quota(root, self_cgroup) == 1.5
    cgroup_folder(root / "job" / "step", cpu__max="50000 100000\n")
    assert cpu_quota(root, self_cgroup) == 0.5
    cgroup_folder(root / "job", cpu__max="max 100000\n")
    cgroup_folder(root / "job" / "step", cpu__max="max 100000\n")
    assert cpu_quota(root, self_cgroup) is None
    assert cpu_quota(root, tmp_path / "no-such-file") is None


def test_the_v1_quota_reads_minus_one_as_none(tmp_path, cgroup_folder):
    root = tmp_path / "cgroup"
    cgroup_folder(root / "cpu", cpu__cfs_quota_us="-1\n", cpu__cfs_period_us="100000\n")
    cgroup_folder(root / "cpu" / "svc", cpu__cfs_quota_us="250000\n",
                  cpu__cfs_period_us="100000\n")
    self_cgroup = tmp_path / "self"
    self_cgroup.write_text("4:memory:/svc\n2:cpu,cpuacct:/svc\n0::/\n")
    assert cpu_quota(root, self_cgroup) == 2.5
    cgroup_folder(root / "cpu" / "svc", cpu__cfs_quota_us="-1\n")
    assert cpu_quota(root, self_cgroup) is None


def test_the_core_limit_is_the_affinity_capped_by_the_quota_rounded_up():
    assert core_limit(cpus=8, quota=1.5) == 2
    assert core_limit(cpus=8, quota=2.0) == 2
    assert core_limit(cpus=2, quota=0.3) == 1
    assert core_limit(cpus=2, quota=None) == 2 or cpu_quota() is not None
    assert 1 <= core_limit() <= len(os.sched_getaffinity(0))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_a_process_pinned_to_one_cpu_uses_one_thread():
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "import torch; from zerogap.engine.threads import core_limit, governed; "
            "torch.set_num_threads(4)\n"
            "with governed('decode') as g: print(core_limit(), g.threads)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(SRC)}, check=True).stdout
    assert out.split() == ["1", "1"]


def test_the_meter_reads_the_watched_cpus_of_a_stat_file(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  900 0 900 900 0 0 0 0 0 0\n"
                    "cpu0 100 10 50 1000 40 5 5 30 77 0\n"
                    "cpu1 400 0 100 500 0 0 0 0 0 0\n"
                    "intr 12345\n")
    meter = CpuMeter(frozenset({0}), stat, clock=lambda: 7.0, own=lambda: 1.25)
    reading = meter.read()
    assert reading == Reading(7.0, (100 + 10 + 50 + 5 + 5 + 30) / meter.tick, 1.25)
    assert CpuMeter(frozenset({0, 1}), stat).read().busy == (200 + 500) / meter.tick
    assert CpuMeter(frozenset({0}), tmp_path / "missing").read() is None


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="needs /proc/stat")
def test_the_real_meter_counts_this_process_as_its_own():
    meter = CpuMeter(frozenset(os.sched_getaffinity(0)))
    before = meter.read()
    x = 0
    while meter.own() - before.own < 0.2:  # spin on this thread for 0.2 s of CPU
        x += 1
    after = meter.read()
    assert after.busy >= before.busy and after.own - before.own >= 0.2
    # What this process spent is not counted as others' work (the machine may have others).
    assert others_busy(before, after) <= len(meter.cpus)


def test_the_environment_override_is_checked(monkeypatch):
    assert override({}) is None and override({ENV: " "}) is None
    assert override({ENV: "3"}) == 3
    for bad in ("0", "two", "-1", "1.5"):
        with pytest.raises(UserError, match=f"{ENV}='{bad}': must be a whole number"):
            override({ENV: bad})
    monkeypatch.setenv(ENV, "two")
    with pytest.raises(UserError, match=ENV):  # before any model loads
        HFBackend.check_available(EngineOptions())


def test_a_fixed_count_wins_and_the_callers_count_comes_back(monkeypatch):
    saved = torch.get_num_threads()
    with governed("decode", threads=3) as governor:
        assert torch.get_num_threads() == 3
        share(1)  # a study worker's share changes nothing under a fixed count
        governor.step(1.0)
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == saved
    monkeypatch.setenv(ENV, "2")
    with governed("decode"):
        assert torch.get_num_threads() == 2
    with governed("decode", threads=3):  # the option beats the environment
        assert torch.get_num_threads() == 3
    with governed("decode", device="cuda:0"):  # work on a GPU leaves the count alone
        assert torch.get_num_threads() == saved


def test_a_share_inside_governed_work_is_its_ceiling_at_once():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with governed("share-test") as governor:
            assert governor.threads <= 2
            share(1)
            assert torch.get_num_threads() == 1
            governor.step(1.0)
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1  # the caller's latest count
    finally:
        torch.set_num_threads(saved)


def _counts_during(model, call) -> set[int]:
    seen: set[int] = set()
    handle = model.register_forward_pre_hook(lambda m, a: seen.add(torch.get_num_threads()))
    try:
        call()
    finally:
        handle.remove()
    return seen


def test_the_engine_runs_at_the_fixed_count_and_gives_the_callers_back(tiny, monkeypatch):
    model, tok = tiny
    prompts = ["Q: 1+2=?\nA:", "Q: 3+4=?\nA:"]
    assert torch.get_num_threads() == 1
    seen = _counts_during(model, lambda: sample(model, tok, prompts, m=3, temperature=0.9,
                                                max_new_tokens=6, question_ids=["a", "b"],
                                                threads=2))
    assert seen == {2} and torch.get_num_threads() == 1
    monkeypatch.setenv(ENV, "2")
    seen = _counts_during(model, lambda: greedy(model, tok, prompts, max_new_tokens=6))
    assert seen == {2} and torch.get_num_threads() == 1
    monkeypatch.delenv(ENV)
    # Chosen: never above the caller's count (the tests' one thread).
    seen = _counts_during(model, lambda: greedy(model, tok, prompts, max_new_tokens=6))
    assert seen == {1}


def test_the_backend_takes_threads_from_its_options(tiny):
    model, tok = tiny
    backend = HFBackend(model, tok, threads=2)
    spec = SamplingSpec(m=2, temperature=0.9, max_new_tokens=4)
    seen = _counts_during(model, lambda: backend.sample(["Q: 1+1=?\nA:"], spec,
                                                        question_ids=["q"]))
    assert seen == {2} and torch.get_num_threads() == 1


def test_a_bad_override_stops_the_command_before_anything_is_written(tiny_dir, tmp_path,
                                                                     monkeypatch, capsys):
    from helpers import run_main, sample_args

    monkeypatch.setenv(ENV, "many")
    assert run_main(sample_args(tiny_dir, tmp_path / "run")) == 2
    assert f"{ENV}='many'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
