"""A study's progress: one :class:`StudyProgress` state, fed by the jobs through a :class:`Tracker`.

A job tells its progress to a :class:`JobProgress`, which hands each event to its executor's
slot (:meth:`zerogap.study.executor.Slot.report`); the executor carries it to the study's
process, wherever the job runs, and :meth:`Tracker.replay` applies it there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zerogap.study.executor import Slot


@dataclass
class StudyProgress:
    """The one progress state of a whole study; ``eta`` is None until a rate is known.

    ``part_*`` count the current stage's own units when it has some (neuron location's greedy
    decodes), which the questions counter does not see; a stage change clears them.
    ``row_seconds`` is the time the rows took up to their last advance and ``part_rate`` the
    seconds per part unit (0 until known), so the ETA is a rate of work done, not of time spent
    loading models or in other stages, and stays put between advances (a display may count it
    down).
    """

    stage: str = ""
    jobs_done: int = 0
    jobs_total: int = 0
    questions_done: int = 0
    questions_total: int = 0
    rows_done: int = 0
    rows_total: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    row_seconds: float = 0.0
    part_unit: str = ""
    part_done: int = 0
    part_total: int = 0
    part_rate: float = 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds left: the sampling rows that remain at the rate of those done so far, plus,
        within a stage counting its own units, those that remain at that stage's rate."""
        if not self.rows_done:
            return None
        left = self.row_seconds / self.rows_done * (self.rows_total - self.rows_done)
        return left + self.part_rate * (self.part_total - self.part_done)


class Tracker:
    """Turns the study's events into :class:`StudyProgress`; the events of jobs side by side
    arrive in several threads at once (one per running job: :mod:`zerogap.study.executor`), so
    every change holds a lock and the stage shown is each working thread's own, joined in the
    order they started."""

    def __init__(self, callback: Callable[[StudyProgress], None] | None, state: StudyProgress):
        self.callback, self.state = callback, state
        self.mark = time.monotonic()  # the start of the work the next advance counts
        self.part_start, self.part_first = 0.0, 0
        self.part_owner: int | None = None  # the thread whose stage counts parts
        self.stages: dict[int, str] = {}  # thread -> its stage
        self.lock = threading.RLock()

    def stage(self, text: str) -> None:
        """A new stage of the calling thread: its work is timed from now (after any model it
        loaded) unless another thread's work is being timed already."""
        me = threading.get_ident()
        with self.lock:
            alone = not self.stages.keys() - {me}
            self.stages[me] = text
            self.state.stage = " | ".join(self.stages.values())
            if self.part_owner in (None, me):
                self._clear_part()
            if alone:
                self.mark = time.monotonic()
            self.emit()

    def leave(self) -> None:
        """The calling thread has no stage any more (a worker between jobs)."""
        me = threading.get_ident()
        with self.lock:
            if self.stages.pop(me, None) is not None:
                self.state.stage = " | ".join(self.stages.values())
            if self.part_owner == me:
                self._clear_part()

    def _clear_part(self) -> None:
        self.state.part_unit, self.state.part_done, self.state.part_total = "", 0, 0
        self.state.part_rate = 0.0
        self.part_owner = None

    def advance(self, rows: int, tokens: int) -> None:
        """One question stored: its ``rows`` (samples, or one greedy decode) and the
        ``tokens`` they generated."""
        with self.lock:
            now = time.monotonic()
            self.state.row_seconds += now - self.mark
            self.mark = now
            self.state.questions_done += 1
            self.state.rows_done += rows
            self.state.tokens += tokens
            self.emit()

    def part(self, unit: str, done: int, total: int) -> None:
        """The stage's own counter (``done`` of ``total`` ``unit``); its rate counts only the
        units done since the first report (a resumed stage's earlier ones took no time)."""
        with self.lock:
            now, state = time.monotonic(), self.state
            if state.part_unit != unit:
                state.part_unit, self.part_start, self.part_first = unit, now, done
            self.part_owner = threading.get_ident()
            state.part_total, state.part_done = total, done
            made = done - self.part_first
            state.part_rate = (now - self.part_start) / made if made else 0.0
            self.emit()

    def job_done(self) -> None:
        with self.lock:
            self.state.jobs_done += 1
            self.emit()

    def stop(self) -> None:
        """Ctrl-C while jobs run side by side: says so, while the executor ends each job at
        its next event (a stored question, a neuron decode), so every store closes cleanly
        before the study stops."""
        with self.lock:
            self.stages.clear()
            self.state.stage = "interrupted: ending the running jobs at their next question"
            self.emit()

    def emit(self) -> None:
        if self.callback is not None:
            with self.lock:
                self.callback(self.state)

    def replay(self, event: tuple) -> None:
        """Apply an event a :class:`JobProgress` reported: ``(method, *arguments)`` of this
        tracker (``stage``, ``advance``, ``part``, ``leave``)."""
        name, *args = event
        if name not in _EVENTS:
            raise ValueError(f"not a progress event: {event!r}")
        getattr(self, name)(*args)


_EVENTS = ("stage", "advance", "part", "leave")


class JobProgress:
    """What one job tells the study's progress, as events through its executor's ``slot``
    (:meth:`Tracker.replay` applies them where the study runs). Each event is also one of the
    job's check-ins with the executor (:meth:`~zerogap.study.executor.Slot.event`: its share
    of the threads retaken, the stop after an interrupt), made once the event is sent: a
    question stored is counted even where the job stops there."""

    def __init__(self, slot: Slot) -> None:
        self.slot = slot

    def stage(self, text: str) -> None:
        self.slot.report("stage", text)
        self.slot.event()

    def advance(self, rows: Sequence, greedy: bool = False) -> None:
        """One question stored: its sample rows, or its greedy decode."""
        tokens = sum(len(r.token_ids) if greedy else r.n_tokens for r in rows)
        self.slot.report("advance", len(rows), tokens)
        self.slot.event()

    def part(self, unit: str, done: int, total: int) -> None:
        self.slot.report("part", unit, done, total)
        self.slot.event()


def counting_store(run_dir: Path, progress: JobProgress):
    """A run store that reports every question it writes to the job's ``progress``."""
    from zerogap.store import RunStore

    class CountingStore(RunStore):
        def add_samples(self, rows):
            rows = list(rows)
            super().add_samples(rows)
            progress.advance(rows)

        def add_greedy(self, rows):
            rows = list(rows)
            super().add_greedy(rows)
            progress.advance(rows, greedy=True)

    return CountingStore(run_dir)
