"""One flag vocabulary: every flag helped and its default shown, one type and one wording per
name across commands, config-backed flags generated from their fields, errors naming the flag
typed, typos named in the command's own usage, and the table in docs/flags.md."""

import argparse
import json

import pytest

from zerogap.cli import build_parser, main
from zerogap.cli.evaluate import _study_from_args
from zerogap.cli.flags import _commands, _described, add_config_arguments
from zerogap.engine.base import EngineOptions, SamplingSpec
from zerogap.runs import study_dtype


@pytest.fixture(scope="module")
def commands():
    return dict(_commands(build_parser()))


def _flags(parser):
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction | argparse._VersionAction)]


def test_every_flag_has_help_and_shows_its_default(commands):
    assert {"sample", "greedy", "evaluate", "score", "neurons", "paraphrase", "import",
            "contaminate", "task show", "runs export"} <= set(commands)
    silent = []
    for name, parser in commands.items():
        formatter = parser._get_formatter()
        one_of = {a for g in parser._mutually_exclusive_groups if g.required
                  for a in g._group_actions}
        for action in _flags(parser):
            shown = formatter._get_help_string(action) or ""
            repeatable = isinstance(action, argparse._AppendAction)
            switch = isinstance(action, argparse._StoreTrueAction)
            if not shown.strip() or not (action.required or action in one_of or repeatable
                                         or switch or "default" in shown):
                silent.append(f"{name} {action.option_strings[0]}: {shown!r}")
    assert not silent


def test_one_name_means_one_kind_of_value_and_one_wording_everywhere(commands):
    """A flag spelled alike in two commands takes the same type, choices and arity, and is
    worded alike (its default and bounds may be the command's own)."""
    kinds: dict[str, dict] = {}
    wordings: dict[str, dict] = {}
    for name, parser in commands.items():
        for action in _flags(parser):
            kind = (getattr(action.type, "__name__", "str"),  # no type: a string
                    None if action.choices is None else tuple(action.choices), action.nargs,
                    next(c.__name__ for c in type(action).__mro__  # argparse's own kind
                         if c.__module__ == "argparse"))
            for spelling in action.option_strings:
                kinds.setdefault(spelling, {}).setdefault(kind, []).append(name)
                wordings.setdefault(spelling, {}).setdefault(_described(action)[0], []).append(
                    name)
    assert not {flag: seen for flag, seen in kinds.items() if len(seen) > 1}
    assert not {flag: seen for flag, seen in wordings.items() if len(seen) > 1}
    assert [kind[0] for kind in kinds["--split"]] == ["str"]  # a split name, never a file
    assert "paraphrase" not in sum(kinds["--backend"].values(), [])
    # The config-backed flags shared by several commands are all there, one wording each.
    for flag in ("-m", "--seed", "--dtype", "--limit", "--task", "--split", "--neuron-block",
                 "--calibration-size", "--controls", "--ablation", "--model", "--clean"):
        assert len(sum(wordings[flag].values(), [])) >= 2, flag


