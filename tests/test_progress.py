"""Progress as events, drawn only by the front ends: :class:`zerogap.progress.Bars` opens a
labelled bar per stage, counts a resumed stage's earlier part as done, and shows the note."""

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
