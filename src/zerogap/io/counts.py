"""Per-question outcome files: the input of ``zerogap score`` and the export of a run.

Three record shapes are accepted; the first record decides which one a file uses.

=========  ==============================  =================================================
shape      fields                          meaning
=========  ==============================  =================================================
counts     ``id, correct, samples[, first,     ``correct`` of ``samples`` were right; ``first``
           truncated]``                     (0/1, optional) grades the first sample (for
                                            G-AP); ``truncated`` (optional) counts the
                                            samples cut at the token limit
outcomes   ``id, outcomes``                 0/1 list, one entry per sample (JSONL only)
long       ``id, sample, correct``          one record per sample, ``correct`` is 0/1
=========  ==============================  =================================================

Files are JSON Lines (``.jsonl``, one object per line) or CSV with a header (``.csv``); other
extensions are sniffed from the first character. A JSON Lines file may open with one
``{"provenance": {...}}`` record (``zerogap runs export`` writes the run's configuration there,
so a counts file that travels keeps what produced it); it is returned, not counted. Every
problem is reported as one :class:`~zerogap.errors.DataError` naming the file, the line and
what is wrong.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zerogap.errors import DataError
from zerogap.io.files import atomic_write, read_text
from zerogap.io.jsonlines import parse_jsonl

# Counts go into int64 arrays and binomial draws: a count above this is a broken file, not a run.
MAX_COUNT = 2**31 - 1

_SHAPES = {
    "counts": ({"id", "correct", "samples"}, {"first", "truncated"}),
    "outcomes": ({"id", "outcomes"}, set()),
    "long": ({"id", "sample", "correct"}, set()),
}


@dataclass(frozen=True)
class QuestionCounts:
    """Per-question counts read from one file, in file order.

    ``first`` holds the first sample's 0/1 grade per question when the file records it
    (outcomes and long shapes always do), else None; ``provenance`` the file's provenance
    header, else None; ``truncated`` the samples per question cut at the token limit when the
    source records it (a run; a counts file ``zerogap runs export`` wrote), else None.
    """

    path: str
    ids: tuple[str, ...]
    correct: np.ndarray
    samples: np.ndarray
    first: np.ndarray | None
    provenance: dict | None = None
    truncated: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def aligned_to(self, reference: QuestionCounts) -> QuestionCounts:
        """The same counts reordered to ``reference``'s question order.

        Raises :class:`DataError` saying how many and which ids differ when the question sets
        differ.
        """
        position = {qid: i for i, qid in enumerate(self.ids)}
        missing = [qid for qid in reference.ids if qid not in position]
        extra = sorted(set(self.ids) - set(reference.ids))
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"{len(missing)} missing ({_preview(missing)})")
            if extra:
                parts.append(f"{len(extra)} not in {reference.path} ({_preview(extra)})")
            raise DataError(
                f"{self.path}: question set differs from {reference.path}: {'; '.join(parts)}"
            )
        order = np.array([position[qid] for qid in reference.ids], dtype=np.int64)
        return QuestionCounts(
            path=self.path,
            ids=reference.ids,
            correct=self.correct[order],
            samples=self.samples[order],
            first=None if self.first is None else self.first[order],
            provenance=self.provenance,
            truncated=None if self.truncated is None else self.truncated[order],
        )


def _preview(ids: list[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... {len(ids) - limit} more" if len(ids) > limit else "")


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, record)`` from a JSONL or CSV file; blank lines are skipped."""
    text = read_text(path)
    head = text[:64].lstrip()[:1]
    if path.suffix in (".jsonl", ".json", ".ndjson") or (path.suffix != ".csv" and head == "{"):
        yield from parse_jsonl(text, path)
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        if reader.fieldnames is None:
            return
        for record in reader:
            if None in record or any(v is None for v in record.values()):
                raise DataError(
                    f"{path}:{reader.line_num}: expected {len(reader.fieldnames)} columns "
                    f"({', '.join(reader.fieldnames)})"
                )
            if any(v.strip() for v in record.values()):
                yield reader.line_num, record
    except csv.Error as err:  # e.g. a field longer than the csv module's limit
        raise DataError(f"{path}:{reader.line_num + 1}: unreadable CSV ({err})") from None


