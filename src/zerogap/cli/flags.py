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

Command modules share flags through this module only (none imports another command's module):
the engine's flags and the recorded dtype a run resumes in, the scoring flags, ``--sweep`` and
the question ids a split file names are here.

``python -m zerogap.cli.reference flags`` prints the table; a test fails when docs/flags.md
drifts from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from zerogap.config import SHARED, FieldError, bounds_text, parameters, show_value
from zerogap.errors import UserError, did_you_mean
from zerogap.io.files import read_text

__all__ = ["DefaultsShown", "Parser", "add_config_arguments", "add_engine_arguments",
           "add_grading", "add_json", "add_out", "add_running_arguments", "add_scoring_options",
           "add_sweep", "engine_options", "flag_table", "questions_by_ids",
           "typed_message"]

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


# Spellings of earlier releases, refused for one release with a pointer to today's: the old
# spelling, and the flag that replaced it (where the command takes that flag).
RENAMED = {"--precision": "--dtype", "--uncontaminated": "--clean", "--leaked-ids": "--split-file",
           "--ids": "--split-file"}

# argparse's message for a word that is none of a command's choices (its subcommands, a flag's
# choices), and that for a flag it does not know.
_INVALID_CHOICE = re.compile(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: an option it does not know is named in
    its own command (argparse's "unrecognized arguments"), before any other complaint, so that
    ``zerogap sample --modle X`` names ``--modle`` rather than the missing ``--model``, with
    the option it most resembles; a mistyped command or choice names the nearest one; a
    spelling of an earlier release (:data:`RENAMED`) points to today's. No option is taken by
    an abbreviation (a typo that abbreviates another flag would set it). Every zerogap
    command's parser is one (a subcommand's parser takes its parent's class)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """``PROG: error: MESSAGE`` on one line, and exit status 2 (argparse prints its usage
        first; ``--help`` shows it)."""
        choice = _INVALID_CHOICE.match(message)
        if choice:
            what, typed, known = choice.groups()
            names = [name.strip("'") for name in known.split(", ")]
            what = "command" if what in ("COMMAND", "ACTION") else what
            message = (f"unknown {what} {typed!r}{did_you_mean(typed, names)}; choose from "
                       f"{', '.join(names)}")
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        unknown = self._unknown_options(words)
        if unknown:
            self._refuse(unknown)
        namespace, extras = super().parse_known_args(words, namespace)
        if extras and not self._has_commands():
            self._refuse(extras)
        return namespace, extras

    def _refuse(self, unknown: list[str]) -> None:
        """One line naming the first unknown option and what it most resembles."""
        known = list(self._option_string_actions)
        word = unknown[0]
        if RENAMED.get(word) in known:
            self.error(f"{word} is now {RENAMED[word]}")
        hint = did_you_mean(word, known) if word.startswith("-") else ""
        self.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")

    def _has_commands(self) -> bool:
        return any(isinstance(a, argparse._SubParsersAction) for a in self._actions)

    def _unknown_options(self, words: list[str]) -> list[str]:
        """The words that look like options of this parser but are none; with subcommands,
        only the words before the command's name are this parser's."""
        commands = self._has_commands()
        unknown = []
        for word in words:
            if word == "--" or (commands and not word.startswith("-")):
                break
            if self._is_option(word) is False:
                unknown.append(word.split("=", 1)[0])
        return unknown

    def _is_option(self, word: str) -> bool | None:
        """True for a known option (or a short one with its value attached), False for an
        unknown one, None for a word that is no option (a value, a negative number, text with
        a space)."""
        if not word.startswith("-") or word == "-" or " " in word:
            return None
        if self._negative_number_matcher.match(word) and not self._has_negative_number_optionals:
            return None
        name = word.split("=", 1)[0]
        known = self._option_string_actions
        return name in known or (not word.startswith("--") and word[:2] in known)


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
                         note: str = "", values: Mapping[str, str] | None = None) -> None:
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
    ``values`` say, by field, what this command's flag takes (a field's ``values`` metadata
    otherwise): the meaning stays the field's, worded once, the values the command's own
    (``--split-file``: a split.json, or also a file of ids).
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
        takes, bounds = (values or {}).get(name, meta.get("values", "")), bounds_text(meta)
        if required:
            shown = "required"
        elif says is not None:
            shown = says + note
        elif default is inspect.Parameter.empty:
            shown = "none"
        else:
            shown = _shown(default) + note
        kwargs["help"] = _help(meaning, takes, bounds, None if required else shown)
        action = parser.add_argument(*spelled, **kwargs)
        action.field = name
        action.described = (meaning, "; ".join(text for text in (takes, bounds) if text), shown)
        action.help = kwargs["help"]  # a switch appends its own "(default: ...)"; one is shown


def _split_default(text: str) -> tuple[str, str | None]:
    """``text`` without its trailing ``(default: X)``, and X (None when it has none)."""
    said = _SAYS_DEFAULT.search(text)
    return (text, None) if said is None else (text[: said.start()], said.group(1))


def _help(meaning: str, takes: str, bounds: str, default: str | None) -> str:
    """A flag's help line: its meaning, what it takes, its bounds, its default (None:
    required)."""
    return meaning + (f": {takes}" if takes else "") + (f" ({bounds})" if bounds else "") + (
        f" (default {default})" if default is not None else "")


def described_argument(parser, *flags: str, meaning: str, values: str = "",
                       shown: str | None = None, **kwargs: Any) -> argparse.Action:
    """A flag that sets no config field, worded as a generated one: ``meaning`` (the same in
    every command that takes it), ``values`` (what this command's flag takes) and ``shown``,
    its default as help shows it (None: required, or nothing to show)."""
    shown = None if kwargs.get("required") else shown
    action = parser.add_argument(*flags, help=_help(meaning, values, "", shown), **kwargs)
    action.described = (meaning, values, "required" if kwargs.get("required") else
                        shown or "—")
    return action


# The options that set no config field, each worded once for every command that takes it.

def add_out(parser, what: str, *, required: bool = True, default: Any = None,
            otherwise: str | None = None) -> None:
    """``--out`` (also lm-eval's ``--output-path``): where the command writes its result,
    ``what`` (this command's: a run directory, a folder, a file); ``otherwise`` says where it
    goes when neither required nor given nor defaulted."""
    kwargs = {"default": default} if default is not None else {}
    shown = otherwise if otherwise else None if default is None else show_value(default)
    described_argument(parser, "--out", "--output-path", dest="out", type=Path,
                       required=required, metavar="PATH",
                       meaning="where the command writes its result", values=what,
                       shown=shown, **kwargs)


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
    """``--limit N``: a study setting's ``limit`` field, whose rule every command shares (for a
    command without a split file, without its words on one)."""
    from zerogap.study.spec import SettingSpec

    add_config_arguments(parser, SettingSpec, ("limit",), values={"limit": ""})


def add_strategy_arguments(parser) -> None:
    """``--strategy NAME`` and its ``--set KEY=VALUE`` settings (typed by the strategy's
    config)."""
    parser.add_argument("--strategy", default="identity", metavar="NAME[:KEY=VALUE,...]",
                        help="registered strategy name ('zerogap strategy list'), its settings "
                             "after a colon as in a study's strategies (railcap:n=3,mode=ban)")
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


# The engine's flags: the weight dtype (resumed as recorded) and vLLM's sizes.

# What --dtype is when not given: a folder that holds runs resumes in the dtype they record.
DTYPE_DEFAULT = "the dtype the folder's runs record, else auto"


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """The weight dtype and vLLM's flags, from :class:`~zerogap.engine.base.EngineOptions`
    (``zerogap sample``, ``greedy`` and ``evaluate``); ``--dtype`` stays None unless given
    (:func:`zerogap.runs.resume_dtype` resolves it)."""
    from zerogap.engine.base import EngineOptions

    add_dtype_argument(p)
    add_config_arguments(p, EngineOptions, ("tensor_parallel_size", "pipeline_parallel_size",
                                            "vllm_options"))


def add_dtype_argument(p: argparse.ArgumentParser) -> None:
    """``--dtype``: None unless given, shown as :data:`DTYPE_DEFAULT`."""
    from zerogap.engine.base import EngineOptions

    add_config_arguments(p, EngineOptions, ("dtype",), unset=True,
                         defaults={"dtype": DTYPE_DEFAULT})


def engine_options(args, dtype: str | None = None):
    """The :class:`~zerogap.engine.base.EngineOptions` the flags ask for, ``dtype`` (default:
    ``--dtype``, else auto) as the weights' dtype; checked on this machine once, when the run
    or study that uses them is prepared. ``--vllm-option`` values read as JSON when they
    parse."""
    from typing import cast

    from zerogap.config import parse_pairs
    from zerogap.engine.base import EngineOptions, WeightDtype

    options = {}
    for key, text in parse_pairs("--vllm-option", args.vllm_option).items():
        try:
            options[key] = json.loads(text)
        except json.JSONDecodeError:
            options[key] = text
    return EngineOptions(device=args.device,
                         dtype=cast(WeightDtype, dtype or args.dtype or "auto"),
                         max_batch=args.batch_size,
                         tensor_parallel_size=args.tensor_parallel_size,
                         pipeline_parallel_size=args.pipeline_parallel_size,
                         vllm_options=options)


# The scoring flags (``score``, ``report`` and ``evaluate``).

SCORING = ("bins", "resamples", "level", "noise_sims", "seed", "margin", "paired_null")


def add_scoring_options(p, names=SCORING, *, note: str = "") -> None:
    """Flags of :class:`~zerogap.analysis.score.ScoreSettings`'s fields in ``names``
    (``score``, ``report`` and ``evaluate``), unset unless given."""
    from zerogap.analysis.score import ScoreSettings

    add_config_arguments(p, ScoreSettings, names, unset=True, note=note)


def scoring_changes(args, names=SCORING) -> dict:
    """The scoring settings the flags set (unset flags keep the defaults or what a study
    recorded)."""
    from zerogap.analysis.score import ScoreSettings

    return given(args, ScoreSettings, names)


# Contamination strengths (``contaminate`` and ``evaluate``).

# ``--sweep``'s keys and the config fields they set.
SWEEP_KEYS = {"epochs": "sweep_epochs", "copies": "sweep_copies"}


def sweep_item(text: str) -> tuple[str, tuple[int, ...]]:
    """One ``--sweep`` word, ``epochs=1,2,5``, as ``(config field, values)``."""
    key, sep, values = text.partition("=")
    if not sep or key not in SWEEP_KEYS:
        raise argparse.ArgumentTypeError(f"expected epochs=V,V,... or copies=V,V,..., got {text!r}")
    try:
        return SWEEP_KEYS[key], tuple(int(v) for v in values.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key}: expected integers, got {values!r}") from None


def add_sweep(parser, *, otherwise: str) -> None:
    """``--sweep KEY=V,V,...``: contamination strengths, the two sweep fields of
    :class:`~zerogap.pipelines.contamination_config.ContaminationConfig` in one flag."""
    parser.add_argument("--sweep", nargs="+", type=sweep_item, metavar="KEY=V,V,...",
                        help="contamination strengths, one M_co per combination: epochs=1,2,5 "
                             "copies=1,5,20 (evaluate builds those missing in --models; Table "
                             f"3 reads across them) (default: {otherwise})")


# Question ids from a split file (``neurons`` and ``paraphrase``).

def read_ids(path: Path, key: str = "leaked") -> list[str]:
    """Question ids from a ``split.json`` (its ``key`` list) or a file of ids, one a line."""
    text = read_text(path)
    if path.suffix == ".json":
        try:
            ids = json.loads(text)[key]
        except (ValueError, KeyError, TypeError, RecursionError):  # not JSON, no list
            raise UserError(f"{path}: expected a split.json with a {key!r} list") from None
    else:
        ids = [line.strip() for line in text.splitlines() if line.strip()]
    if not isinstance(ids, list) or not ids or not all(isinstance(q, str) for q in ids):
        raise UserError(f"{path}: no question ids")
    return ids


def questions_by_ids(path: Path, questions: list, split: str, task: str,
                     key: str = "leaked") -> list:
    """The questions :func:`read_ids` names in ``path`` (a split.json's ``key`` list), in its
    order; one line naming the first id that is not among ``questions`` (split ``split`` of
    ``task``)."""
    by_id = {q.id: q for q in questions}
    wanted = read_ids(path, key)
    unknown = [q for q in wanted if q not in by_id]
    if unknown:
        raise UserError(f"{path}: {len(unknown)} ids not in split {split!r} of {task} (first: "
                        f"{unknown[0]!r})")
    return [by_id[q] for q in wanted]


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
