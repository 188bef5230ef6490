"""zerogap's one flag vocabulary: options generated from config fields, renamed spellings, the
defaults every help line shows, and the docs' table of every flag (docs/flags.md).

One name, one meaning, in every command: ``--split`` is a task's dataset split, ``--split-file``
the leaked/unleaked JSON, ``--out`` where a command writes its result, ``--json`` the record of
what it shows, ``--grading`` the grader, ``--batch-size`` the most rows decoded together. Where
lm-evaluation-harness has the concept the name is its (``--limit``, ``--seed``, ``--device``,
``--batch-size``); outputs keep zerogap's short ``--out`` (a study file's ``out`` key) and take
lm-eval's ``--output-path`` as another spelling. An old spelling still parses and prints one
note on stderr (:func:`renamed`).

``python -m zerogap.cli.reference flags`` prints the table; a test fails when docs/flags.md
drifts from it.
"""

from __future__ import annotations

import argparse
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from zerogap.config import parameters, show_value

__all__ = ["DefaultsShown", "Parser", "add_config_arguments", "add_out", "add_running_arguments",
           "add_task_arguments", "flag_table", "renamed"]


class DefaultsShown(argparse.HelpFormatter):
    """Appends ``(default X)`` to a flag's help unless the help already says its default, the
    default is nothing to show (None, off, empty), or the flag is required."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        nothing = action.default is None or action.default is False or action.default == [] \
            or action.default is argparse.SUPPRESS
        if text and action.option_strings and "default" not in text and not action.required \
                and not nothing:
            text += f" (default {show_value(action.default)})"
        return text.replace("%", "%%")


def with_defaults_shown(formatter: Any) -> Any:
    """``formatter`` (a parser's own class, raw or not) with :class:`DefaultsShown` in front."""
    if issubclass(formatter, DefaultsShown):
        return formatter
    return type(f"DefaultsShown{formatter.__name__}", (DefaultsShown, formatter), {})


class Parser(argparse.ArgumentParser):
    """An argument parser that reads old spellings (:func:`renamed`) as the new ones before
    parsing, one note on stderr each; every zerogap command's parser is one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.renames: dict[str, tuple[str, Callable[[str], str] | None]] = {}

    def parse_known_args(self, args=None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._renew(words), namespace)

    def _renew(self, words: list[str]) -> list[str]:
        """``words`` with every old spelling (``--old V`` or ``--old=V``) made the new one."""
        out: list[str] = []
        rest = iter(words)
        for word in rest:
            name, eq, value = word.partition("=")
            if word == "--":  # what follows is positional, renamed nowhere
                return [*out, word, *rest]
            if name not in self.renames:
                out.append(word)
                continue
            new, convert = self.renames[name]
            flag = new.split()[0]
            print(f"zerogap: note: {name} is now {new}; the old spelling will go",
                  file=sys.stderr)
            given = value if eq else next(rest, None)
            out += [flag] if given is None else [flag, given if convert is None else
                                                 convert(given)]
        return out


def renamed(parser: argparse.ArgumentParser, old: str, new: str, *,
            convert: Callable[[str], str] | None = None) -> None:
    """Read ``old VALUE`` as ``new VALUE`` (``convert`` maps the value: ``--path X`` becomes
    ``--task-option path=X``); ``new`` may add words after the flag for the docs' table."""
    assert isinstance(parser, Parser), "old spellings need a zerogap.cli.flags.Parser"
    parser.renames[old] = (new, convert)


def add_out(parser, what: str, *, required: bool = True, default: Any = None) -> None:
    """``--out`` (also lm-eval's ``--output-path``): where the command writes ``what``."""
    kwargs = {"default": default} if default is not None else {}
    parser.add_argument("--out", "--output-path", dest="out", type=Path, required=required,
                        metavar="PATH", help=what, **kwargs)


def add_task_arguments(parser, *, required: bool = True, unset: bool = False) -> None:
    """``--task``, ``--task-option`` and ``--split``, the same in every command that reads one;
    ``unset``: ``--split`` stays None unless given (a study file may set it)."""
    parser.add_argument("--task", required=required,
                        help="registered task name, e.g. gsm8k or arith ('zerogap task list')"
                             + ("" if required else " (default: none)"))
    parser.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                        help="task option, converted by its declared type ('zerogap task show'; "
                             "repeatable)")
    parser.add_argument("--split", default=None if unset else "test",
                        help="the task's dataset split" + (" (default test)" if unset else ""))


