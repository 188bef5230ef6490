"""``zerogap contaminate``: flags map onto the config; bad input stops before any write."""

import json

import pytest

from zerogap import cli
from zerogap.cli.contaminate import config_from_args
from zerogap.pipelines.contamination import plan
from zerogap.pipelines.contamination_config import ContaminationConfig, preset


def parse(argv):
    return cli.build_parser().parse_args(["contaminate", *argv])


def test_preset_then_explicit_flags_override_it(tmp_path):
    config = config_from_args(parse([
        "--preset", "laptop", "--epochs", "2", "--task-option", "k=3", "--lora-alpha", "32",
        "--sweep", "copies=1,5,20", "--merge", "--out", str(tmp_path),
    ]))
    laptop = preset("laptop")
    assert config.model == laptop.model and config.leaked == laptop.leaked
    assert (config.epochs, config.task_options, config.lora_alpha) == (2, {"k": 3}, 32)
    assert config.sweep_copies == (1, 5, 20) and config.sweep_epochs == () and config.merge
    assert config_from_args(parse(["--out", str(tmp_path)])) == ContaminationConfig()


def test_the_multistep_preset_builds_a_valid_plan(tmp_path):
    # The opt-in regime preset (docs/demo-regime.md, C3) as `zerogap contaminate --preset
    # multistep` reads it; planned (task, split, data), not trained.
    config = config_from_args(parse(["--preset", "multistep", "--out", str(tmp_path)]))
    assert config == preset("multistep")
    assert (config.task, config.train_questions, config.leaked) == ("multistep", 320, 64)
    assert (config.learning_rate, config.contaminated_learning_rate) == (1e-3, 2e-3)
    assert (config.clean_epochs, config.epochs, config.replay) == (2, 8, 32)
    planned = plan(config)
    assert len(planned.clean) == 320 and len(planned.leaked) == 64
    # M_co's data per epoch: the first 32 train questions and the leaked items 3 times each.
    assert config.copies == 3
    assert planned.contaminated(config.copies) == planned.clean[:32] + planned.leaked * 3
    assert not any(tmp_path.iterdir())  # planning writes nothing


@pytest.mark.parametrize("argv, message", [
    (["--lora-r", "0"], "--lora-r must be at least 1, got 0"),
    (["--task", "nosuch"], "unknown task 'nosuch'"),
    (["--task", "arith", "--general", "missing.jsonl"], "missing.jsonl"),
    (["--task", "arith", "--leaked", "200"], "leaked=200 must leave both halves non-empty"),
    (["--task", "arith", "--train-questions", "5000"], "train_questions=5000"),
])
def test_bad_input_exits_2_before_writing(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["contaminate", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zerogap contaminate: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_folder_of_another_build_is_refused_untouched(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    manifest = {"format": 1, "config": ContaminationConfig(task="arith").to_dict(), "stages": {}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["contaminate", "--task", "arith", "--epochs", "2", "--out", str(out)]) == 2
    assert "holds a build with epochs=5, not 2" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]

    (out / "manifest.json").unlink()
    (out / "notes.txt").write_text("mine")
    assert cli.main(["contaminate", "--task", "arith", "--out", str(out)]) == 2
    assert "holds no manifest.json" in capsys.readouterr().err


def test_sweep_syntax_errors_are_usage_errors(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        parse(["--sweep", "epochs=1,x", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        parse(["--sweep", "lr=1,2", "--out", str(tmp_path)])


def test_a_build_with_tuple_task_options_is_recognised_from_its_manifest(tmp_path):
    # JSON has no tuples: a multistep build's step_weights reads back from manifest.json as a
    # list, and the same build must still be recognised (resumed), another one refused.
    from zerogap.errors import StoreError
    from zerogap.pipelines.contamination import check_existing

    config = ContaminationConfig(task="multistep",
                                 task_options={"step_weights": (0.5, 0.35, 0.15)})
    manifest = {"format": 1, "config": json.loads(config.to_json()), "stages": {}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert check_existing(config, tmp_path) == manifest
    other = ContaminationConfig(task="multistep", task_options={"step_weights": (1, 0, 0)})
    with pytest.raises(StoreError, match="holds a build with task_options="):
        check_existing(other, tmp_path)