@pytest.mark.parametrize(("argv", "prog", "named"), [
    (["sample", "--modle", "X"], "zerogap sample", "--modle (did you mean --model?)"),
    (["score", "--margn", "3"], "zerogap score", "--margn (did you mean --margin?)"),
    (["score", "--clean", "c", "--mitigated", "a=b", "--margn", "3"], "zerogap score",
     "--margn (did you mean --margin?)"),
    (["runs", "show", "r", "--jsn"], "zerogap runs show", "--jsn (did you mean --json?)"),
    (["score", "--clean", "c", "--mitigated", "a=b", "stray"], "zerogap score", "stray"),
    # The spellings a 0.1 package no longer keeps are typos like any other.
    (["sample", "--model", "m", "--task", "t", "--run-dir", "r"], "zerogap sample",
     "--run-dir"),
    (["score", "--clean", "c", "--mitigated", "a=b", "--bootstrap", "9"], "zerogap score",
     "--bootstrap"),
    (["evaluate", "--task-split", "train"], "zerogap evaluate",
     "--task-split (did you mean --split?)"),
    (["task", "show", "gsm8k", "--path", "data"], "zerogap task show", "--path"),
    # No abbreviations: a flag's prefix is a typo, not the flag.
    (["sample", "--max-new-token", "24"], "zerogap sample",
     "--max-new-token (did you mean --max-new-tokens?)"),
])
def test_a_typo_is_one_line_in_the_commands_own_name(argv, prog, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"{prog}: error: unrecognized arguments: {named}\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["sampel"], "zerogap: error: unknown command 'sampel' (did you mean sample?); choose from"),
    (["task", "lst"], "zerogap task: error: unknown command 'lst' (did you mean list?)"),
    (["sample", "--backend", "vlm"],
     "zerogap sample: error: unknown --backend 'vlm' (did you mean vllm?); choose from hf, vllm"),
    (["sample", "--model", "m"], "zerogap sample: error: the following arguments are required"),
])
def test_argparse_errors_are_one_line_with_the_nearest_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(message) and err.count("\n") == 1, err


@pytest.mark.parametrize(("argv", "message"), [
    (["contaminate", "--precision", "bf16"], "zerogap contaminate: error: --precision is now "
                                             "--dtype"),
    (["neurons", "--uncontaminated", "m"], "zerogap neurons: error: --uncontaminated is now "
                                           "--clean"),
    (["neurons", "--leaked-ids", "s.json"], "zerogap neurons: error: --leaked-ids is now "
                                            "--split-file"),
    (["paraphrase", "--ids", "s.json"], "zerogap paraphrase: error: --ids is now --split-file"),
])
def test_an_old_spelling_points_to_the_new_one(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and capsys.readouterr().err == message + "\n"


def test_values_that_look_like_options_still_parse():
    args = build_parser().parse_args(["sample", "--model", "m", "--task", "t", "--out", "r",
                                      "-m5", "--temperature=0.5", "--system-instruction",
                                      "- a dash and spaces", "--seed", "3"])
    assert (args.model, args.m, args.temperature, args.seed) == ("m", 5, 0.5, 3)
    assert args.system_instruction == "- a dash and spaces"


@pytest.mark.parametrize(("argv", "message"), [
    (["sample", "-m", "-3"], "-m must be at least 1, got -3"),
    (["sample", "-T", "50"], "-T must be at most 10.0, got 50.0"),
    (["sample", "--temperature", "50"], "--temperature must be at most 10.0, got 50.0"),
    (["sample", "--strategy", "railcap", "--set", "n=0"], "--set n: must be at least 1, got 0"),
    (["sample", "--task-option", "k=-1"], "--task-option k: must be at least 0, got -1"),
    (["sample", "--tensor-parallel-size", "0"],
     "--tensor-parallel-size must be at least 1, got 0"),
])
def test_errors_name_the_flag_the_user_typed(tmp_path, capsys, argv, message):
    command, *rest = argv
    out = tmp_path / "run"
    code = main([command, "--model", str(tmp_path / "no-model"), "--task", "arith", "--out",
                 str(out), *rest])
    err = capsys.readouterr().err
    assert code == 2 and err == f"zerogap {command}: error: {message}\n"
    assert not out.exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["-m", "1"], "-m must be at least 2, got 1"),
    (["--limit", "0"], "--limit must be at least 1, got 0"),
    (["--neuron-block", "-1"], "--neuron-block must be at least 0, got -1"),
])
def test_a_study_flag_is_named_before_the_study_file_is_read(tmp_path, capsys, argv, message):
    study = tmp_path / "study.toml"
    study.write_text('out = "s"\nm = 4\n[[setting]]\nclean = "a"\ncontaminated = "b"\n'
                     'task = "arith"\n')
    if argv[0] == "--limit":  # a setting flag: with the flags, not the file
        code = main(["evaluate", "--clean", "a", "--contaminated", "b", "--task", "arith",
                     "--out", str(tmp_path / "s"), *argv])
    else:
        code = main(["evaluate", str(study), *argv])
    assert code == 2 and capsys.readouterr().err == f"zerogap evaluate: error: {message}\n"