def add_running_arguments(parser, *, batch: bool = True) -> None:
    """``--device``, ``--batch-size`` (old ``--max-batch``; unless not ``batch``) and
    ``--quiet``."""
    parser.add_argument("--device", default=None,
                        help="torch device, e.g. cpu or cuda:1 (default: cuda if present)")
    if batch:
        parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                            help="most rows decoded together (default: from free memory)")
        renamed(parser, "--max-batch", "--batch-size")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def _option_type(kind: Any) -> tuple[Any, tuple | None]:
    """argparse's ``type`` and ``choices`` for a field annotation (``X | None`` as ``X``)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if typing.get_origin(kind) is Literal:
        choices = typing.get_args(kind)
        return type(choices[0]), choices
    return kind, None


def add_config_arguments(parser, config: type, names: Iterable[str], *,
                         flags: Mapping[str, tuple[str, ...]] | None = None,
                         defaults: Mapping[str, Any] | None = None, unset: bool = False,
                         note: str = "") -> None:
    """One option per field of ``config`` in ``names``: its help and bounds from the field's
    metadata, its type (and choices) from its annotation, its default shown.

    ``flags`` spells a field otherwise than ``--field-name`` (``m``: ``("-m",)``); ``defaults``
    replace declared defaults (a command's own). ``unset``: the option's value stays the
    parser's default (None, or absent under ``argument_default=SUPPRESS``) unless given, the
    config supplying the default shown; ``note`` is added to those help lines (``, or the
    study file's``).
    """
    declared = parameters(config)
    for name in names:
        kind, default, help_text = declared[name]
        default = (defaults or {}).get(name, default)
        option_type, choices = _option_type(kind)
        shown = "" if "default" in help_text else f" (default {show_value(default)}{note})"
        spelled = (flags or {}).get(name, (f"--{name.replace('_', '-')}",))
        kwargs: dict[str, Any] = {"dest": name, "help": help_text + shown}
        if option_type is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(type=option_type, choices=choices)
        if not unset:
            kwargs["default"] = default
        parser.add_argument(*spelled, **kwargs)


def _commands(parser: argparse.ArgumentParser, name: str = "zerogap"):
    """``(command path, parser)`` of every command that takes flags, depth first."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and name != "zerogap":
        yield name.removeprefix("zerogap "), parser
    for action in subs:
        for sub_name, sub in action.choices.items():
            yield from _commands(sub, f"{name} {sub_name}")


# A help line's trailing "(default X)", which the table moves into its default column.
_SAYS_DEFAULT = re.compile(r"\s*\(default:? ([^()]*(?:\([^()]*\)[^()]*)*)\)$")


def _meaning_and_default(action: argparse.Action) -> tuple[str, str]:
    text = (action.help or "").replace("\n", " ")
    said = _SAYS_DEFAULT.search(text)
    if said:
        text, default = text[: said.start()], said.group(1)
    elif action.required:
        default = "required"
    elif isinstance(action, argparse._StoreTrueAction):
        default = "off"
    elif action.default in (None, [], argparse.SUPPRESS):
        default = "see meaning" if "default" in text else "—"
    else:
        default = show_value(action.default)
    return text.replace("|", "\\|"), default.replace("|", "\\|")


def flag_table(parser: argparse.ArgumentParser) -> str:
    """Markdown: every flag of every command (name, meaning, default, commands), one row per
    meaning, then the old spellings and what they became."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    old: dict[tuple[str, str], list[str]] = {}
    for command, sub in _commands(parser):
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            names = ", ".join(f"`{s}`" for s in action.option_strings)
            if action.help != argparse.SUPPRESS:
                rows.setdefault((names, *_meaning_and_default(action)), []).append(command)
        for spelling, (new, _) in getattr(sub, "renames", {}).items():
            old.setdefault((f"`{spelling}`", f"`{new}`"), []).append(command)
    lines = ["| flag | meaning | default | commands |", "|---|---|---|---|"]
    for (names, meaning, default), commands in sorted(
            rows.items(), key=lambda row: row[0][0].lstrip("`-").lower()):
        lines.append(f"| {names} | {meaning} | {default} | {', '.join(commands)} |")
    lines += ["", "| old spelling | now | commands |", "|---|---|---|"]
    for (names, new), commands in sorted(old.items()):
        lines.append(f"| {names} | {new} | {', '.join(commands)} |")
    return "\n".join(lines) + "\n"
