"""Task options are configs: every bad one is a one-line error (exit 2) from ``zerogap sample``
and ``zerogap neurons``, raised before any model loads or anything is written."""

import pytest

from zerogap import cli
from zerogap.tasks import get_task, task_option_values


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("zerogap.models.load_model", refuse)


def _cases(tmp_path, gsm8k_dir):
    no_train = tmp_path / "gsm8k-test-only"
    no_train.mkdir()
    (no_train / "test.jsonl").write_bytes((gsm8k_dir / "test.jsonl").read_bytes())
    return [
        (["arith", "colour=red"], "task arith has no option 'colour'; known: exemplars, k"),
        (["jsonl"], "task jsonl needs --task-option path=VALUE"),
        (["arith", "number_ranges=5"], "--task-option number_ranges: must be a list, got 5"),
        (["arith", "number_ranges=[[1, 9]]"], "number_ranges entries must be [low, high] with "
                                              "2 <= low <= high, got [1, 9]"),
        (["arith", f"exemplars={tmp_path}"], f"{tmp_path}: is a directory, not a file"),
        (["arith", "n_train=3"], "the train split (3 items) has too few one-step"),
        (["arith", "mode=exact"], "unknown grading mode 'exact'"),
        (["gsm8k", f"path={no_train}"], f"{no_train}: no train.jsonl in this folder (the k=8 "
                                        "exemplars come from the train split"),
    ]


def _argv(command, task, options, tmp_path):
    task_args = ["--task", task, *[a for o in options for a in ("--task-option", o)]]
    if command == "sample":
        return ["sample", "--model", "embedded", *task_args, "--out", str(tmp_path / "run"),
                "--quiet"]
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("test-0\n")
    return ["neurons", "--base", "embedded", "--contaminated", "embedded", "--clean",
            "embedded", *task_args, "--split-file", str(leaked), "--out", str(tmp_path / "n.json"),
            "--quiet"]


@pytest.mark.parametrize("command", ["sample", "neurons"])
def test_bad_task_options_are_one_line_errors_before_any_load_or_write(
        command, tmp_path, gsm8k_dir, capsys, no_model_load):
    for (task, *options), message in _cases(tmp_path, gsm8k_dir):
        assert cli.main(_argv(command, task, options, tmp_path)) == 2, (task, options)
        err = capsys.readouterr().err
        assert err.startswith(f"zerogap {command}: error: ") and err.count("\n") == 1
        assert message in err, err
        assert not (tmp_path / "run").exists() and not (tmp_path / "n.json").exists()
        assert not (tmp_path / "n.json.journal.jsonl").exists()


def test_task_options_convert_by_their_declared_types():
    typed = task_option_values("arith", {"n_test": "4", "number_ranges": "[[3, 5]]",
                                         "step_weights": "[1, 0, 0]", "exemplars": "none"})
    assert typed == {"n_test": 4, "number_ranges": ((3, 5),), "step_weights": (1, 0, 0),
                     "exemplars": None}
    task = get_task("arith", **typed)
    assert task.config()["number_ranges"] == ((3, 5),) and len(task.questions()) == 4
    with pytest.raises(ValueError, match=r"--task-option k: must be an integer, got 'two'"):
        task_option_values("arith", {"k": "two"})
