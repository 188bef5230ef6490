"""Provenance records: what produced a result, in one shape carried by every output.

A record is a plain JSON-serialisable dict. Files are identified by path and SHA-256 digest;
runs by their stored configuration (model fingerprint, task, strategy config, seeds, m, tau,
package versions), see :func:`run_record`. Torch-free.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
from collections.abc import Mapping
from typing import Any

# Stored run fields that say what produced its samples (the rest is bookkeeping).
RUN_FIELDS = ("model", "model_fingerprint", "task", "task_config", "split", "strategy",
              "strategy_config", "readout", "m", "temperature", "seed", "max_new_tokens",
              "top_k", "top_p", "versions")


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages a result depends on ("absent" when not installed)."""
    out = {"python": platform.python_version()}
    for name in ("zerogap", "numpy", "torch", "transformers", "peft"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_record(path: str | os.PathLike, **extra: Any) -> dict[str, Any]:
    """``{"path", "sha256", **extra}`` for an input file."""
    return {"path": str(path), "sha256": file_sha256(path), **extra}


def run_record(path: str | os.PathLike, config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"path", "run": {...}}`` for a run directory, from its stored configuration."""
    return {"path": str(path), "run": {k: config[k] for k in RUN_FIELDS if k in config}}
