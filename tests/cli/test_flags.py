"""One flag vocabulary: every flag helped and its default shown, one type per name across
commands, old spellings still parsing with one note, and the table in docs/flags.md."""

import argparse
import json

import pytest

from zerogap.cli import build_parser, main
from zerogap.cli.evaluate import _study_from_args
from zerogap.cli.flags import _commands, add_config_arguments
from zerogap.engine.base import SamplingSpec


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


def test_one_name_means_one_kind_of_value_everywhere(commands):
    """A flag spelled alike in two commands takes the same type, choices and arity."""
    kinds: dict[str, dict] = {}
    for name, parser in commands.items():
        for action in _flags(parser):
            kind = (getattr(action.type, "__name__", "str"),  # no type: a string
                    None if action.choices is None else tuple(action.choices), action.nargs,
                    type(action).__name__)
            for spelling in action.option_strings:
                kinds.setdefault(spelling, {}).setdefault(kind, []).append(name)
    clashes = {flag: seen for flag, seen in kinds.items() if len(seen) > 1}
    assert not clashes
    # The clashes of issue 23 are gone: each of these names one thing.
    assert [kind[0] for kind in kinds["--split"]] == ["str"]  # a split name, never a file
    assert "--split-file" in kinds and "--leaked-ids" in kinds and "--grading" in kinds
    assert "paraphrase" not in sum(kinds["--backend"].values(), [])


@pytest.mark.parametrize(("argv", "dest", "value"), [
    (["sample", "--model", "m", "--task", "t", "--run-dir", "r"], "out", "r"),
    (["greedy", "--model", "m", "--task", "t", "--out", "r", "--max-batch", "3"],
     "batch_size", 3),
    (["score", "--clean", "c", "--mitigated", "a=b", "--lmeval-grading", "lmeval-strict"],
     "grading", "lmeval-strict"),
    (["score", "--clean", "c", "--mitigated", "a=b", "--bootstrap", "9"], "resamples", 9),
    (["import", "log", "--counts", "x.jsonl"], "out", "x.jsonl"),
    (["neurons", "--base", "b", "--contaminated", "c", "--uncontaminated", "u", "--task", "t",
      "--leaked", "l.txt", "--out", "o", "--block-size", "64"], "neuron_block", 64),
    (["task", "show", "gsm8k", "--index", "0", "--mode", "lmeval-flexible"], "grading",
     "lmeval-flexible"),
    (["task", "show", "gsm8k", "--index", "0", "--path", "data", "--k", "2"], "task_option",
     ["path=data", "k=2"]),
    (["evaluate", "--task-split", "train"], "split", "train"),
])
def test_an_old_spelling_still_parses_with_one_note(argv, dest, value, capsys):
    args = build_parser().parse_args(argv)
    got = getattr(args, dest)
    assert (str(got) if dest in ("out", "leaked_ids") else got) == value
    notes = capsys.readouterr().err.splitlines()
    old = [word for word in argv if word.startswith("--")]
    renamed = [line for line in notes if "is now" in line]
    assert renamed and all(line.startswith("zerogap: note: --") for line in renamed)
    assert any(flag in renamed[0] for flag in old)


def test_the_new_spelling_prints_no_note(capsys):
    build_parser().parse_args(["sample", "--model", "m", "--task", "t", "--out", "r",
                               "--batch-size", "4"])
    assert capsys.readouterr().err == ""


def test_task_show_reads_old_option_flags_as_task_options(capsys):
    assert main(["task", "show", "arith", "--index", "1", "--task-option", "k=2"]) == 0
    new = capsys.readouterr()
    assert main(["task", "show", "arith", "--index", "1", "--k", "2"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and new.err == ""
    assert "--k is now --task-option k=VALUE" in old.err
    assert main(["task", "show", "arith", "--index", "1", "--task-option", "mode=anchor",
                 "--grading", "lmeval-strict"]) == 2
    assert "give the grading mode once" in capsys.readouterr().err


def test_evaluate_reads_an_old_split_file_argument_as_the_split_file(tmp_path, capsys):
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ["a"], "unleaked": ["b"]}))
    argv = ["evaluate", "--clean", "cl", "--contaminated", "co", "--task", "arith",
            "--out", str(tmp_path / "study")]
    old, _ = _study_from_args(build_parser().parse_args([*argv, "--split", str(split)]))
    assert "reads as --split-file" in capsys.readouterr().err
    new, _ = _study_from_args(build_parser().parse_args([*argv, "--split-file", str(split)]))
    assert old.settings[0].split_file == new.settings[0].split_file == str(split.resolve())
    assert old.settings[0].task_split == new.settings[0].task_split == "test"
    train, _ = _study_from_args(build_parser().parse_args([*argv, "--split", "train"]))
    assert train.settings[0].task_split == "train" and train.settings[0].split_file is None


def test_config_flags_take_their_type_bounds_and_default_from_the_field():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, SamplingSpec, ("m", "top_p"), flags={"m": ("-m",)})
    m, top_p = (a for a in parser._actions if a.dest in ("m", "top_p"))
    assert m.type is int and m.default == 50 and "(>= 1 and <= 65536)" in m.help
    assert top_p.type is float and top_p.default is None and "(default none)" in top_p.help
    assert parser.parse_args(["-m", "7"]).m == 7
    unset = argparse.ArgumentParser()
    add_config_arguments(unset, SamplingSpec, ("m",), unset=True, note=", or the file's")
    assert unset.parse_args([]).m is None
    assert "(default 50, or the file's)" in unset._actions[-1].help
