"""How far long work is, reported as values: library code calls a :data:`ProgressCallback`
with :class:`Progress` events and draws nothing, so a caller embedding zerogap gets the
figures, not bars. :class:`Bars` draws them (one labelled bar per stage on stderr, its rate
and ETA from this process's work only: a resumed stage's earlier part is not counted); only
the front ends create it: ``cli/`` and the lm-evaluation-harness model
(tests/test_import_rules.py checks who draws).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Progress:
    """``done`` of ``total`` ``unit`` of ``stage`` so far (``done`` may start above 0 on a
    resume); ``note`` carries the stage's own figures ("312 tok/s", "loss 0.4130") or ""."""

    stage: str
    done: int
    total: int
    unit: str = "it"
    note: str = ""


ProgressCallback = Callable[[Progress], None]


class Bars:
    """A :data:`~zerogap.progress.ProgressCallback` drawing a tqdm bar per stage."""

    def __init__(self) -> None:
        self.bar: Any = None  # a tqdm bar, imported when the first event comes
        self.stage: str | None = None

    def __call__(self, event: Progress) -> None:
        # A new stage, or the same one begun again (a run's greedy pass, then its samples).
        if self.bar is None or event.stage != self.stage or event.done < self.bar.n:
            from tqdm.auto import tqdm

            self.close()
            self.stage = event.stage
            self.bar = tqdm(desc=event.stage, total=event.total, initial=event.done,
                            unit=event.unit, smoothing=0.05, **_bar_size())
        elif event.total != self.bar.total:  # a stage whose size became known later
            self.bar.total = event.total
        self.bar.update(event.done - self.bar.n)
        if event.note:
            self.bar.set_postfix_str(event.note, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _bar_size() -> dict[str, Any]:
    """tqdm's size arguments: its width follows the terminal's, except on a terminal that
    reports no height (a pseudo-terminal nobody sized: ``script``, some CI runners), where
    tqdm computes -1 rows and hides every bar; there the size is fixed once, from
    :func:`shutil.get_terminal_size`'s fallbacks."""
    try:
        rows = os.get_terminal_size(sys.stderr.fileno()).lines
    except (AttributeError, OSError, ValueError):  # not a terminal, or no file descriptor
        rows = None
    if rows != 0:
        return {"dynamic_ncols": True}
    size = shutil.get_terminal_size()
    return {"ncols": size.columns, "nrows": size.lines}


@contextlib.contextmanager
def progress_bars(quiet: bool = False) -> Iterator[ProgressCallback | None]:
    """:class:`Bars` for the block (closed after it), or None when ``quiet``."""
    if quiet:
        yield None
        return
    bars = Bars()
    try:
        yield bars
    finally:
        bars.close()
