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
    assert "zerogap score: restoration metrics" in shown["zerogap score"]
