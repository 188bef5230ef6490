"""The study's side-by-side scheduler (:mod:`zerogap.study.workers`): order, width, failure."""

import threading
import time
from pathlib import Path

import pytest

from zerogap.study.workers import default_workers, run_side_by_side, threads_per_worker


def _record(durations: dict[int, float]):
    """A run function that sleeps each item's duration and records (item, worker, start, end)."""
    log, lock = [], threading.Lock()

    def run(item: int, worker: int, running) -> None:
        start = time.monotonic()
        time.sleep(durations.get(item, 0.05))
        with lock:
            log.append((item, worker, start, time.monotonic()))

    return run, log


def test_items_wait_for_what_they_read_and_run_two_at_a_time():
    # 0 and 1 write a and b; 2 reads a; 3 reads b and c (c: item 2's output); 4 reads nothing
    outputs = [Path("a"), Path("b"), Path("c"), Path("d"), Path("e")]
    reads = [(), (), (Path("a"),), (Path("b"), Path("c")), ()]
    run, log = _record({0: 0.3, 1: 0.05, 2: 0.1})
    run_side_by_side(outputs, reads, run, 2)
    spans = {item: (start, end) for item, _, start, end in log}
    assert sorted(spans) == [0, 1, 2, 3, 4]  # every item once
    assert spans[2][0] >= spans[0][1]  # 2 started after 0 ended
    assert spans[3][0] >= max(spans[1][1], spans[2][1])
    # item 2 was blocked behind 0, so the free worker went on to 4 meanwhile
    assert spans[4][0] < spans[0][1]
    edges = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()],
                   key=lambda x: (x[0], x[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak == 2
    assert {worker for _, worker, _, _ in log} == {0, 1}


def test_an_item_others_wait_on_starts_before_earlier_free_ones():
    # 0 blocks both workers briefly; then 1, 2 (free) and 3 (item 4 waits on it) are free:
    # 3 goes first although it comes last of them
    outputs = [Path("a"), Path("b"), Path("c"), Path("d"), Path("e")]
    reads = [(), (Path("a"),), (Path("a"),), (Path("a"),), (Path("d"),)]
    started = []
    run_side_by_side(outputs, reads, lambda item, worker, running: started.append(item), 2)
    assert started[0] == 0 and started[1] == 3 and started.index(4) > started.index(3)
    assert sorted(started) == [0, 1, 2, 3, 4]


def test_one_worker_runs_in_order_in_the_calling_thread():
    seen = []
    run_side_by_side([Path("a"), Path("b"), Path("c")], [(), (), ()],
                     lambda item, worker, running: seen.append((item, worker, running(),
                                                                 threading.get_ident())), 1)
    me = threading.get_ident()
    assert seen == [(0, 0, 1, me), (1, 0, 1, me), (2, 0, 1, me)]


def test_a_failure_stops_new_items_and_is_raised_with_its_traceback():
    started = []

    def run(item: int, worker: int, running) -> None:
        started.append(item)
        if item == 0:
            raise RuntimeError("item 0 failed")
        time.sleep(0.2)

    outputs = [Path(str(i)) for i in range(6)]
    # every later item reads item 0's output, so none may start once it failed
    with pytest.raises(RuntimeError, match="item 0 failed") as caught:
        run_side_by_side(outputs, [(), *[(Path("0"),)] * 5], run, 2)
    assert started == [0]
    assert caught.traceback[-1].name == "run"  # raised where it happened


def test_defaults_split_the_threads():
    assert default_workers("cpu", False, threads=2) == 2
    assert default_workers("cpu", False, threads=1) == 1
    assert default_workers("cuda", False, threads=16) == 1
    assert default_workers("cpu", True, threads=16) == 1  # an exclusive backend (vLLM)
    assert threads_per_worker(2, 2) == 1 and threads_per_worker(2, 16) == 8
    assert threads_per_worker(2, 1) == 1
    assert threads_per_worker(1, 2) == 2  # an item running alone takes every thread


def test_an_item_left_running_alone_sees_it():
    """``running()`` counts the items running now: 2 while both workers are busy, 1 once the
    other item has ended and nothing is left to start (the item may then take every thread)."""
    both = threading.Barrier(2)
    seen: dict[int, list[int]] = {}

    def run(item: int, worker: int, running) -> None:
        both.wait(5)  # both items have started
        seen[item] = [running()]
        both.wait(5)  # both have looked
        if item == 0:
            return
        deadline = time.monotonic() + 5
        while running() != 1 and time.monotonic() < deadline:  # item 0's worker lets go
            time.sleep(0.01)
        seen[item].append(running())

    run_side_by_side([Path("a"), Path("b")], [(), ()], run, 2)
    assert seen == {0: [2], 1: [2, 1]}


def test_ctrl_c_ends_the_running_items_and_then_stops(ctrl_c):
    """A Ctrl-C while items run: no new item starts, ``interrupted`` asks the running ones to
    end, they are waited for, and the KeyboardInterrupt reaches the caller. The item whose
    thread the caller was waiting for when the Ctrl-C came takes longest to end: it is
    waited for all the same (a join interrupted by it would take its thread for ended)."""
    import _thread

    stop = threading.Event()
    started, ended = [], []

    def run(item: int, worker: int, running) -> None:
        started.append(item)
        if item == 0:
            time.sleep(0.2)  # the caller is waiting for this worker's thread
            _thread.interrupt_main()  # as a Ctrl-C the kernel hands to the main thread
        stop.wait(10)  # a running job until told to end
        if item == 0:
            time.sleep(0.5)  # its next stored question comes late
        ended.append(item)

    with pytest.raises(KeyboardInterrupt):
        run_side_by_side([Path(str(i)) for i in range(6)], [()] * 6, run, 2,
                         interrupted=stop.set)
    assert stop.is_set() and sorted(started) == sorted(ended) and len(started) <= 2


def test_local_threads_give_each_job_its_share_and_end_them_at_their_next_event(ctrl_c):
    """The default executor (:class:`LocalThreads`): two jobs side by side each get half of
    torch's threads (at most the cores this process may use) at their events and the whole
    again once alone; after a Ctrl-C, each ends at its next event, the interrupted callback has
    run and the caller gets the interrupt."""
    import _thread

    import torch

    from zerogap.engine.threads import core_limit
    from zerogap.study.executor import Node
    from zerogap.study.workers import LocalThreads

    saved = torch.get_num_threads()
    torch.set_num_threads(4)
    budget = min(4, core_limit())
    both = threading.Barrier(2)
    shares: dict[int, list[tuple[int, int]]] = {}
    try:
        def job(item: int, slot) -> None:
            both.wait(5)
            slot.event()  # both run now: half each
            shares[item] = [(slot.index, torch.get_num_threads())]
            both.wait(5)
            if item == 1:
                deadline = time.monotonic() + 5
                while torch.get_num_threads() != budget and time.monotonic() < deadline:
                    time.sleep(0.01)
                    slot.event()  # item 0 has ended: the share grows back
                shares[item].append((slot.index, torch.get_num_threads()))

        LocalThreads(2).run([Node(Path("a")), Node(Path("b"))], job)
        half = max(1, budget // 2)
        assert sorted([shares[0][0], shares[1][0]]) == [(0, half), (1, half)]
        assert shares[1][1][1] == budget and torch.get_num_threads() == 4

        told, started, ended = [], [], []

        def stopping(item: int, slot) -> None:
            started.append(item)
            if item == 0:
                _thread.interrupt_main()  # a Ctrl-C, handed to the main thread
            try:
                for _ in range(1000):  # a job reporting its events until told to stop
                    time.sleep(0.01)
                    slot.event()
            finally:
                ended.append(item)

        with pytest.raises(KeyboardInterrupt):
            LocalThreads(2).run([Node(Path(str(i))) for i in range(4)], stopping,
                                interrupted=lambda: told.append(True))
        assert told == [True] and sorted(ended) == sorted(started) and len(started) <= 2
    finally:
        torch.set_num_threads(saved)


def test_local_threads_hand_a_jobs_events_to_report_in_order_in_its_own_thread():
    """What a job reports (:meth:`Slot.report`) reaches ``report(item, event)`` at once, in
    the thread that runs the job: in order, the calling thread's own when jobs run in order."""
    from zerogap.study.executor import Node
    from zerogap.study.workers import LocalThreads

    seen: list[tuple[int, tuple, int]] = []

    def job(item: int, slot) -> None:
        seen.append((item, ("ran",), threading.get_ident()))
        slot.report("stage", f"job {item}")
        time.sleep(0.05)
        slot.report("leave")

    def report(item: int, event: tuple) -> None:
        seen.append((item, event, threading.get_ident()))

    for width in (1, 2):
        seen.clear()
        LocalThreads(width).run([Node(Path(str(i))) for i in range(3)], job, report=report)
        for item in range(3):
            mine = [(event, thread) for i, event, thread in seen if i == item]
            assert [event for event, _ in mine] == [("ran",), ("stage", f"job {item}"),
                                                    ("leave",)]
            assert len({thread for _, thread in mine}) == 1
        threads = {thread for _, _, thread in seen}
        assert threads == {threading.get_ident()} if width == 1 else \
            threading.get_ident() not in threads
