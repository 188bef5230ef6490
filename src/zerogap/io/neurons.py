"""The shortcut-neuron list file (``zerogap neurons`` writes it, strategy ``shortcut`` reads it).

One JSON object: ``{"format": "zerogap-shortcut-neurons", "neurons": [[layer, index], ...],
"meta": {...}}``, neurons most important first and ``meta`` the provenance of the location
(models, data, scoring settings; ``docs/baselines.md`` §3). Written atomically.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "neurons.json"
>>> save_neurons(path, [(0, 4), (1, 6)], {"model": "tiny"})
>>> load_neurons(path)
([(0, 4), (1, 6)], {'model': 'tiny'})
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from zerogap.errors import DataError
from zerogap.io.files import atomic_write, read_text

NEURONS_FORMAT = "zerogap-shortcut-neurons"

Neuron = tuple[int, int]  # (layer, index)


def save_neurons(path: str | Path, neurons: Sequence[Neuron], meta: dict) -> None:
    """Write a neuron list with its provenance (models, data, scores' settings) as JSON."""
    record = {"format": NEURONS_FORMAT, "neurons": [list(n) for n in neurons], "meta": meta}
    with atomic_write(path) as handle:
        handle.write(json.dumps(record, indent=1) + "\n")


def load_neurons(path: str | Path) -> tuple[list[Neuron], dict]:
    """Read a list written by :func:`save_neurons`; a :class:`DataError` naming the file if it
    is malformed."""
    try:
        record = json.loads(read_text(path))
    except (ValueError, RecursionError) as err:  # not JSON, too deep, or past the digit limit
        raise DataError(f"{path}: not a JSON neuron list ({str(err).split(';')[0]})") from None
    if not isinstance(record, dict) or record.get("format") != NEURONS_FORMAT:
        raise DataError(f"{path}: not a zerogap shortcut-neuron list")
    neurons = record.get("neurons")
    if not isinstance(neurons, list) or not all(
        isinstance(n, list) and len(n) == 2 and all(type(v) is int and v >= 0 for v in n)
        for n in neurons
    ):
        raise DataError(f"{path}: 'neurons' must be a list of [layer, index] pairs")
    return [(n[0], n[1]) for n in neurons], record.get("meta", {})
