"""The process's memory budget: its arithmetic, its override, each worker's share, and the
engine going on with fewer rows when memory runs short (every figure the budget reads is
given here, so no test depends on the memory of the machine it runs on)."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from helpers import VOCAB
from zerogap.engine import memory, sample
from zerogap.engine.memory import (
    DEFAULT_FRACTION,
    ENV,
    RESERVE,
    MemoryBudget,
    MemoryShortError,
    default_budget,
    parse_size,
)
from zerogap.errors import UserError

GIB, MIB = 1 << 30, 1 << 20
PROMPTS = [f"Q: 1+1=?\nA: 2\n\nQ: {a}+{b}=?\nA:" for a, b in [(2, 3), (10, 7), (4, 4), (21, 9)]]
IDS = [f"q{i}" for i in range(len(PROMPTS))]


@pytest.mark.parametrize(("text", "size"), [
    ("6GiB", 6 * GIB), ("512MiB", 512 * MIB), ("1.5G", 3 * GIB // 2), ("8GB", 8 * 10 ** 9),
    ("2 gib", 2 * GIB), (str(GIB), GIB), ("8e9", 8 * 10 ** 9)])
def test_sizes_read_in_binary_and_decimal_units(text, size):
    assert parse_size(text, "--max-memory") == size


@pytest.mark.parametrize("text", ["6XB", "GiB", "", "-1GiB", "nan", "inf", "1e999G", "10MiB"])
def test_a_bad_size_is_one_line_naming_where_it_was_given(text):
    with pytest.raises(UserError) as err:
        parse_size(text, "--max-memory")
    assert str(err.value).startswith(f"--max-memory {text!r}: ") and "\n" not in str(err.value)


def test_the_variable_wins_over_the_default_and_is_checked():
    assert default_budget({ENV: "3GiB"}, available=lambda: 100 * GIB).total == 3 * GIB
    assert ENV in default_budget({ENV: "3GiB"}).source
    with pytest.raises(UserError, match=ENV):
        default_budget({ENV: "lots"})
    assert memory.override({ENV: "  "}) is None


def test_a_budget_the_flag_set_is_named_by_the_flag_and_one_the_variable_set_by_it(
        monkeypatch):
    monkeypatch.setattr(memory, "_FLAGGED", None)
    monkeypatch.setenv(ENV, "3GiB")
    memory.from_flag("2GiB")  # the command line wins over the variable it found
    assert memory.override() == 2 * GIB and default_budget().source == "--max-memory 2GiB"
    memory.from_flag(None)  # a later command without the flag: the variable speaks for itself
    assert default_budget().source == f"{ENV}=2GiB"
    with pytest.raises(UserError, match="--max-memory 'lots'"):
        memory.from_flag("lots")


def test_the_default_is_a_fraction_of_what_is_available_and_held_at_the_start():
    held = memory.resident_bytes() or 0
    budget = default_budget({}, available=lambda: 12 * GIB)
    # The resident figure moves a little between two reads (this test's own allocations).
    assert abs(budget.total - int(DEFAULT_FRACTION * (12 * GIB + held))) < 64 * MIB
    assert budget.total < 12 * GIB and "12.0 GiB available" in budget.source


def test_the_default_reads_the_cgroups_room_when_it_is_tighter(tmp_path, cgroup_folder,
                                                                 monkeypatch):
    root = tmp_path / "cgroup"
    cgroup_folder(root / "job", memory__max=f"{3 * GIB}\n", memory__current=f"{GIB}\n",
                  memory__stat="inactive_file 0\n")
    self_cgroup = tmp_path / "self"
    self_cgroup.write_text("0::/job\n")
    room = memory.cgroup_room(root, self_cgroup)
    assert room == 2 * GIB
    monkeypatch.setattr(memory, "meminfo_available", lambda: 50 * GIB)
    monkeypatch.setattr(memory, "cgroup_room", lambda: room)
    assert memory.available_bytes(torch.device("cpu")) == 2 * GIB
    budget = default_budget({})
    assert "2.0 GiB available" in budget.source


def _budget(total=10 * GIB, held=4 * GIB, free=100 * GIB) -> MemoryBudget:
    return MemoryBudget(total, "test", resident=lambda: held, available=lambda: free)


def test_room_is_what_is_left_under_the_budget_and_the_machines_reserve():
    assert _budget().room() == 6 * GIB
    # The machine has less available than the budget leaves: its reserve stays free.
    assert _budget(free=3 * GIB).room() == 3 * GIB - RESERVE
    assert _budget(held=11 * GIB).room() == 0
    assert not _budget().short()
    assert _budget(held=11 * GIB).short() and _budget(free=RESERVE - 1).short()


def test_a_default_budget_gives_way_where_the_machine_has_room_and_a_fixed_one_does_not():
    def soft(held, free=100 * GIB):
        return MemoryBudget(4 * GIB, "default", strict=False, resident=lambda: held,
                            available=lambda: free)

    # The models loaded after the default was read fill it: each worker still gets its floor.
    assert soft(5 * GIB).room() == memory.SOFT_ROOM
    assert soft(GIB).room() == 3 * GIB  # below the budget, the budget's own room
    assert soft(5 * GIB, free=RESERVE + MIB).room() == MIB  # never more than the machine has
    assert _budget(held=5 * GIB, total=4 * GIB).room() == 0
    assert not soft(4 * GIB + memory.SOFT_ROOM).short()
    assert soft(4 * GIB + memory.SOFT_ROOM + 1).short() and soft(GIB, free=RESERVE - 1).short()
    assert not default_budget({}, available=lambda: GIB).strict
    assert default_budget({ENV: "1GiB"}).strict


def test_workers_side_by_side_each_plan_for_their_share():
    budget = _budget()
    rooms: dict[int, int] = {}
    both = threading.Barrier(2)

    def worker(i: int) -> None:
        memory.share(2)
        both.wait(5)
        rooms[i] = budget.room()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rooms == {0: 3 * GIB, 1: 3 * GIB}
    assert budget.room() == 6 * GIB  # this thread shares with no one


def test_local_threads_tell_each_job_how_many_share_the_budget():
    from pathlib import Path

    from zerogap.study.executor import Node
    from zerogap.study.workers import LocalThreads

    both = threading.Barrier(2)
    seen: dict[int, list[int]] = {}

    def job(item: int, slot) -> None:
        both.wait(5)
        slot.event()
        seen[item] = [memory.workers_here()]
        both.wait(5)
        if item == 1:
            slot.event()  # item 0 may have ended; wait until it has
            while memory.workers_here() != 1:
                slot.event()
            seen[item].append(memory.workers_here())

    LocalThreads(2).run([Node(Path("a")), Node(Path("b"))], job)
    assert seen == {0: [2], 1: [2, 1]}


class _Pressure:
    """A resident figure over ``total`` for ``reads`` reads once armed, then ``held``: memory
    short for a while during a decode (another allocation came and went)."""

    def __init__(self, total: int, reads: int):
        self.total, self.reads, self.armed, self.seen = total, reads, False, 0

    def __call__(self) -> int:
        if self.armed and self.seen < self.reads:
            self.seen += 1
            return self.total + 1
        return self.total // 2


def _draw(model, tok, **kw):
    return sample(model, tok, PROMPTS, m=6, temperature=0.9, max_new_tokens=12,
                  question_ids=IDS, seed=4, **kw)


def test_memory_short_mid_call_shrinks_the_batch_and_the_samples_stay(tiny, monkeypatch,
                                                                      caplog):
    from zerogap.decoding.railcap import RailCapHook
    from zerogap.decoding.specs import RailCapConfig

    model, tok = tiny
    trajectories = [[ord(c) for c in " 5\n"], [ord(c) for c in " 17"], [], [ord(c) for c in "30"]]

    def hook():
        return RailCapHook(trajectories, RailCapConfig(n=1), samples_per_question=6)

    reference_hook = hook()
    monkeypatch.setattr(memory, "_BUDGET", MemoryBudget(GIB, "test", resident=lambda: GIB // 2,
                                                        available=lambda: 100 * GIB))
    reference = _draw(model, tok, intervention=reference_hook)
    pressure = _Pressure(GIB, reads=1)
    monkeypatch.setattr(memory, "_BUDGET", MemoryBudget(GIB, "test", resident=pressure,
                                                        available=lambda: 100 * GIB))
    monkeypatch.setattr(memory.MemoryWatch, "INTERVAL", 0.0)

    class Armed(RailCapHook):
        def __call__(self, *args):
            pressure.armed = True  # from the first step on, the next read finds memory short
            return super().__call__(*args)

    shrunk_hook = Armed(trajectories, RailCapConfig(n=1), samples_per_question=6)
    with caplog.at_level(logging.WARNING, logger="zerogap.engine"):
        shrunk = _draw(model, tok, intervention=shrunk_hook)
    assert pressure.seen == 1
    assert any("memory short" in r.getMessage() for r in caplog.records)
    assert [[g.token_ids for g in q] for q in shrunk] == \
        [[g.token_ids for g in q] for q in reference]
    # Restarted rows start their statistics afresh: none is counted twice.
    assert [[g.stats for g in q] for q in shrunk] == [[g.stats for g in q] for q in reference]
    assert all(0 <= t < VOCAB for q in shrunk for g in q for t in g.token_ids)


def test_memory_short_at_one_row_stops_with_the_budget_and_the_need(tiny, monkeypatch):
    model, tok = tiny
    monkeypatch.setattr(memory, "_BUDGET", MemoryBudget(GIB, "--max-memory 1GiB",
                                                        resident=lambda: GIB + 1,
                                                        available=lambda: 100 * GIB))
    with pytest.raises(MemoryShortError) as err:
        _draw(model, tok)
    text = str(err.value)
    assert "memory budget 1.0 GiB (--max-memory 1GiB)" in text and "one row" in text
    assert "\n" not in text


@pytest.fixture
def fresh_budget(monkeypatch):
    """The process's budget read anew by the command under test, and forgotten after it; the
    machine reads as having plenty available, whatever this one has."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(memory, "_BUDGET", None)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 100 * GIB)
    yield
    memory.reset_budget()


