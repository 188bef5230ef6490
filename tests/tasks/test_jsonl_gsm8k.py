"""File-backed tasks: the generic JSONL task (named fields, errors) and GSM8K."""

import json
import sys
import types

import pytest

from zerogap.errors import DataError
from zerogap.tasks import get_task, task_names
from zerogap.tasks.base import Grade, Question, Task


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_builtin_tasks_are_registered():
    assert {"arith", "gsm8k", "jsonl"} <= set(task_names())
    with pytest.raises(ValueError, match="unknown task 'mmlu'; known tasks: arith"):
        get_task("mmlu")


def test_jsonl_task_with_named_fields(tmp_path):
    path = write_jsonl(
        tmp_path / "bench.jsonl",
        [
            {"prompt": "What is 2 + 2?", "target": 4},
            {"prompt": "What is half of 5?", "target": "2.50"},
            {"prompt": "Sum?", "target": "1 + 2 = 3.\n#### 3"},
        ],
    )
    task = get_task("jsonl", path=str(path), question_field="prompt", answer_field="target")
    assert task.questions() == [
        Question("test-0", "What is 2 + 2?", "4"),
        Question("test-1", "What is half of 5?", "2.5"),
        Question("test-2", "Sum?", "3"),
    ]
    assert task.prompt(task.questions()[1]) == "Q: What is half of 5?\nA:"  # k = 0 by default
    assert task.grade(task.questions()[1], " Half is $2.5") == Grade("2.5", True)
    assert json.loads(json.dumps(task.config()))["question_field"] == "prompt"


def test_jsonl_folder_gives_splits_and_k_shot(tmp_path):
    write_jsonl(tmp_path / "test.jsonl", [{"q": "1 + 1?", "a": "2"}])
    write_jsonl(
        tmp_path / "train.jsonl",
        [{"q": f"{i} + 1?", "a": f"{i} + 1 = {i + 1}. The answer is {i + 1}."} for i in range(5)],
    )
    task = get_task("jsonl", path=tmp_path, question_field="q", answer_field="a", k=3, seed=1)
    prompt = task.prompt(task.questions()[0])
    assert prompt.count("The answer is") == 3 and prompt.endswith("Q: 1 + 1?\nA:")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"question": "q", "answer": 1}\n{"question": "q"}\n',
            "x.jsonl:2: missing field 'answer'",
        ),
        ('{"question": "q", "answer": 1}\n{oops\n', "x.jsonl:2: malformed JSON"),
        ("[1, 2]\n", "x.jsonl:1: expected a JSON object"),
        ('{"question": "q", "answer": "none"}\n', "x.jsonl:1: no number in gold answer"),
    ],
)
def test_jsonl_errors_name_file_line_and_problem(tmp_path, content, message):
    (tmp_path / "x.jsonl").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        get_task("jsonl", path=tmp_path / "x.jsonl").questions()


