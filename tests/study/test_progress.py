"""The study's progress: an ETA from work done that stays put between events (the line counts
it down), and a stage's own counter (neuron location's decodes) shown and timed."""

import io
import re
import time

from zerogap.cli.evaluate import ProgressLine
from zerogap.study.progress import StudyProgress, Tracker


def _seconds(text: str) -> int:
    m = re.fullmatch(r"(?:(\d+)m)?(\d+)s", text)
    assert m, text
    return int(m.group(1) or 0) * 60 + int(m.group(2))


def test_the_eta_is_a_rate_of_work_and_does_not_move_between_events():
    seen = []
    state = StudyProgress(rows_total=10)
    tracker = Tracker(lambda s: seen.append(s.eta), state)
    tracker.stage("s: clean")
    time.sleep(0.05)
    tracker.advance([_Row()] * 2)  # one question of 2 rows
    first = state.eta
    assert first is not None and first >= 4 * 0.05  # 8 rows left at >= 0.025 s each
    time.sleep(0.1)  # nothing done: the estimate does not grow with the wait
    assert state.eta == first
    tracker.stage("s: locating shortcut neurons")  # a stage of its own units
    tracker.part("neuron decodes", 5, 25)  # resumed: 5 were done before, in no time here
    assert state.part_rate == 0 and state.eta == first
    time.sleep(0.05)
    tracker.part("neuron decodes", 6, 25)
    assert state.part_rate >= 0.05 and state.eta >= first + 19 * 0.05
    before = state.eta
    time.sleep(0.05)
    assert state.eta == before
    tracker.stage("s: railcap")  # the stage's counter ends with it
    assert state.part_total == 0 and state.eta == first


class _Row:
    n_tokens = 3


def test_the_line_shows_the_stage_counter_and_counts_the_eta_down():
    stream = io.StringIO()
    line = ProgressLine(stream, every=0.05)
    state = StudyProgress(stage="s: locating shortcut neurons", jobs_total=3, rows_total=11,
                          rows_done=1, row_seconds=100.0, part_unit="neuron decodes",
                          part_done=4, part_total=40)
    line(state)
    time.sleep(1.3)  # no event: the clock redraws, the ETA only falls
    line.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and all("| 4/40 neuron decodes |" in x for x in lines)
    etas = [_seconds(re.search(r"ETA (\S+) ", x).group(1)) for x in lines]
    assert etas[0] in (999, 1000) and etas == sorted(etas, reverse=True) and etas[-1] < etas[0]


def test_a_threads_event_hook_runs_at_its_own_events_only():
    """A worker's hook (``on_event``: retaking its share of torch's threads) runs in its own
    thread at each of its events, never at another thread's."""
    import threading

    calls = []
    tracker = Tracker(None, StudyProgress(rows_total=4))
    registered = threading.Event()
    go_on = threading.Event()

    def worker() -> None:
        tracker.on_event(lambda: calls.append(threading.get_ident()))
        registered.set()
        go_on.wait(5)
        tracker.stage("s: clean")
        tracker.advance([_Row()])

    thread = threading.Thread(target=worker)
    thread.start()
    registered.wait(5)
    tracker.stage("s: identity")  # the main thread's events call no hook
    tracker.advance([_Row()])
    go_on.set()
    thread.join(5)
    assert calls == [thread.ident, thread.ident]
