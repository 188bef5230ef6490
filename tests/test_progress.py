"""Progress as events, drawn only by the front ends: :class:`zerogap.progress.Bars` opens a
labelled bar per stage, counts a resumed stage's earlier part as done, and shows the note."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from zerogap.progress import Bars, Progress, progress_bars


def _lines(err: str) -> list[str]:
    return [line.strip() for line in err.replace("\r", "\n").splitlines() if line.strip()]


def test_a_bar_per_stage_with_its_label_unit_and_note(capsys):
    with progress_bars() as progress:
        assert isinstance(progress, Bars)
        for step in range(4):
            progress(Progress("training clean", step, 3, "step",
                              f"loss {1 / (step + 1):.4f}"))
        progress(Progress("training contaminated", 0, 2, "step"))
        progress(Progress("training contaminated", 2, 2, "step"))
    lines = _lines(capsys.readouterr().err)
    assert any(line.startswith("training clean: 100%") and "3/3" in line
               and "loss 0.2500" in line for line in lines), lines
    assert any(line.startswith("training contaminated: 100%") and "2/2" in line
               for line in lines), lines


def test_a_resumed_stage_starts_where_it_was_and_a_repeated_one_starts_again(capsys):
    bars = Bars()
    bars(Progress("questions", 5, 10, "q"))
    assert bars.bar.n == 5 and bars.bar.initial == 5  # its rate counts this process's work
    bars(Progress("questions", 10, 10, "q"))
    first = bars.bar
    bars(Progress("questions", 0, 10, "q"))  # the same stage begun again: a new bar
    assert bars.bar is not first and bars.bar.n == 0
    bars(Progress("questions", 3, 12, "q"))  # a total learnt later
    assert bars.bar.total == 12 and bars.bar.n == 3
    bars.close()
    assert bars.bar is None
    assert "questions" in capsys.readouterr().err


def test_quiet_draws_nothing(capsys):
    with progress_bars(quiet=True) as progress:
        assert progress is None
    assert capsys.readouterr().err == ""


DRAW = """
from zerogap.progress import Progress, progress_bars
with progress_bars() as progress:
    for step in range(3):
        progress(Progress("training clean", step + 1, 3, "step"))
"""


@pytest.mark.parametrize("rows", [0, 40])
def test_bars_show_on_a_terminal_that_reports_no_height(rows):
    """A pseudo-terminal sized 120 x ``rows`` (0: unsized, as under ``script``): the bar is
    drawn either way."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child = subprocess.Popen([sys.executable, "-c", DRAW], stdin=slave, stdout=slave,
                             stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert child.wait(timeout=60) == 0, out
    assert any(line.startswith("training clean: 100%") and "3/3" in line
               for line in _lines(out.decode(errors="replace"))), out
