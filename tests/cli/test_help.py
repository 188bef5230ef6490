"""What ``zerogap --help`` and each command's help show a person: plain text, no markup."""

import argparse
import re

from zerogap.cli import build_parser

MARKUP = re.compile(r"``|:(?:func|class|mod|meth|attr|data|exc|obj):`")


def _parsers(parser, name="zerogap"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_no_help_text_shows_restructuredtext_markup():
    shown = {name: p.format_help() for name, p in _parsers(build_parser())}
    assert len(shown) > 15  # every command and action, not just the top level
    leaking = {name: MARKUP.findall(text) for name, text in shown.items() if MARKUP.search(text)}
    assert not leaking
    # The markup's content stays: the command names and module paths it marked up.
    assert "zerogap models path SPEC: the plain model folder" in shown["zerogap models"]


def _commands_by_name():
    """Each command ``zerogap --help`` lists, by name, and its parser."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _flag_helps(parser):
    """Every flag's help text of ``parser`` and of its actions (``task list``...)."""
    for _, sub in _parsers(parser):
        for action in sub._actions:
            if action.option_strings and action.help and action.help != argparse.SUPPRESS:
                yield action.help


def test_every_command_has_a_description_and_examples_of_its_own():
    commands = _commands_by_name()
    epilogs = {}
    for name, parser in commands.items():
        assert parser.description and len(parser.description) > 40, name
        examples = parser.epilog or parser.description  # lm-eval's are in its description
        runs = [line.strip() for line in examples.splitlines()
                if line.strip().startswith("zerogap ")]
        assert runs and runs[0].startswith(f"zerogap {name}"), (name, runs[:1])
        if parser.epilog:
            epilogs.setdefault(parser.epilog, []).append(name)
    assert not [names for names in epilogs.values() if len(names) > 1]


# A command named as the user of a value: "(evaluate, demo)", "score: a counts file".
_NAMES_A_USE = r"(?<!zerogap )\b({})\b(?=[,:)]| and )"


def test_no_help_sentence_shared_between_commands_names_one_commands_use():
    commands = _commands_by_name()
    names_a_use = re.compile(_NAMES_A_USE.format("|".join(map(re.escape, commands))))
    sentences: dict[str, set[str]] = {}
    for name, parser in commands.items():
        for text in _flag_helps(parser):
            for sentence in re.split(r"(?<=[.;])\s+", " ".join(text.split())):
                sentences.setdefault(sentence, set()).add(name)
    shared = {s: names for s, names in sentences.items() if len(names) > 1}
    assert len(shared) > 20  # the shared wording is there to be checked
    assert not {s: names for s, names in shared.items() if names_a_use.search(s)}


def test_the_help_states_enforced_bounds():
    commands = _commands_by_name()
    helps = {a.dest: a.help for a in commands["demo"]._actions}
    assert ">= 2 and <= " in helps["questions"] and ">= 1" in helps["workers"]
    assert ">= 1" in next(a.help for a in commands["evaluate"]._actions if a.dest == "workers")


def test_metavars_name_the_kind_of_value():
    usage = _commands_by_name()["contaminate"].format_usage()
    assert "--general FILE" in usage and "--paraphrases FILE" in usage
    assert "--target-modules NAMES" in usage


def test_help_speaks_of_its_own_command():
    commands = _commands_by_name()
    for name in ("sample", "greedy", "paraphrase"):
        limit = next(a.help for a in commands[name]._actions if a.dest == "limit")
        assert "shortcut" not in limit and "split file" not in limit, name
    clean = next(a.help for a in commands["score"]._actions if a.dest == "clean")
    assert "to sample" not in clean and "evaluate" not in clean
    assert not [name for name, parser in commands.items()
                if "this module" in parser.format_help()]