def test_jsonl_missing_paths_and_splits(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl: no such file or folder"):
        get_task("jsonl", path=tmp_path / "nope.jsonl").questions()
    with pytest.raises(DataError, match="no test.jsonl in this folder"):
        get_task("jsonl", path=tmp_path).questions()
    single = write_jsonl(tmp_path / "one.jsonl", [{"question": "q", "answer": 1}])
    with pytest.raises(ValueError, match="one file \\(the test split\\).*use k=0"):
        get_task("jsonl", path=single, k=2).prompt(Question("test-0", "q", "1"))
    with pytest.raises(ValueError, match="question_field must be a non-empty string"):
        get_task("jsonl", path=single, question_field="")
    with pytest.raises(ValueError, match="unknown grading mode 'exact'"):
        get_task("jsonl", path=single, mode="exact")
    with pytest.raises(ValueError, match="k must be at least 0, got -2"):
        get_task("jsonl", path=single, k=-2)


def test_gsm8k_from_a_local_folder_and_file(gsm8k_dir):
    task = get_task("gsm8k", path=gsm8k_dir)
    test = task.questions("test")
    assert len(test) == 1319 and len(task.questions("train")) == 7473
    assert test[0].id == "test-0" and test[0].answer == "18"
    assert test[0].text.startswith("Janet’s ducks lay 16 eggs per day.")
    assert task.questions("train")[7472].id == "train-7472"
    assert task.grade(test[0], " She makes 9 * 2 = $18.00 a day. The answer is 18.").correct
    assert task.stop == ("Q:", "</s>", "<|im_end|>")
    config = task.config()
    assert config == {
        "task": "gsm8k",
        "path": str(gsm8k_dir),
        "k": 8,
        "seed": 0,
        "exemplars": None,
        "mode": "anchor",
    }
    single = get_task("gsm8k", path=gsm8k_dir / "test.jsonl", k=0)
    assert single.questions() == test


def test_gsm8k_modes_grade_differently(gsm8k_dir):
    q = get_task("gsm8k", path=gsm8k_dir).questions()[0]
    response = " She makes 9 * 2 = $18.00."
    assert get_task("gsm8k", path=gsm8k_dir).grade(q, response) == Grade("18", True)
    flexible = get_task("gsm8k", path=gsm8k_dir, mode="lmeval-flexible")
    assert flexible.grade(q, response) == Grade("$18.00.", False)


def test_gsm8k_hub_without_datasets_says_pass_a_path(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes "import datasets" fail
    with pytest.raises(ValueError, match=r"needs the 'datasets' package \(pip install -e "
                                         r"'\.\[datasets\]' from a checkout\), or pass a "
                                         r"local copy"):
        get_task("gsm8k").questions()


def test_gsm8k_hub_offline_says_pass_a_path(monkeypatch):
    def load_dataset(name, config, split):
        assert (name, config, split) == ("openai/gsm8k", "main", "test")
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub\nmore detail")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(ValueError) as err:
        get_task("gsm8k").questions()
    assert str(err.value) == (
        "could not load openai/gsm8k from the hub (Couldn't reach 'openai/gsm8k' on the Hub); "
        "or pass a local copy: --task-option path=DIR (a folder with train.jsonl and test.jsonl)"
    )


def test_gsm8k_from_the_real_datasets_package_offline_is_one_line_with_the_fix(monkeypatch,
                                                                             capsys, tmp_path):
    """With the ``datasets`` extra installed and no hub, sampling GSM8K says how to pass the
    local copy, in the spelling ``zerogap sample`` takes; nothing is written."""
    pytest.importorskip("datasets")
    from zerogap.cli import main

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no cached copy to fall back on
    run = tmp_path / "run"
    assert main(["sample", "--model", "embedded", "--task", "gsm8k", "--out", str(run),
                 "-m", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "could not load openai/gsm8k" in err
    assert err.endswith("--task-option path=DIR (a folder with train.jsonl and test.jsonl)")
    assert not run.exists()


def test_gsm8k_hub_rows_get_ids_and_gold(monkeypatch):
    rows = [{"question": "Q one", "answer": "1+1=<<1+1=2>>2\n#### 2"}]
    monkeypatch.setitem(
        sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda *a, **kw: rows)
    )
    assert get_task("gsm8k", k=0).questions("test") == [Question("test-0", "Q one", "2")]


def test_every_task_follows_the_protocol_and_rebuilds_from_its_config(tmp_path, gsm8k_dir):
    path = write_jsonl(tmp_path / "b.jsonl", [{"p": "1 + 2?", "t": 3}])
    tasks = [
        get_task("arith", seed=2, n_test=5, step_weights=(1, 1, 0), number_ranges=((3, 9),)),
        get_task("gsm8k", path=gsm8k_dir, k=3, seed=7, mode="lmeval-flexible"),
        get_task("jsonl", path=path, question_field="p", answer_field="t"),
    ]
    for task in tasks:
        assert isinstance(task, Task)
        config = json.loads(json.dumps(task.config()))
        rebuilt = get_task(config.pop("task"), **config)
        assert rebuilt.config() == task.config()
        q = task.questions()[0]
        assert rebuilt.questions()[0] == q and rebuilt.prompt(q) == task.prompt(q)
