"""Name -> object registries filled by decorators (tasks, grading modes)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from zerogap.errors import UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """Objects registered under unique names; ``kind`` names them in error messages."""

    def __init__(self, kind: str, plural: str | None = None) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object as ``name``."""

        def decorate(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            return item

        return decorate

    @contextlib.contextmanager
    def registered(self, name: str, item: T) -> Iterator[T]:
        """Register ``item`` as ``name`` for the duration of a ``with`` block only (tests)."""
        self.register(name)(item)
        try:
            yield item
        finally:
            del self._items[name]

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def get(self, name: str) -> T:
        """The object registered as ``name``; an unknown name raises ``ValueError`` listing all."""
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(self.names())
            raise UserError(f"unknown {self.kind} {name!r}; known {self.plural}: {known}") from None
