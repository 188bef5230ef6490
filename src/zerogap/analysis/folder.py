"""The one reader of study folders: ``study.json`` and the files it names, checked before use.

A study folder (written by :mod:`zerogap.study.run`, read by ``zerogap report``) can be
edited, copied in part, truncated by a full disk or damaged by hand. :func:`read_study_folder`
checks everything the report reads (every key of ``study.json`` with its type, every counts
file, run directory and ranks file it names) and refuses a damaged folder with one
:class:`~zerogap.errors.DataError` line naming the file and the key, before anything is scored
or written. The report then indexes the validated record without further checks.

Paths in ``study.json`` are relative to the folder and must stay inside it: a study folder is
moved and shared as a whole (paper arXiv 2608.07341 §5: a report rebuilt from the folder alone).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerogap.errors import DataError, ZerogapError
from zerogap.io.jsonlines import read_json_object

STUDY_FILE = "study.json"
STUDY_FORMAT = "zerogap-study"
_NUMBER = (int, float)


@dataclass(frozen=True)
class StudyFolder:
    """A checked study folder: ``record`` is ``study.json`` as read; ``ranks`` holds each
    setting's Figure 1 b/d ranks (question id -> ranks), empty for a setting without them."""

    folder: Path
    record: dict
    ranks: dict[str, dict[str, list[int]]]

    @property
    def settings(self) -> list[dict]:
        return self.record["settings"]