def test_strategy_labels_keep_their_settings_whole(tmp_path):
    argv = ["evaluate", "--clean", "cl", "--contaminated", "co", "--task", "arith", "--out",
            str(tmp_path / "s"), "--strategies", "identity,railcap:n=3,mode=ban,all-zero"]
    study, _ = _study_from_args(build_parser().parse_args(argv))
    assert study.strategies == ("identity", "railcap:n=3,mode=ban", "all-zero")


def test_the_setting_flags_build_the_same_setting_as_a_study_file(tmp_path):
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ["a"], "unleaked": ["b"]}))
    argv = ["evaluate", "--clean", "cl", "--contaminated", "co", "--task", "arith",
            "--task-option", "k=1", "--split", "train", "--split-file", str(split),
            "--limit", "4", "-m", "3", "--controls", "--out", str(tmp_path / "s")]
    study, out = _study_from_args(build_parser().parse_args(argv))
    setting = study.settings[0]
    assert (setting.name, setting.task_split, setting.limit) == ("setting", "train", 4)
    assert setting.split_file == str(split.resolve()) and setting.task_options == {"k": 1}
    assert study.m == 3 and study.all_controls and not study.ablation
    assert study.temperature == SamplingSpec().temperature  # not given: the declared default


def test_dtype_is_what_the_folder_records_else_auto(tmp_path):
    """``evaluate`` without --dtype resumes a study folder in the dtype it was made in (a study
    made when float32 was evaluate's default keeps its runs); a new folder samples in auto."""
    from zerogap.engine.base import concrete_dtype

    old = tmp_path / "old"
    old.mkdir()
    (old / "study.json").write_text(json.dumps({"format": "zerogap-study"}))  # no dtype key
    assert study_dtype(None, old, "hf", "cpu") == "float32"
    (old / "study.json").write_text(json.dumps({"dtype": "bfloat16"}))
    assert study_dtype(None, old, "hf", "cpu") == "bfloat16"
    assert study_dtype("float32", old, "hf", "cpu") == "float32"  # the flag wins
    assert study_dtype(None, tmp_path / "new", "hf", "cpu") == concrete_dtype("auto", "hf",
                                                                              "cpu")


def test_dtype_defaults_to_auto_in_every_command(commands):
    for name in ("sample", "greedy", "evaluate", "demo"):
        dtype = next(a for a in commands[name]._actions if a.dest == "dtype")
        assert dtype.default is None and "else auto" in dtype.help, name


def test_config_flags_take_their_spelling_type_bounds_and_default_from_the_field():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, SamplingSpec, ("m", "top_p", "temperature"))
    add_config_arguments(parser, EngineOptions, ("max_batch", "vllm_options"))
    m, top_p, temperature, batch, vllm = (a for a in parser._actions if a.dest in (
        "m", "top_p", "temperature", "batch_size", "vllm_option"))
    assert m.option_strings == ["-m"] and temperature.option_strings == ["-T", "--temperature"]
    assert batch.option_strings == ["--batch-size"] and vllm.option_strings == ["--vllm-option"]
    assert m.type is int and m.default == 50 and "(>= 1 and <= 65536)" in m.help
    assert top_p.type is float and top_p.default is None and "(default none)" in top_p.help
    args = parser.parse_args(["-m", "7", "--vllm-option", "a=1", "--vllm-option", "b=x"])
    assert args.m == 7 and args.vllm_option == ["a=1", "b=x"]
    assert args.typed_flags == {"m": "-m", "vllm_options": "--vllm-option"}
    unset = argparse.ArgumentParser()
    add_config_arguments(unset, SamplingSpec, ("m",), unset=True, note=", or the file's")
    assert unset.parse_args([]).m is None
    assert "(default 50, or the file's)" in unset._actions[-1].help


