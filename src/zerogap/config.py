"""The one config style: frozen dataclasses that validate themselves, JSON round trips, and
conversion of command-line strings by each field's declared type.

A config is a frozen dataclass with :class:`JsonConfig` mixed in. Each field declares its type
(``int``, ``float``, ``bool``, ``str``, ``Literal[...]``, optionals, tuples) and, in its
metadata, its help text and bounds (``min``, ``gt``, ``max``) and, where the command line spells
it otherwise than ``--field-name``, its ``flag``; :func:`check_fields` enforces them on
construction, raising :class:`FieldError` naming the field (the command line names the flag).
:func:`from_strings` turns ``KEY=VALUE`` strings (``--set``, ``--task-option``) into typed
keyword arguments (after :func:`parse_pairs` splits them, the one parser of ``KEY=VALUE``
items) for any config or any factory with annotated keyword parameters (tasks), so every
option everywhere is converted and refused the same way. :func:`describe` generates the
option help from the declarations.

Plain dataclasses rather than pydantic: the configs are few and small, the checks they need are
ranges and choices, and the core must import nothing beyond numpy.

>>> from dataclasses import dataclass, field
>>> from typing import Literal
>>> @dataclass(frozen=True)
... class Demo(JsonConfig):
...     n: int = field(default=4, metadata={"help": "window", "min": 1})
...     mode: Literal["cap", "ban"] = "cap"
>>> Demo(**from_strings(Demo, {"n": "3", "mode": "ban"}, owner="demo"))
Demo(n=3, mode='ban')
>>> from_strings(Demo, {"mode": "clip"}, owner="demo")
Traceback (most recent call last):
...
zerogap.errors.UserError: --set mode: must be one of 'cap', 'ban', got 'clip'
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Self

from zerogap.errors import UserError

_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_NONES = {"none", "null"}


class FieldError(UserError):
    """A config field's value breaks its declaration: ``owner`` (the config's class name),
    ``field`` and ``problem`` (``"must be at least 1, got 0"``), so that a caller names the
    field as its user set it (the command line: ``-m must be at least 1, got 0``)."""

    def __init__(self, owner: str, field: str, problem: str) -> None:
        super().__init__(f"{owner}.{field} {problem}")
        self.owner, self.field, self.problem = owner, field, problem

    def __reduce__(self) -> tuple:  # pickles (a study job's error crosses processes) as built
        return type(self), (self.owner, self.field, self.problem)


class JsonConfig:
    """Mixin for frozen dataclass configs: declared checks, JSON that re-validates on load.

    ``__post_init__`` runs :func:`check_fields`; a config with further checks extends it
    (calling ``super().__post_init__()`` first).
    """

    def __post_init__(self) -> None:
        check_fields(self)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def to_json(self) -> str:
        """The fields as a JSON object with sorted keys."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from ``to_dict`` output; unknown keys raise :class:`UserError` naming them."""
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(
                f"{cls.__name__}: unknown field(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> Self:
        """Rebuild from ``to_json`` output."""
        return cls.from_dict(json.loads(text))


def same_field(config: type, name: str, **metadata: Any) -> Any:
    """A field declared as ``config``'s field ``name`` (its default, help and bounds), with
    ``metadata`` overriding: one declaration for a value two configs hold (a study's m is a
    run's m).

    >>> from dataclasses import dataclass, field
    >>> @dataclass(frozen=True)
    ... class Run(JsonConfig):
    ...     m: int = field(default=50, metadata={"help": "samples", "min": 1})
    >>> @dataclass(frozen=True)
    ... class Study(JsonConfig):
    ...     m: int = same_field(Run, "m", min=2)
    >>> Study().m
    50
    >>> Study(m=1)
    Traceback (most recent call last):
    ...
    zerogap.config.FieldError: Study.m must be at least 2, got 1
    """
    source = {f.name: f for f in dataclasses.fields(config)}[name]
    return dataclasses.field(default=source.default, metadata={**source.metadata, **metadata})


# Values several configs hold (a run's, a study setting's, a contamination build's), declared
# once: their flags read and check alike in every command (``shared_field``).
SHARED: dict[str, dict[str, Any]] = {
    "model": {"help": "a model spec: 'embedded', a .gguf file, a model or PEFT-adapter folder, "
                      "or a hub id", "metavar": "MODEL"},
    "task": {"help": "registered task name, e.g. gsm8k or arith ('zerogap task list')"},
    "task_options": {"help": "the task's options, each converted by its declared type "
                             "('zerogap task show NAME' lists them); KEY=VALUE on the command "
                             "line (repeatable), a table in a study file",
                     "flag": "--task-option"},
    "split": {"help": "the task's dataset split", "flag": "--split"},
    "dtype": {"help": "weight dtype; auto: bfloat16 where the device computes it natively (a "
                      "CPU with AMX-BF16 or AVX512-BF16, a GPU), else float32"},
    "seed": {"help": "seed of every random draw the command makes (sampling noise, training, "
                     "the tests' resampling): the same seed, the same result", "min": 0},
}


def shared_field(concept: str, **kwargs: Any) -> Any:
    """A field declared as :data:`SHARED`'s ``concept`` (help, bounds, flag); ``kwargs`` are
    :func:`dataclasses.field`'s (``default``, ``default_factory``).

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Build(JsonConfig):
    ...     seed: int = shared_field("seed", default=0)
    >>> Build(seed=-1)
    Traceback (most recent call last):
    ...
    zerogap.config.FieldError: Build.seed must be at least 0, got -1
    """
    return dataclasses.field(metadata=SHARED[concept], **kwargs)


def require_int(owner: str, name: str, value: Any, minimum: int) -> None:
    """Raise :class:`UserError` unless ``value`` is an int (not a bool) ``>= minimum``.

    For arguments that are not config fields (a config declares ``min`` instead).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{owner}.{name} must be an integer >= {minimum}, got {value!r}")


def check_fields(config: Any) -> None:
    """Check every field of a config against its declared type and constraints.

    Types: ``int`` (not bool), ``float`` (an int is accepted; finite), ``bool``, ``str``,
    ``Literal[...]`` (one of the values), ``X | None`` (None or an ``X``), tuples (any
    sequence, stored as a tuple). Constraints in the field's metadata: ``min`` (>=), ``gt`` (>),
    ``max`` (<=), ``lt`` (<). Raises :class:`FieldError` naming ``Class.field``, what it must be
    and the value; the command line names the flag the user typed instead.
    """
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        kind = hints[f.name]
        problem = field_problem(kind, f.metadata, value)
        if problem is not None:
            raise FieldError(type(config).__name__, f.name, problem)
        if value is not None and typing.get_origin(_optional_inner(kind) or kind) is tuple:
            object.__setattr__(config, f.name, _tuples(list(value)))  # any sequence, stored as one


def check_value(config: type, name: str, value: Any) -> None:
    """Raise :class:`FieldError` unless ``value`` fits field ``name`` of ``config`` (one field
    alone, before the config is built: a flag checked before a file it overrides is read).

    >>> from zerogap.engine.base import SamplingSpec
    >>> check_value(SamplingSpec, "m", 0)
    Traceback (most recent call last):
    ...
    zerogap.config.FieldError: SamplingSpec.m must be at least 1, got 0
    """
    declared = {f.name: f for f in dataclasses.fields(config)}[name]
    problem = field_problem(typing.get_type_hints(config)[name], declared.metadata, value)
    if problem is not None:
        raise FieldError(config.__name__, name, problem)


def field_problem(kind: Any, meta: Mapping[str, Any], value: Any) -> str | None:
    """What is wrong with ``value`` for a field of type ``kind`` with constraints ``meta``
    (``"must be at least 1, got 0"``), or None when it fits."""
    inner = _optional_inner(kind)
    if inner is not None:
        if value is None:
            return None
        kind = inner
    if typing.get_origin(kind) is tuple:
        if isinstance(value, str) or not isinstance(value, tuple | list):
            return f"must be a list, got {value!r}"
        return None
    choices = _literal_choices(kind)
    if choices is not None:
        return None if value in choices else f"must be one of {_show(choices)}, got {value!r}"
    if not _is_instance(value, kind):
        return f"must be {_NOUNS.get(kind, _type_name(kind))}, got {value!r}"
    broken = _broken_bound(value, meta) if kind in (int, float) else None
    return None if broken is None else f"must be {broken}, got {value!r}"


_NOUNS = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}


def _is_instance(value: Any, kind: Any) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind) if isinstance(kind, type) else True


def _broken_bound(value: float, meta: Mapping[str, Any]) -> str | None:
    """The first declared bound ``value`` breaks, as words (``"at least 1"``), or None."""
    for key, words, holds in (("min", "at least", value >= meta.get("min", value)),
                              ("gt", "greater than", "gt" not in meta or value > meta["gt"]),
                              ("max", "at most", value <= meta.get("max", value)),
                              ("lt", "less than", "lt" not in meta or value < meta["lt"])):
        if key in meta and not holds:
            return f"{words} {meta[key]}"
    return None


def bounds_text(meta: Mapping[str, Any]) -> str:
    """A field's declared bounds as help shows them (``">= 1 and <= 65536"``; empty: none)."""
    low = f">= {meta['min']}" if "min" in meta else f"> {meta['gt']}" if "gt" in meta else ""
    high = f"<= {meta['max']}" if "max" in meta else f"< {meta['lt']}" if "lt" in meta else ""
    return " and ".join(b for b in (low, high) if b)


def parameters(target: Callable[..., Any]) -> dict[str, tuple[Any, Any, str]]:
    """``{name: (type, default, help)}`` of a dataclass's fields or a factory's keyword parameters.

    ``default`` is :data:`inspect.Parameter.empty` for a required one.
    """
    if dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(target)
        out = {}
        for f in dataclasses.fields(target):
            default = (f.default if f.default is not dataclasses.MISSING else
                       f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else inspect.Parameter.empty)
            bounds = bounds_text(f.metadata)
            help_text = f.metadata.get("help", "") + (f" ({bounds})" if bounds else "")
            out[f.name] = (hints[f.name], default, help_text)
        return out
    init = target.__init__ if isinstance(target, type) else target  # type: ignore[misc]
    hints = typing.get_type_hints(init)
    return {
        name: (hints.get(name, str), p.default, "")
        for name, p in inspect.signature(init).parameters.items()
        if name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def check_names(target: Callable[..., Any], given: Mapping[str, Any], *, owner: str,
                option: str) -> None:
    """Raise :class:`UserError` for a name ``target`` does not take or a required one missing."""
    known = parameters(target)
    for name in given:
        if name not in known:
            raise UserError(
                f"{owner} has no option {name!r}; known: {', '.join(sorted(known)) or 'none'}"
            )
    missing = [n for n, (_, default, _) in known.items()
               if default is inspect.Parameter.empty and n not in given]
    if missing:
        raise UserError(f"{owner} needs {option} {missing[0]}=VALUE")


def parse_pairs(option: str, items: Sequence[str], *, what: str = "KEY=VALUE") -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``, in order; a malformed or repeated key is a
    :class:`UserError` naming ``option``.

    >>> parse_pairs("--set", ["n=4", "mode=ban"])
    {'n': '4', 'mode': 'ban'}
    >>> parse_pairs("--set", ["n=4", "n=5"])
    Traceback (most recent call last):
    ...
    zerogap.errors.UserError: --set n: given twice
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UserError(f"{option} expects {what}, got {item!r}")
        if key in out:
            raise UserError(f"{option} {key}: given twice")
        out[key] = value.strip()
    return out


def from_strings(target: Callable[..., Any], pairs: Mapping[str, str], *, owner: str,
                 option: str = "--set") -> dict[str, Any]:
    """Typed keyword arguments for ``target`` from ``{name: text}``, converted by declared type
    and checked against the declared bounds.

    ``int``, ``float``, ``bool`` (true/false/yes/no/1/0), ``str``, ``Literal[...]`` and optionals
    (``none``/``null`` for None) convert directly; any other type is read as JSON. Unknown names
    and missing required ones raise :class:`UserError` naming ``owner``; a value that does not
    convert or breaks a bound names ``option`` and the key, as the user typed them
    (``--set n: must be at least 1, got 0``).
    """
    check_names(target, pairs, owner=owner, option=option)
    known = parameters(target)
    meta = ({f.name: f.metadata for f in dataclasses.fields(target)}
            if dataclasses.is_dataclass(target) else {})
    values = {}
    for name, text in pairs.items():
        where = f"{option} {name}:"
        values[name] = _convert(text, known[name][0], where)
        problem = field_problem(known[name][0], meta.get(name, {}), values[name])
        if problem is not None:
            raise UserError(f"{where} {problem}")
    return values


def describe(target: Callable[..., Any]) -> list[str]:
    """One line per field or option: ``name  type  (default ...)  help``, for generated help."""
    lines = []
    for name, (kind, default, help_text) in parameters(target).items():
        shown = "required" if default is inspect.Parameter.empty else f"default {default!r}"
        lines.append(f"{name:16} {_type_name(kind):24} {shown:20} {help_text}".rstrip())
    return lines


def show_value(value: Any) -> str:
    """``value`` as ``--set``/``--task-option`` would spell it (JSON for lists, ``none``).

    >>> show_value(((2, 10), (5, 20))), show_value(None), show_value(True), show_value("")
    ('[[2, 10], [5, 20]]', 'none', 'true', '""')
    """
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return json.dumps(value)
    return str(value) if value != "" else '""'


def markdown_table(kind: str,
                   entries: Sequence[tuple[str, Callable[..., Any], Mapping[str, Any]]]) -> str:
    """A Markdown table of every option of every ``(name, target, defaults)`` entry, from the
    declarations (:func:`parameters`); ``defaults`` override the declared ones (a preset).

    The README's settings tables are this output (``zerogap strategy list --markdown``,
    ``zerogap task list --markdown``); a test fails when they drift apart.
    """
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [f"| {kind} | option | type | default | meaning |", "|---|---|---|---|---|"]
    for name, target, defaults in entries:
        declared = parameters(target)
        if not declared:
            lines.append(f"| `{name}` | — | | | no options |")
        for option, (kind_, default, help_text) in declared.items():
            value = defaults.get(option, default)
            shown = "required" if value is inspect.Parameter.empty else f"`{show_value(value)}`"
            lines.append(f"| `{name}` | `{option}` | {cell(_type_name(kind_))} | {cell(shown)} "
                         f"| {cell(help_text)} |")
    return "\n".join(lines) + "\n"


def _literal_choices(kind: Any) -> tuple | None:
    return typing.get_args(kind) if typing.get_origin(kind) is Literal else None


def _show(choices: tuple) -> str:
    return ", ".join(repr(c) for c in choices)


def _optional_inner(kind: Any) -> Any | None:
    """``X`` for ``X | None`` (or ``Optional[X]``), else None."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0]
    return None


def _type_name(kind: Any) -> str:
    inner = _optional_inner(kind)
    if inner is not None:
        return f"{_type_name(inner)} or none"
    choices = _literal_choices(kind)
    if choices is not None:
        return " | ".join(str(c) for c in choices)
    return getattr(kind, "__name__", None) or str(kind).replace("typing.", "")


def _convert(text: str, kind: Any, where: str) -> Any:
    inner = _optional_inner(kind)
    if inner is not None:
        return None if text.strip().lower() in _NONES else _convert(text, inner, where)
    choices = _literal_choices(kind)
    if choices is not None:
        for choice in choices:
            if str(choice) == text:
                return choice
        raise UserError(f"{where} must be one of {_show(choices)}, got {text!r}")
    if kind is bool:
        if text.lower() in _BOOLS:
            return _BOOLS[text.lower()]
        raise UserError(f"{where} must be true or false, got {text!r}")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise UserError(f"{where} must be an integer, got {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise UserError(f"{where} must be a number, got {text!r}") from None
    if kind is str:
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise UserError(f"{where} must be JSON of type {_type_name(kind)}, got {text!r}") from None
    return _tuples(value) if typing.get_origin(kind) is tuple else value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
