"""One contract for every config: JSON and command-line round trips, and every declared
constraint refusing a value that breaks it (derived from the declarations themselves)."""

import dataclasses
import inspect
import json
import typing

import pytest

from zerogap.config import from_strings, parameters
from zerogap.engine.base import SamplingSpec
from zerogap.errors import UserError
from zerogap.strategies import get_strategy, strategy_class, strategy_names
from zerogap.tasks import task_config_class

CONFIGS = sorted({strategy_class(n).config_class for n in strategy_names()} | {SamplingSpec}
                 | {task_config_class(n) for n in ("arith", "gsm8k", "jsonl")},
                 key=lambda c: c.__name__)


def _text(value):
    return "none" if value is None else str(value).lower() if isinstance(value, bool) \
        else json.dumps(value) if isinstance(value, tuple) else str(value)


def _required(config_class):
    """A value for each field without a default (the jsonl task's path)."""
    return {name: "data.jsonl" for name, (_, default, _) in parameters(config_class).items()
            if default is inspect.Parameter.empty}


def _breaking(config_class):
    """(field, value) pairs that break a declared type or bound, one per declaration."""
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        meta, kind = f.metadata, hints[f.name]
        if "min" in meta:
            yield f.name, meta["min"] - 1
        if "gt" in meta:
            yield f.name, meta["gt"]
        if "max" in meta:
            yield f.name, meta["max"] + 1
        if typing.get_origin(kind) is typing.Literal:
            yield f.name, "not-a-choice"
        if kind is bool:
            yield f.name, "yes"
        if kind is str:
            yield f.name, 5
        if kind in (int, float):
            yield f.name, True


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_round_trips(config_class):
    config = config_class(**_required(config_class))
    assert config_class.from_json(config.to_json()) == config
    texts = {name: _text(getattr(config, name)) for name in parameters(config_class)}
    assert config_class(**from_strings(config_class, texts, owner="test")) == config


@pytest.mark.parametrize(
    ("config_class", "name", "value"),
    [(c, name, value) for c in CONFIGS for name, value in _breaking(c)],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_every_declared_constraint_refuses_a_value_that_breaks_it(config_class, name, value):
    with pytest.raises(UserError, match=rf"^{config_class.__name__}\.{name} must be .*got "):
        config_class(**{**_required(config_class), name: value})


def test_every_registered_strategy_builds_with_its_defaults():
    for name in strategy_names():
        assert get_strategy(name).name == name