def test_one_config_field_is_spelled_alike_by_every_command(commands):
    """A config field (its name is the concept: ``seed`` of a run, a study, a build) is one
    flag in every command that sets it, and no command keeps a spelling this release renamed."""
    from zerogap.cli.flags import RENAMED

    spellings: dict[str, dict[tuple, list[str]]] = {}
    for name, parser in commands.items():
        for action in _flags(parser):
            assert not set(action.option_strings) & set(RENAMED), (name, action.option_strings)
            if getattr(action, "field", None):
                spellings.setdefault(action.field, {}).setdefault(
                    tuple(action.option_strings), []).append(name)
    assert not {field: seen for field, seen in spellings.items() if len(seen) > 1}
    # The concepts the commands once spelled apart are each one flag in all of them.
    assert set(spellings["dtype"][("--dtype",)]) >= {"contaminate", "sample", "evaluate", "demo"}
    assert set(spellings["clean"][("--clean",)]) == {"evaluate", "neurons"}
    assert set(spellings["split_file"][("--split-file",)]) == {"evaluate", "neurons",
                                                                "paraphrase"}
    assert set(spellings["seed"][("--seed",)]) >= {"sample", "evaluate", "score", "contaminate",
                                                   "paraphrase"}
    score_clean = next(a for a in _flags(commands["score"]) if a.dest == "clean")
    assert _described(score_clean)[0] == _described(
        next(a for a in _flags(commands["evaluate"]) if a.dest == "clean"))[0]


def test_lm_eval_model_arguments_are_the_fields_names_with_the_command_lines_defaults():
    pytest.importorskip("lm_eval")
    import inspect

    from zerogap.harness import ZerogapLM

    params = inspect.signature(ZerogapLM.__init__).parameters
    for name in ("dtype", "max_batch", "threads", "device"):
        assert name in {f for f in EngineOptions.__dataclass_fields__}, name
        assert name in params, name
    assert params["seed"].default == SamplingSpec().seed
    dtype = next(a for a in _flags(dict(_commands(build_parser()))["sample"])
                 if a.dest == "dtype")
    assert params["dtype"].default == "auto" and dtype.help.endswith("else auto)")


def test_a_strategy_label_is_one_spelling_in_sample_as_in_a_study(tmp_path, capsys):
    """``--strategy railcap:nn=3`` is read as a study's label is, its settings checked (before
    any model loads) with the words ``--set`` gets."""
    out = tmp_path / "run"
    argv = ["sample", "--model", str(tmp_path / "none"), "--task", "arith", "--out", str(out)]
    assert main([*argv, "--strategy", "railcap:nn=3"]) == 2
    assert capsys.readouterr().err == ("zerogap sample: error: strategy railcap has no option "
                                       "'nn'; known: mode, n, protect\n")
    assert main([*argv, "--strategy", "railcap:n=3", "--set", "n=4"]) == 2
    assert "n: given twice" in capsys.readouterr().err and not out.exists()


def test_a_contamination_manifest_of_the_precision_era_reads_as_dtype():
    from zerogap.pipelines.contamination import differing_fields
    from zerogap.pipelines.contamination_config import ContaminationConfig

    config = ContaminationConfig(task="arith", dtype="bfloat16")
    recorded = json.loads(config.to_json())  # as manifest.json holds it
    recorded["precision"] = {"bfloat16": "bf16"}[recorded.pop("dtype")]
    assert ContaminationConfig.from_dict(recorded) == config
    assert differing_fields(config, recorded) == []


@pytest.mark.parametrize(("flag", "typed", "meant"), [
    ("--model", "embeded", "embedded"),
    ("--task", "arth", "arith"),
    ("--strategy", "railcpa", "railcap"),
])
def test_a_mistyped_name_gets_the_nearest_known_one(tmp_path, capsys, flag, typed, meant):
    argv = {"--model": "embedded", "--task": "arith", "--strategy": "identity", flag: typed}
    out = tmp_path / "run"
    code = main(["sample", *[w for pair in argv.items() for w in pair], "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"(did you mean {meant}?)" in err and err.count("\n") == 1, err
    assert not out.exists()
