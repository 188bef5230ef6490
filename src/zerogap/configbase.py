"""JSON round-tripping shared by every frozen config (strategies, decoding interventions).

A config is a frozen dataclass that validates itself in ``__post_init__``; this mixin adds
``to_dict``/``to_json`` and ``from_dict``/``from_json`` so that every result can carry the exact
config that produced it, and a stored config can be rebuilt (and re-validated) from it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Self


class JsonConfig:
    """Mixin for frozen dataclass configs: JSON serialisation that re-validates on load."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)  # type: ignore[arg-type]

    def to_json(self) -> str:
        """The fields as a JSON object with sorted keys."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Rebuild from ``to_dict`` output; unknown keys raise ``ValueError`` naming them."""
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"{cls.__name__}: unknown field(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> Self:
        """Rebuild from ``to_json`` output."""
        return cls.from_dict(json.loads(text))


def require_int(owner: str, name: str, value: Any, minimum: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (not a bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}.{name} must be an integer >= {minimum}, got {value!r}")


def require_positive(owner: str, name: str, value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is a real number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{owner}.{name} must be a number > 0, got {value!r}")
