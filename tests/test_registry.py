"""The shared name -> object registry: unique names, one-line lookups, scoped registrations."""

import pytest

from zerogap.errors import UserError
from zerogap.registry import Registry
from zerogap.tasks import task_names


def test_scoped_registration_ends_with_its_block():
    reg: Registry[int] = Registry("widget")
    reg.register("a")(1)
    with reg.registered("b", 2):
        assert reg.names() == ["a", "b"] and reg.get("b") == 2
        with pytest.raises(ValueError, match="registered twice"):
            reg.register("b")(3)
    assert reg.names() == ["a"]
    with pytest.raises(UserError, match="unknown widget 'b'; known widgets: a"):
        reg.get("b")


class Scoped:
    name = "scoped-fixture-task"


def test_register_task_fixture_scopes_to_the_test(register_task):
    register_task(Scoped)
    assert Scoped.name in task_names()


def test_the_fixture_left_nothing_behind():
    assert Scoped.name not in task_names()