def _integer(value, field: str, where: str) -> int:
    if isinstance(value, bool):
        raise DataError(f"{where}: {field} must be an integer, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > len(str(MAX_COUNT)) + 1 and text.lstrip("+-").isdigit():
            raise DataError(f"{where}: {field} has {len(text)} digits; at most {MAX_COUNT}")
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise DataError(f"{where}: {field} must be an integer, got {text!r}") from None
    if isinstance(value, float):
        if math.isnan(value) or (not math.isinf(value) and not value.is_integer()):
            raise DataError(f"{where}: {field} must be an integer, got {value!r}")
    elif not isinstance(value, int):
        raise DataError(f"{where}: {field} must be an integer, got {value!r}")
    if value < 0:
        raise DataError(f"{where}: {field} is negative ({value})")
    if value > MAX_COUNT:
        raise DataError(f"{where}: {field} is {value:.3g}; at most {MAX_COUNT}")
    return int(value)


def _binary(value, field: str, where: str) -> int:
    value = _integer(value, field, where)
    if value > 1:
        raise DataError(f"{where}: {field} must be 0 or 1, got {value}")
    return value


def _question_id(record: dict, where: str) -> str:
    qid = record.get("id")
    if qid is None or isinstance(qid, bool | float | list | dict) or str(qid).strip() == "":
        raise DataError(f"{where}: missing or invalid question id")
    return str(qid).strip()


def _shape_of(record: dict, where: str) -> str:
    keys = set(record)
    for shape, (required, optional) in _SHAPES.items():
        if required <= keys:
            unknown = keys - required - optional
            if unknown:
                raise DataError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
            return shape
    known = " | ".join(
        ", ".join(sorted(req)) + "".join(f"[, {o}]" for o in sorted(opt))
        for req, opt in _SHAPES.values()
    )
    raise DataError(
        f"{where}: fields {', '.join(sorted(keys)) or '(none)'} match no known shape ({known})"
    )


def read_counts(path: str | os.PathLike) -> QuestionCounts:
    """Read a per-question outcome file (see the module docstring for the accepted shapes).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "run.jsonl"
    >>> lines = ['{"id": "q1", "correct": 3, "samples": 5}', '{"id": "q2", "outcomes": [1, 0]}']
    >>> _ = f.write_text("\\n".join(lines))
    >>> read_counts(f)
    Traceback (most recent call last):
    ...
    zerogap.errors.DataError: ...run.jsonl:2: record has shape 'outcomes' but the file ...
    """
    path = Path(path)
    shape = None
    ids: list[str] = []
    correct: list[int] = []
    samples: list[int] = []
    first: list[int] = []
    truncated: list[int] = []
    first_line: dict[str, int] = {}  # counts and outcomes shapes: one record per question
    position: dict[str, int] = {}  # long shape: question id -> its index in ids
    seen_samples: dict[str, set[int]] = {}
    provenance = None
    for line_no, record in _records(path):
        where = f"{path}:{line_no}"
        if set(record) == {"provenance"} and not ids and provenance is None:
            if not isinstance(record["provenance"], dict):
                raise DataError(f"{where}: provenance must be a JSON object")
            provenance = record["provenance"]
            continue
        this_shape = _shape_of(record, where)
        if shape is None:
            shape = this_shape
        elif this_shape != shape:
            raise DataError(
                f"{where}: record has shape {this_shape!r} but the file started with {shape!r}"
            )
        qid = _question_id(record, where)
        if shape == "long":
            index = _integer(record["sample"], "sample", where)
            outcome = _binary(record["correct"], "correct", where)
            if qid not in position:
                position[qid] = len(ids)
                seen_samples[qid] = set()
                ids.append(qid)
                correct.append(0)
                samples.append(0)
                first.append(outcome)
            if index in seen_samples[qid]:
                raise DataError(f"{where}: duplicate sample {index} of question {qid!r}")
            i = position[qid]
            if index < min(seen_samples[qid], default=index + 1):
                first[i] = outcome
            seen_samples[qid].add(index)
            correct[i] += outcome
            samples[i] += 1
            continue
        if qid in first_line:
            raise DataError(
                f"{where}: duplicate question id {qid!r} (first on line {first_line[qid]})"
            )
        first_line[qid] = line_no
        if shape == "outcomes":
            outcomes = record["outcomes"]
            if not isinstance(outcomes, list):
                raise DataError(f"{where}: outcomes must be a list of 0/1 values")
            grades = [_binary(v, "outcomes", where) for v in outcomes]
            c, m = sum(grades), len(grades)
            first.append(grades[0] if grades else 0)
        else:
            c = _integer(record["correct"], "correct", where)
            m = _integer(record["samples"], "samples", where)
            if "first" in record:
                first.append(_binary(record["first"], "first", where))
            if "truncated" in record:
                truncated.append(_integer(record["truncated"], "truncated", where))
                if truncated[-1] > m:
                    raise DataError(f"{where}: truncated ({truncated[-1]}) exceeds samples ({m})")
        if m == 0:
            raise DataError(f"{where}: question {qid!r} has zero samples")
        if c > m:
            raise DataError(f"{where}: correct ({c}) exceeds samples ({m})")
        ids.append(qid)
        correct.append(c)
        samples.append(m)
    if not ids:
        raise DataError(f"{path}: empty file: no questions")
    for name, given in (("first", first), ("truncated", truncated)):
        if len(given) not in (0, len(ids)):
            raise DataError(f"{path}: '{name}' is given for some questions but not all")
    return QuestionCounts(
        path=str(path),
        ids=tuple(ids),
        correct=np.asarray(correct, dtype=np.int64),
        samples=np.asarray(samples, dtype=np.int64),
        first=np.asarray(first, dtype=np.int64) if first else None,
        provenance=provenance,
        truncated=np.asarray(truncated, dtype=np.int64) if truncated else None,
    )


def write_counts(path: str | os.PathLike, ids, correct, samples, first=None, *,
                 provenance: dict | None = None, truncated=None) -> None:
    """Write per-question counts as JSON Lines (the ``counts`` shape), atomically.

    ``provenance`` (JSON-serialisable) becomes the file's first record, ``{"provenance": ...}``;
    ``first`` and ``truncated``, when given, are fields of every record.

    Written through :func:`zerogap.io.files.atomic_write`: all or nothing.
    """
    firsts = first if first is not None else [None] * len(ids)
    cut = truncated if truncated is not None else [None] * len(ids)
    rows = zip(ids, correct, samples, firsts, cut, strict=True)
    with atomic_write(path) as f:
        if provenance is not None:
            f.write(json.dumps({"provenance": provenance}, sort_keys=True) + "\n")
        for qid, c, m, d, t in rows:
            record = {"id": str(qid), "correct": int(c), "samples": int(m)}
            if d is not None:
                record["first"] = int(d)
            if t is not None:
                record["truncated"] = int(t)
            f.write(json.dumps(record) + "\n")