@pytest.mark.parametrize(("given", "named"), [
    (["--max-memory", "6XB"], "--max-memory '6XB'"),
    (["--max-memory", "1MiB"], "--max-memory '1MiB'")])
def test_a_bad_flag_is_refused_in_one_line_before_any_model_loads(
        tmp_path, capsys, fresh_budget, given, named):
    from helpers import refused, sample_args

    run_dir = tmp_path / "run"
    refused(capsys, sample_args(tmp_path / "no-model-here", run_dir, *given), named)
    assert not run_dir.exists()


def test_a_bad_variable_is_refused_in_one_line_before_any_model_loads(
        tmp_path, capsys, monkeypatch, fresh_budget):
    from helpers import refused, sample_args

    monkeypatch.setenv(ENV, "plenty")
    run_dir = tmp_path / "run"
    refused(capsys, sample_args(tmp_path / "no-model-here", run_dir), f"{ENV} 'plenty'")
    assert not run_dir.exists()


def test_a_budget_too_small_for_one_row_stops_in_one_line_and_the_run_resumes(
        tiny_dir, tmp_path, capsys, monkeypatch, fresh_budget):
    from helpers import refused, run_main, sample_args, stored_samples

    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2", "--max-memory", "4GiB")) == 0
    first = stored_samples(run_dir)
    assert first
    capsys.readouterr()
    # Far less than this process already holds: not one row of the next questions fits.
    refused(capsys, sample_args(tiny_dir, run_dir, "--limit", "4", "--max-memory", "64MiB"),
            "memory budget 64 MiB (--max-memory 64MiB)", "one row", "--max-memory")
    assert stored_samples(run_dir) == first  # what was stored stays
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "4", "--max-memory", "4GiB")) == 0
    resumed = stored_samples(run_dir)
    assert len(resumed) == 2 * len(first) and set(first) <= set(resumed)


