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
    tracker.advance(2, 6)  # one question of 2 rows
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


def test_a_jobs_events_check_in_with_its_slot_and_replay_into_the_tracker():
    """A job's progress (:class:`JobProgress`) goes through its slot: each event is reported,
    then the slot's check-in runs (a stored question is counted even where the job stops
    there); the tracker replays the events where the study runs, and refuses anything else."""
    import pytest

    from zerogap.study.progress import JobProgress

    class Slot:
        index = 0

        def __init__(self):
            self.log = []

        def report(self, *event):
            self.log.append(event)

        def event(self):
            self.log.append("check-in")

    slot = Slot()
    job = JobProgress(slot)
    job.stage("s: clean")
    job.advance([_Row(), _Row()])
    job.advance([_Greedy()], greedy=True)
    job.part("neuron decodes", 1, 4)
    assert slot.log == [("stage", "s: clean"), "check-in", ("advance", 2, 6), "check-in",
                        ("advance", 1, 5), "check-in", ("part", "neuron decodes", 1, 4),
                        "check-in"]
    state = StudyProgress(rows_total=3)
    tracker = Tracker(None, state)
    for event in slot.log:
        if event != "check-in":
            tracker.replay(event)
    assert (state.stage, state.questions_done, state.rows_done, state.tokens) == \
        ("s: clean", 2, 3, 11)
    assert (state.part_unit, state.part_done, state.part_total) == ("neuron decodes", 1, 4)
    with pytest.raises(ValueError, match="not a progress event"):
        tracker.replay(("stop",))


class _Greedy:
    token_ids = [1, 2, 3, 4, 5]
