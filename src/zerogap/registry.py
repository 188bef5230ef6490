"""Name -> object registries filled by decorators (tasks, grading modes, strategies, backends).

A registry may also know names whose module is not imported yet: built-ins registered with
:meth:`Registry.register_lazy`, and third-party plugins named by an entry point of the
registry's ``group`` (lm-evaluation-harness's ``register_model`` is the model). Either names a
module whose import runs the decorator that registers the name; it is imported when the name is
first asked for, so listing names imports nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from zerogap.errors import UserError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Objects registered under unique names; ``kind`` names them in error messages.

    ``group``: the entry-point group whose entries (name -> module) are plugins of this kind.
    """

    def __init__(self, kind: str, plural: str | None = None, *, group: str | None = None) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.group = group
        self._items: dict[str, T] = {}
        self._lazy: dict[str, Callable[[], object]] = {}
        self._found = group is None  # entry points are read once, on first use

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object as ``name``."""

        def decorate(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            return item

        return decorate

    def register_lazy(self, name: str, module: str) -> None:
        """Know ``name`` now; import ``module`` (which registers it) when it is first asked for."""
        self._lazy[name] = lambda: importlib.import_module(module)

    @contextlib.contextmanager
    def registered(self, name: str, item: T) -> Iterator[T]:
        """Register ``item`` as ``name`` for the duration of a ``with`` block only (tests)."""
        self.register(name)(item)
        try:
            yield item
        finally:
            del self._items[name]

    def _pending(self) -> dict[str, Callable[[], object]]:
        if not self._found:
            self._found = True
            for entry in importlib.metadata.entry_points(group=self.group or ""):
                self._lazy.setdefault(entry.name, entry.load)
        return {k: v for k, v in self._lazy.items() if k not in self._items}

    def names(self) -> list[str]:
        """Registered names, those not imported yet included, sorted."""
        return sorted({*self._items, *self._pending()})

    def get(self, name: str) -> T:
        """The object registered as ``name`` (importing its module on first use); an unknown
        name raises :class:`UserError` listing all."""
        if name not in self._items and name in (pending := self._pending()):
            pending[name]()
            if name not in self._items:
                raise UserError(f"the module behind {self.kind} {name!r} did not register it "
                                f"(register it under the name its entry point gives)")
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(self.names())
            raise UserError(f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; "
                            f"known {self.plural}: {known}") from None
