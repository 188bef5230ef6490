"""zerogap's one flag vocabulary: options generated from config fields, the few written here
once for every command that takes them, typos named in the command's own usage, and the docs'
table of every flag (docs/flags.md).

A flag that sets a config field is generated from the field (:func:`add_config_arguments`): its
spelling (``--field-name``, or the field's ``flag`` metadata), help, bounds, type, choices and
default come from the declaration, so a value has one wording and one rule in every command, and
an error names the flag the user typed (:func:`typed_message`: ``-m must be at least 1, got 0``).
Options that set no config field (where to write, which model or strategy, how to show
progress) are written once here and shared.

One name, one meaning, in every command: ``--split`` is a task's dataset split, ``--split-file``
the leaked/unleaked JSON, ``--out`` where a command writes its result, ``--json`` the record of
what it shows, ``--grading`` the grader, ``--batch-size`` the most rows decoded together. Where
lm-evaluation-harness has the concept the name is its (``--limit``, ``--seed``, ``--device``,
``--batch-size``); outputs keep zerogap's short ``--out`` (a study file's ``out`` key) and take
lm-eval's ``--output-path`` as another spelling.

``python -m zerogap.cli.reference flags`` prints the table; a test fails when docs/flags.md
drifts from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from zerogap.config import SHARED, FieldError, bounds_text, parameters, show_value

__all__ = ["DefaultsShown", "Parser", "add_config_arguments", "add_grading", "add_json",
           "add_out", "add_running_arguments", "flag_table", "typed_message"]

# A help text's trailing "(default X)": the default a field's help states, which a generated
# flag's help and the docs' table show as its default.
_SAYS_DEFAULT = re.compile(r"\s*\(default:? ([^()]*(?:\([^()]*\)[^()]*)*)\)$")

# The attribute of the parsed arguments that keeps, by field name, the spelling of every
# generated flag the user typed.
TYPED = "typed_flags"


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
    """An argument parser whose typos are its own: an option it does not know is named in its
    own usage (argparse's "unrecognized arguments"), before any other complaint, so that
    ``zerogap sample --modle X`` names ``--modle`` rather than the missing ``--model`` and
    ``zerogap score --margn 3`` shows score's usage rather than the top-level one. Every
    zerogap command's parser is one (a subcommand's parser takes its parent's class)."""

    def parse_known_args(self, args=None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        unknown = self._unknown_options(words)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        namespace, extras = super().parse_known_args(words, namespace)
        if extras and not self._has_commands():
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _has_commands(self) -> bool:
        return any(isinstance(a, argparse._SubParsersAction) for a in self._actions)

    def _unknown_options(self, words: list[str]) -> list[str]:
        """The words that look like options of this parser but are none (nor an abbreviation
        of one); with subcommands, only the words before the command's name are this
        parser's."""
        commands = self._has_commands()
        unknown = []
        for word in words:
            if word == "--" or (commands and not word.startswith("-")):
                break
            if self._is_option(word) is False:
                unknown.append(word.split("=", 1)[0])
        return unknown

    def _is_option(self, word: str) -> bool | None:
        """True for a known option (or one abbreviated, or a short one with its value
        attached), False for an unknown one, None for a word that is no option (a value, a
        negative number, text with a space)."""
        if not word.startswith("-") or word == "-" or " " in word:
            return None
        if self._negative_number_matcher.match(word) and not self._has_negative_number_optionals:
            return None
        name = word.split("=", 1)[0]
        known = self._option_string_actions
        if name in known or (not word.startswith("--") and word[:2] in known):
            return True
        return self.allow_abbrev and name.startswith("--") and any(
            option.startswith(name) for option in known)


class _RecordsFlag(argparse.Action):
    """Keeps the spelling the user typed (``-T`` or ``--temperature``) under the field's name
    (:attr:`field`, set by :func:`add_config_arguments`), so that an error in the field names
    it (:func:`typed_message`)."""

    field = ""

    def __call__(self, parser, namespace, values, option_string=None):
        typed = dict(getattr(namespace, TYPED, None) or {})
        typed[self.field] = option_string
        setattr(namespace, TYPED, typed)
        super().__call__(parser, namespace, values, option_string)


class _StoreField(_RecordsFlag, argparse._StoreAction):
    pass


class _SwitchField(_RecordsFlag, argparse.BooleanOptionalAction):
    pass


class _AppendField(_RecordsFlag, argparse._AppendAction):
    pass


def typed_message(err: Exception, args: argparse.Namespace) -> str:
    """``err``'s message, with a config field named by the flag the user typed for it (a
    :class:`~zerogap.config.FieldError` of a field set on the command line): ``-m must be at
    least 1, got 0`` rather than ``SamplingSpec.m must be ...``."""
    if isinstance(err, FieldError):
        flag = getattr(args, TYPED, {}).get(err.field)
        if flag is not None:
            return f"{flag} {err.problem}"
    return str(err)


def _option_type(kind: Any) -> tuple[Any, tuple | None]:
    """argparse's ``type`` and ``choices`` for a field annotation (``X | None`` as ``X``)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if typing.get_origin(kind) is Literal:
        choices = typing.get_args(kind)
        return type(choices[0]), choices
    return kind, None


def spelling(config: type, name: str) -> tuple[str, ...]:
    """How the command line spells field ``name`` of ``config``: its ``flag`` metadata (one
    spelling or several), else ``--field-name``."""
    meta = {f.name: f.metadata for f in dataclasses.fields(config)}[name]
    flag = meta.get("flag", f"--{name.replace('_', '-')}")
    return (flag,) if isinstance(flag, str) else tuple(flag)


def destination(config: type, name: str) -> str:
    """The attribute of the parsed arguments holding field ``name``: argparse's own, from the
    flag's long spelling (``--split`` -> ``split``, ``--batch-size`` -> ``batch_size``)."""
    spelled = spelling(config, name)
    long = next((s for s in spelled if s.startswith("--")), spelled[0])
    return long.lstrip("-").replace("-", "_")


def given(args: argparse.Namespace, config: type, names: Iterable[str]) -> dict[str, Any]:
    """``{field: value}`` of the fields in ``names`` whose flags the command line set (a flag
    added with ``unset`` and not given is left out, so the config or a file supplies it)."""
    values = {name: getattr(args, destination(config, name), None) for name in names}
    return {name: value for name, value in values.items() if value is not None}


def _shown(value: Any) -> str:
    """A default as the flag is typed: a list comma-separated, nothing as ``none``, anything
    else as ``--set`` spells it."""
    if isinstance(value, tuple | list | dict) and not value:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return show_value(value)


# A value's placeholder in usage lines, by type (a field's ``metavar`` metadata wins).
_METAVARS = {int: "N", float: "X"}


def check_given(args: argparse.Namespace, config: type, names: Iterable[str]) -> None:
    """Check every value the flags of ``names`` hold against ``config``'s declarations, before
    any work (for a command that reads them without building the config): a bad one raises
    :class:`~zerogap.config.FieldError`, named by the flag typed (:func:`typed_message`)."""
    from zerogap.config import check_value

    for name, value in given(args, config, names).items():
        check_value(config, name, value)


def add_config_arguments(parser, config: type, names: Iterable[str], *,
                         defaults: Mapping[str, Any] | None = None, unset: bool = False,
                         note: str = "") -> None:
    """One option per field of ``config`` in ``names``: spelled by :func:`spelling`, its help
    and bounds from the field's metadata, its type (and choices) from its annotation, its
    default shown.

    A ``bool`` field is a switch with its ``--no-`` form; a ``dict`` field a repeatable
    ``KEY=VALUE`` (the command converts the pairs); a tuple field one value its ``parse``
    metadata reads (a function of the text). A field's ``metavar``,
    ``nargs``, ``const`` and ``choices`` (a function naming them) metadata pass on to
    argparse. ``defaults`` replace declared defaults (a command's own); a field without a
    default is a required flag unless ``unset``. ``unset``: the option's value stays None (or
    absent under ``argument_default=SUPPRESS``) unless given, the config (or ``defaults``)
    supplying the default shown; ``note`` is added to that (``, or the study file's``).
    """
    fields = {f.name: f for f in dataclasses.fields(config)}
    hints, declared_defaults = typing.get_type_hints(config), parameters(config)
    for name in names:
        meta = fields[name].metadata
        declared = declared_defaults[name][1]
        default = (defaults or {}).get(name, declared)
        required = default is inspect.Parameter.empty and not unset
        spelled = spelling(config, name)
        option_type, choices = _option_type(hints[name])
        if "choices" in meta:  # a registry's names, read when the parser is built
            choices = tuple(meta["choices"]())
        kwargs: dict[str, Any] = {"dest": destination(config, name)}
        if option_type is bool:
            kwargs["action"] = _SwitchField
        elif option_type is dict:
            kwargs.update(action=_AppendField, metavar=meta.get("metavar", "KEY=VALUE"))
        else:
            if typing.get_origin(option_type) is tuple:
                option_type = meta["parse"]
            kwargs.update(action=_StoreField, type=option_type, choices=choices)
            if choices is None:
                kwargs["metavar"] = meta.get("metavar") or _METAVARS.get(
                    option_type, spelled[-1].lstrip("-").upper().replace("-", "_"))
            kwargs.update({key: meta[key] for key in ("nargs", "const") if key in meta})
        if required:
            kwargs["required"] = True
        elif not unset:
            kwargs["default"] = list(default) if option_type is dict else default
        meaning, says = _split_default(meta.get("help", ""))
        bounds = bounds_text(meta)
        if required:
            shown = "required"
        elif says is not None:
            shown = says + note
        elif default is inspect.Parameter.empty:
            shown = "none"
        else:
            shown = _shown(default) + note
        kwargs["help"] = _help(meaning, bounds, None if required else shown)
        action = parser.add_argument(*spelled, **kwargs)
        action.field, action.described = name, (meaning, bounds, shown)
        action.help = kwargs["help"]  # a switch appends its own "(default: ...)"; one is shown


def _split_default(text: str) -> tuple[str, str | None]:
    """``text`` without its trailing ``(default: X)``, and X (None when it has none)."""
    said = _SAYS_DEFAULT.search(text)
    return (text, None) if said is None else (text[: said.start()], said.group(1))


def _help(meaning: str, bounds: str, default: str | None) -> str:
    """A flag's help line: its meaning, its bounds, its default (None: required)."""
    return meaning + (f" ({bounds})" if bounds else "") + (
        f" (default {default})" if default is not None else "")


# The options that set no config field, each worded once for every command that takes it.

def add_out(parser, *, required: bool = True, default: Any = None,
            otherwise: str | None = None) -> None:
    """``--out`` (also lm-eval's ``--output-path``): where the command writes its result;
    ``otherwise`` says where it goes when neither required nor given nor defaulted."""
    kwargs = {"default": default} if default is not None else {}
    parser.add_argument("--out", "--output-path", dest="out", type=Path, required=required,
                        metavar="PATH",
                        help="where the command writes its result: a run directory (sample, "
                             "greedy), a folder (evaluate, demo, contaminate) or a file "
                             "(import, neurons, paraphrase); a rerun with the same --out "
                             "resumes what was cut short"
                             + (f" (default: {otherwise})" if otherwise else ""), **kwargs)


def field_help(config: type, name: str) -> str:
    """Field ``name``'s declared help: the wording of an option that stands for it without
    setting it (``score --clean`` reads the clean model's outcomes, not the model)."""
    return next(f for f in dataclasses.fields(config) if f.name == name).metadata["help"]


def add_model(parser, *, required: bool) -> None:
    """``--model``: the model a command samples or rewrites with (worded as every config's
    ``model`` field, :data:`zerogap.config.SHARED`)."""
    parser.add_argument("--model", required=required, metavar="MODEL",
                        help=SHARED["model"]["help"] + ("" if required else " (default: none)"))


def add_limit(parser) -> None:
    """``--limit N``: a study setting's ``limit`` field, whose rule every command shares."""
    from zerogap.study.spec import SettingSpec

    add_config_arguments(parser, SettingSpec, ("limit",))


def add_strategy_arguments(parser) -> None:
    """``--strategy NAME`` and its ``--set KEY=VALUE`` settings (typed by the strategy's
    config)."""
    parser.add_argument("--strategy", default="identity", metavar="NAME",
                        help="registered strategy name ('zerogap strategy list')")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        dest="settings",
                        help="strategy setting, converted by its declared type ('zerogap "
                             "strategy show NAME' lists them; repeatable)")


def add_running_arguments(parser, *, batch: bool = True) -> None:
    """``--device``, ``--batch-size`` (unless not ``batch``), ``--threads`` and
    ``--max-memory``, from :class:`~zerogap.engine.base.EngineOptions`, and ``--quiet``."""
    from zerogap.engine.base import EngineOptions

    add_config_arguments(parser, EngineOptions,
                         ("device", "max_batch", "threads", "max_memory") if batch
                         else ("device", "threads", "max_memory"))
    add_quiet(parser)


def add_quiet(parser) -> None:
    """``--quiet``: no progress display."""
    parser.add_argument("--quiet", action="store_true",
                        help="no progress display (warnings and errors still print)")


def add_json(parser) -> None:
    """``--json [OUT]``: what the command shows, as JSON, on stdout or into a file."""
    from zerogap.cli.output import STDOUT

    parser.add_argument("--json", nargs="?", const=STDOUT, metavar="OUT",
                        help="what the command shows as JSON too: on standard output with '-' "
                             "or no value (a table then goes to standard error), else into "
                             "the file OUT (default: no JSON)")


def add_grading(parser) -> None:
    """``--grading MODE``: how raw responses are graded."""
    from zerogap.tasks.extract import modes

    parser.add_argument("--grading", default="anchor", metavar="MODE",
                        help=f"grader of raw responses: {', '.join(modes())}")


def add_markdown(parser) -> None:
    """``--markdown``: a listing as the README's Markdown table instead."""
    parser.add_argument("--markdown", action="store_true",
                        help="a Markdown table of every option and default instead (the "
                             "README's)")


def _commands(parser: argparse.ArgumentParser, name: str = "zerogap"):
    """``(command path, parser)`` of every command that takes flags, depth first."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and name != "zerogap":
        yield name.removeprefix("zerogap "), parser
    for action in subs:
        for sub_name, sub in action.choices.items():
            yield from _commands(sub, f"{name} {sub_name}")


def _described(action: argparse.Action) -> tuple[str, str, str]:
    """``(meaning, values, default)`` of a flag for the table: a generated flag's as
    :func:`add_config_arguments` described it from its field, another's from its help and
    argparse's record."""
    described = getattr(action, "described", None)
    if described is not None:
        meaning, values, default = described
    else:
        meaning, values = (action.help or "").replace("\n", " "), ""
        said = _SAYS_DEFAULT.search(meaning)
        if said:
            meaning, default = meaning[: said.start()], said.group(1)
        elif action.required:
            default = "required"
        elif isinstance(action, argparse._StoreTrueAction):
            default = "off"
        elif action.default in (None, [], argparse.SUPPRESS):
            default = "see meaning" if "default" in meaning else "—"
        else:
            default = show_value(action.default)
    if action.choices is not None:
        values = " | ".join(str(c) for c in action.choices)
    meaning, values, default = (text.replace("|", "\\|") for text in (meaning, values, default))
    return meaning, values, default


def _listed(by_value: Mapping[str, list[str]]) -> str:
    """One value, or each value with the commands that have it."""
    if len(by_value) == 1:
        return next(iter(by_value))
    return "; ".join(f"{', '.join(commands)}: {value or '—'}"
                     for value, commands in by_value.items())


def flag_table(parser: argparse.ArgumentParser) -> str:
    """Markdown: every flag of every command, one row per flag (its one meaning, the values it
    takes, its default, the commands that take it); where commands differ in a flag's values
    or default, each is listed with its commands. A flag worded two ways gets a row per
    wording, naming its commands, so that the drift shows."""
    flags: dict[str, dict[str, Any]] = {}
    for command, sub in _commands(parser):
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction) \
                    or action.help == argparse.SUPPRESS:
                continue
            names = ", ".join(f"`{s}`" for s in action.option_strings)
            meaning, values, default = _described(action)
            row = flags.setdefault(names, {"meanings": {}, "values": {}, "defaults": {},
                                           "commands": []})
            for key, value in (("meanings", meaning), ("values", values),
                               ("defaults", default)):
                row[key].setdefault(value, []).append(command)
            row["commands"].append(command)
    lines = ["| flag | meaning | values | default | commands |", "|---|---|---|---|---|"]
    for names, row in sorted(flags.items(), key=lambda item: item[0].lstrip("`-").lower()):
        for meaning, commands in row["meanings"].items():
            shown = names if len(row["meanings"]) == 1 else f"{names} ({', '.join(commands)})"
            lines.append(f"| {shown} | {meaning} | {_listed(row['values'])} | "
                         f"{_listed(row['defaults'])} | {', '.join(row['commands'])} |")
    return "\n".join(lines) + "\n"
