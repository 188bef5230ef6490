"""``zerogap task list|show|grade`` through the real CLI entry point."""

import json

import pytest

from zerogap import cli


def test_task_list(capsys):
    assert cli.main(["task", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    # Other tests may register tasks of their own; the built-in ones are listed in order.
    names = [line.split()[0] for line in out]
    assert [name for name in names if name in ("arith", "gsm8k", "jsonl")] == [
        "arith",
        "gsm8k",
        "jsonl",
    ]
    assert "lmeval-flexible" in out[-1] and "anchor" in out[-1]


def test_task_show_renders_prompt_and_gold(capsys, gsm8k_dir):
    assert cli.main(["task", "show", "gsm8k", "--task-option", f"path={gsm8k_dir}", "--index",
                     "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# task gsm8k, question test-0, gold answer 18\n")
    assert out.count("\nA: ") == 8
    assert out.rstrip("\n").endswith("farmers' market?\nA:")
    config = json.loads(out.splitlines()[1].removeprefix("# config "))
    assert config["k"] == 8 and config["path"] == str(gsm8k_dir)


def test_task_show_options(capsys, gsm8k_dir):
    argv = ["task", "show", "gsm8k", "--task-option", f"path={gsm8k_dir}", "--index", "3",
            "--task-option", "k=0"]
    assert cli.main([*argv, "--split", "train"]) == 0
    out = capsys.readouterr().out
    assert "question train-3" in out and "\nA: " not in out
    assert cli.main(["task", "show", "arith", "--index", "1", "--task-option", "k=1",
                     "--task-option", "seed=4"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nA:") == 2 and "question test-1" in out


def test_task_grade_modes(capsys, gsm8k_dir, tmp_path):
    base = ["task", "grade", "gsm8k", "--task-option", f"path={gsm8k_dir}", "--index", "0"]
    assert cli.main([*base, "--response", "So $18.00."]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "task": "gsm8k",
        "id": "test-0",
        "mode": "anchor",
        "gold": "18",
        "extracted": "18",
        "correct": True,
    }
    response = tmp_path / "r.txt"
    response.write_text("So $18.00.", encoding="utf-8")
    assert cli.main([*base, "--response-file", str(response), "--grading", "lmeval-flexible"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["extracted"] == "$18.00." and result["correct"] is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["task", "show", "arith", "--index", "999"], "--index 999 is out of range"),
        (["task", "show", "arith", "--index", "0", "--task-option", "path=x"],
         "task arith has no option 'path'; known: exemplars, k"),
        (["task", "show", "nope", "--index", "0"], "unknown task 'nope'"),
        (["task", "show", "jsonl", "--task-option", "path=missing.jsonl", "--index", "0"],
         "missing.jsonl"),
        (["task", "grade", "arith", "--index", "0", "--response-file", "no.txt"], "no.txt"),
    ],
)
def test_user_errors_are_one_line(capsys, argv, message):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("zerogap task: error: ") and message in err
    assert err.count("\n") == 1


def test_grade_needs_a_response(capsys):
    with pytest.raises(SystemExit):
        cli.main(["task", "grade", "arith", "--index", "0"])
    assert "--response" in capsys.readouterr().err


def test_task_list_describes_every_task_and_the_docs_table_names_each(capsys):
    from pathlib import Path

    from zerogap.tasks import task_config_class, task_names

    # The built-in tasks (other tests register tasks of their own in this process).
    built_in = [name for name in task_names()
                if task_config_class(name).__module__.startswith("zerogap.tasks")]
    assert {"arith", "gsm8k", "jsonl", "multistep"} <= set(built_in)
    assert cli.main(["task", "list"]) == 0
    described = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert [name for name in built_in if len(described[name].split()) < 5] == []
    table = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text().split(
        "```", 1)[0]
    assert [name for name in built_in if f"| `{name}` |" not in table] == []