def test_a_patch_whose_source_keeps_its_keys_in_the_cache_sizes_rows_with_them(tiny,
                                                                               monkeypatch):
    """The shortcut patch's source keeps as many layers in the row cache as the model: a
    patched row's keys and values weigh twice an unpatched one's, and the batch is sized so."""
    import helpers
    from zerogap.decoding.shortcut import NeuronPatch
    from zerogap.engine import hf

    model, tok = tiny
    seen = []

    def spy(**kwargs):
        seen.append(kwargs["per_token"])
        return real(**kwargs)

    real = hf.decode_row_bytes
    monkeypatch.setattr(hf, "decode_row_bytes", spy)
    monkeypatch.setattr(memory, "_BUDGET", MemoryBudget(GIB, "test", resident=lambda: 0,
                                                        available=lambda: 100 * GIB))
    plain = _draw(model, tok)
    patched = _draw(model, tok, patch=NeuronPatch(helpers.tiny_model(1), [(0, 3), (1, 5)]))
    assert len(seen) == 2 and seen[1] == 2 * seen[0] > 0
    assert len(plain) == len(patched) == len(PROMPTS)


def test_freed_heap_memory_goes_back_to_the_kernel_while_the_process_runs():
    """What the heap keeps after a free counts as resident until it is handed back: in a
    fresh process, 200 MB freed in the middle of the heap (each block pinned by a small one
    after it) stays resident without the trimmer and leaves within a few of its intervals."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys, time
        from zerogap.engine import memory
        blocks, pins = [], []
        for _ in range(3200):
            blocks.append(bytearray(64 << 10))
            pins.append(bytearray(1024))
        before = memory.resident_bytes()
        del blocks
        time.sleep(0.6)
        kept = memory.resident_bytes()
        if sys.argv[1] == "trim":
            memory.keep_trimmed(0.1)
            time.sleep(0.6)
        print(before, kept, memory.resident_bytes())
    """)
    figures = {}
    for mode in ("keep", "trim"):
        done = subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                              text=True, check=True)
        figures[mode] = [int(x) for x in done.stdout.split()]
    before, kept, after = figures["keep"]
    assert kept > before - 50 * MIB and after > before - 50 * MIB  # the heap kept it
    before, kept, after = figures["trim"]
    assert after < kept - 150 * MIB  # handed back