class _Checker:
    """Type checks on one JSON file, each refusal naming the file and the key's path."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, problem: str) -> DataError:
        return DataError(f"{self.path}: key {key}: {problem}")

    def get(self, data: Mapping, key: str, where: str, kinds, *, optional: bool = False,
            what: str | None = None) -> Any:
        """``data[key]``, refused unless it is one of ``kinds`` (None allowed if ``optional``)."""
        name = f"{where}.{key}" if where else key
        if key not in data:
            if optional:
                return None
            raise self.fail(name, "missing")
        value = data[key]
        if value is None and optional:
            return None
        if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple)
                                                    else (kinds,)):
            raise self.fail(name, f"expected {what or _names(kinds)}, got {value!r}")
        if not isinstance(value, kinds):
            raise self.fail(name, f"expected {what or _names(kinds)}, got {_short(value)}")
        return value

    def strings(self, data: Mapping, key: str, where: str, *, optional: bool = False):
        value = self.get(data, key, where, list, optional=optional, what="a list of strings")
        if value is not None and not all(isinstance(v, str) for v in value):
            raise self.fail(f"{where}.{key}", "expected a list of strings")
        return value

    def members(self, folder: Path, named: Mapping, key: str, *, inside: str = "") -> None:
        """Every value of ``named`` (label -> path) a string naming a file in ``folder`` (with
        ``inside``: a folder holding that file)."""
        for label, value in named.items():
            if not isinstance(value, str):
                raise self.fail(f"{key}.{label}", f"expected a string, got {_short(value)}")
            self.member(folder, os.path.join(value, inside) if inside else value,
                        f"{key}.{label}")

    def member(self, folder: Path, value: str, key: str, *, folder_kind: bool = False) -> Path:
        """``folder / value``, refused unless it is a relative path inside ``folder`` naming a
        file (or, with ``folder_kind``, a folder) that exists."""
        path = Path(value)
        if not value or path.is_absolute() or ".." in path.parts:
            raise self.fail(key, f"{value!r} is not a path inside the study folder")
        full = folder / path
        if folder_kind and not full.is_dir():
            raise self.fail(key, f"{full} is not a folder" if full.exists()
                            else f"{full} does not exist")
        if not folder_kind and not full.is_file():
            raise self.fail(key, f"{full} is a folder, not a file" if full.is_dir()
                            else f"{full} does not exist")
        return full


def _names(kinds) -> str:
    names = {str: "a string", int: "an integer", float: "a number", dict: "an object",
             list: "a list", bool: "true or false"}
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _short(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _entry(check: _Checker, folder: Path, entry: Any, i: int) -> dict[str, list[int]]:
    """Check one setting record; returns its ranks (empty without a ranks file)."""
    where = f"settings[{i}]"
    if not isinstance(entry, dict):
        raise check.fail(where, f"expected an object, got {_short(entry)}")
    check.get(entry, "name", where, str)
    for key in ("task", "split"):
        check.get(entry, key, where, str)
    questions = check.get(entry, "questions", where, int)
    leaked = check.strings(entry, "leaked", where, optional=True)
    if leaked is not None and len(leaked) > questions:
        raise check.fail(f"{where}.leaked", f"{len(leaked)} ids for {questions} questions")
    for role in ("clean", "contaminated"):
        model = check.get(entry, role, where, dict)
        check.get(model, "spec", f"{where}.{role}", str)
        if "fingerprint" not in model:  # null when unknown, but the report shows it
            raise check.fail(f"{where}.{role}.fingerprint", "missing")
        check.get(model, "fingerprint", f"{where}.{role}", str, optional=True)
    counts = check.get(entry, "counts", where, dict)
    inside = f"{where}.counts"
    check.member(folder, check.get(counts, "clean", inside, str), f"{inside}.clean")
    repeat = check.get(counts, "repeat", inside, str, optional=True)
    if repeat is not None:
        check.member(folder, repeat, f"{inside}.repeat")
    strategies = check.get(counts, "strategies", inside, dict)
    if not strategies:
        raise check.fail(f"{inside}.strategies", "no strategy")
    check.members(folder, strategies, f"{inside}.strategies")
    runs = check.get(entry, "figure_runs", where, dict, optional=True) or {}
    check.members(folder, runs, f"{where}.figure_runs", inside="run.sqlite")
    # The strategies' runs, which the baselines' readouts read (analysis.baselines).
    runs = check.get(entry, "runs", where, dict, optional=True) or {}
    check.members(folder, {k: v for k, v in runs.items() if k in strategies}, f"{where}.runs",
                  inside="run.sqlite")
    _extras(check, folder, entry, where)
    ranks_file = check.get(entry, "ranks", where, str, optional=True)
    if ranks_file is None:
        return {}
    return _ranks(check.member(folder, ranks_file, f"{where}.ranks"))


def _extras(check: _Checker, folder: Path, entry: dict, where: str) -> None:
    """The optional keys the report's checks section reads: the design checks file, the
    baselines' settings at this scale (LNE-blocking's T_task and beta, ted-scaled's tau, the
    shortcut neurons' location), the reference labels, the controls' counts, an allocated
    study's plan and samples drawn, the jobs' times and their wall time."""
    design = check.get(entry, "design", where, str, optional=True)
    if design is not None:
        check.member(folder, design, f"{where}.design")
    baselines = check.get(entry, "baselines", where, dict, optional=True) or {}
    for key in ("lne_t_task", "ted_scaled_tau", "calibration_questions"):
        check.get(baselines, key, f"{where}.baselines", int, optional=True)
    for key in ("lne_beta", "lne_beta_quantile"):
        check.get(baselines, key, f"{where}.baselines", _NUMBER, optional=True)
    check.get(baselines, "solution_lengths", f"{where}.baselines", str, optional=True)
    shortcut = check.get(baselines, "shortcut", f"{where}.baselines", dict, optional=True)
    for key in ("block_size", "blocks_scored", "blocks_total", "calibration",
                "calibration_leaked") if shortcut else ():
        check.get(shortcut, key, f"{where}.baselines.shortcut", int, optional=True)
    if shortcut:
        check.get(shortcut, "calibration_disjoint", f"{where}.baselines.shortcut", bool,
                  optional=True)
    references = check.get(entry, "references", where, dict, optional=True)
    if references is not None:
        check.get(references, "unmitigated", f"{where}.references", str)
        check.strings(references, "reads_zero", f"{where}.references")
    controls = check.get(entry["counts"], "controls", f"{where}.counts", dict, optional=True)
    check.members(folder, controls or {}, f"{where}.counts.controls")
    allocation = check.get(entry, "allocation", where, dict, optional=True)
    if allocation is not None:
        check.member(folder, check.get(allocation, "plan", f"{where}.allocation", str),
                     f"{where}.allocation.plan")
        drawn = check.get(allocation, "drawn", f"{where}.allocation", dict)
        for label, value in drawn.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise check.fail(f"{where}.allocation.drawn.{label}",
                                 "expected a number of samples >= 0")
    seconds = check.get(entry, "seconds", where, dict, optional=True) or {}
    timed = {f"seconds.{label}": value for label, value in seconds.items()}
    if entry.get("wall_seconds") is not None:
        timed["wall_seconds"] = entry["wall_seconds"]
    for key, value in timed.items():
        if not isinstance(value, _NUMBER) or isinstance(value, bool) or value < 0:
            raise check.fail(f"{where}.{key}", "expected a number of seconds >= 0")


def _ranks(path: Path) -> dict[str, list[int]]:
    """A ranks file ``{"questions": [ids], "ranks": {id: [rank >= 1, ...]}}``, checked."""
    check = _Checker(path)
    data = read_json_object(path, "ranks file")
    check.strings(data, "questions", "")
    ranks = check.get(data, "ranks", "", dict)
    for q, values in ranks.items():
        if not isinstance(values, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in values):
            raise check.fail(f"ranks.{q}", "expected a list of ranks (integers >= 1)")
    return ranks


def read_study_folder(folder: str | os.PathLike) -> StudyFolder:
    """``folder``'s ``study.json`` and ranks, every key and named file checked.

    Raises :class:`~zerogap.errors.DataError` (one line naming the file and the key) for a
    folder that is not a study folder or is damaged: a missing or mistyped key, a counts or
    ranks file that is missing, a folder, or not valid, a run directory that is a file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: {'is a file' if folder.exists() else 'does not exist'}; "
                        "give a zerogap evaluate folder")
    path = folder / STUDY_FILE
    study = read_json_object(path, f"file (is {folder} a zerogap evaluate folder?)")
    if study.get("format") != STUDY_FORMAT:
        raise DataError(f"{path}: not a zerogap study file (format {STUDY_FORMAT!r} expected)")
    check = _Checker(path)
    check.get(study, "title", "", str, optional=True)
    config = check.get(study, "config", "", dict)
    for key in ("m", "max_new_tokens", "seed"):
        check.get(config, key, "config", int)
    check.get(config, "temperature", "config", _NUMBER)
    check.get(study, "scoring", "", dict, optional=True)
    study_scoring(study, path)
    check.strings(study, "commands", "", optional=True)
    check.get(study, "dtype", "", str, optional=True)
    check.get(study, "executor", "", str, optional=True)
    check.get(study, "workers", "", int, optional=True)
    memory = check.get(study, "memory", "", dict, optional=True)
    if memory is not None:  # the budget and peak the study ran with (none in older records)
        for key in ("budget_bytes", "peak_resident_bytes"):
            check.get(memory, key, "memory", int)
        check.get(memory, "source", "memory", str)
    versions = check.get(study, "versions", "", dict, optional=True) or {}
    for key, value in versions.items():
        if not isinstance(value, str):
            raise check.fail(f"versions.{key}", f"expected a string, got {_short(value)}")
    settings = check.get(study, "settings", "", list)
    if not settings:
        raise check.fail("settings", "no setting")
    ranks = {}
    for i, entry in enumerate(settings):
        found = _entry(check, folder, entry, i)
        if entry["name"] in ranks:
            raise check.fail(f"settings[{i}].name", f"{entry['name']!r} appears twice")
        ranks[entry["name"]] = found
    return StudyFolder(folder, study, ranks)


def study_scoring(study: Mapping, path: str | os.PathLike = STUDY_FILE):
    """The scoring settings a ``study.json`` record holds, as a
    :class:`~zerogap.analysis.score.ScoreSettings`; its own refusals become one line naming
    ``path`` and the key."""
    from zerogap.analysis.score import ScoreSettings

    recorded = dict(study.get("scoring") or {})
    # What study folders written before the current scorecard call its settings: the question
    # bootstrap's replicates became the paired tests' swap patterns, and every interval now
    # includes sampling noise, so the two-level switch is gone.
    for old in ("n_boot", "bootstrap"):
        if old in recorded:
            recorded["resamples"] = recorded.pop(old)
    recorded.pop("within_questions", None)
    try:
        return ScoreSettings.from_dict(recorded)
    except (TypeError, ZerogapError) as err:
        raise _Checker(Path(path)).fail("scoring", str(err)) from None
