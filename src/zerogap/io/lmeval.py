"""Per-question counts from lm-evaluation-harness sample logs (a pure reader; no torch).

The harness, run with ``--log_samples`` and a task whose ``repeats`` is K > 1, writes
``samples_<task>_<date>.jsonl``: one line per document *and filter* (a GSM8K run with the
``strict-match`` and ``flexible-extract`` filters writes two lines per document), each holding
``doc_id``, ``doc``, ``target``, ``resps`` (the K raw responses, as ``[[r_1, ..., r_K]]``),
``filtered_resps``, ``filter``, ``doc_hash``, ``prompt_hash`` and ``target_hash``.

:func:`read_lmeval` groups the lines by ``doc_id``, takes all K raw responses (not
``filtered_resps``, which keeps one value per request), grades them against the document's
target with the grader it is given (:func:`zerogap.tasks.extract.target_grader`: ``anchor``, or
the harness's own ``lmeval-*`` modes to reproduce its numbers; this reader knows no grading, so
``io/`` stays below the tasks), and returns per-question counts in
the shape ``zerogap score`` reads: the solve probability of a document is correct / K (arXiv
2608.07341, §3.1). :func:`check_same_documents` compares two logs' documents by their hashes.
:func:`find_samples` picks the one log of an ``--output_path`` folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zerogap.errors import DataError
from zerogap.io.counts import QuestionCounts
from zerogap.io.jsonlines import read_jsonl

# A document's K responses and its raw target -> each response's grade; ValueError for a target
# it cannot read.
Grader = Callable[[Sequence[str], str], list[bool]]

# The fields every harness sample record carries; a file whose first record has them all is
# read as a harness log wherever a per-question file is accepted.
SIGNATURE = frozenset({"doc_id", "resps", "target", "doc_hash"})


def is_lmeval_record(record: dict) -> bool:
    """Whether ``record`` is a line of an lm-evaluation-harness ``--log_samples`` file."""
    return record.keys() >= SIGNATURE


def is_lmeval_log(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a JSON Lines file whose first record is a harness sample record.

    Anything unreadable answers False; the reader then chosen reports the problem.
    """
    try:
        first = next(read_jsonl(path), None)
    except DataError:
        return False
    return first is not None and is_lmeval_record(first[1])


def find_samples(folder: str | os.PathLike) -> Path | None:
    """The one ``samples_<task>_<date>.jsonl`` of a harness ``--output_path`` folder, or None.

    The harness writes its logs to ``<output_path>/<model name>/``; both that folder and the
    one above it are searched. None when there is no log; a :class:`DataError` naming the logs
    when there are several (several tasks, models or dates), since which one is meant cannot be
    guessed.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> (out / "embedded").mkdir()
    >>> _ = (out / "embedded" / "samples_gsm8k_2026-12-01T10-44-20.jsonl").write_text("")
    >>> find_samples(out).name
    'samples_gsm8k_2026-12-01T10-44-20.jsonl'
    >>> _ = (out / "embedded" / "samples_arith_2026-12-01T11-02-09.jsonl").write_text("")
    >>> find_samples(out)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zerogap.errors.DataError: ...: 2 lm-evaluation-harness sample logs (...): name one of them
    """
    root = Path(folder)
    found = sorted([*root.glob("samples_*.jsonl"), *root.glob("*/samples_*.jsonl")])
    if len(found) > 1:
        shown = ", ".join(str(p.relative_to(root)) for p in found[:4])
        more = f" and {len(found) - 4} more" if len(found) > 4 else ""
        raise DataError(f"{root}: {len(found)} lm-evaluation-harness sample logs ({shown}{more}): "
                        "name one of them")
    return found[0] if found else None


@dataclass(frozen=True)
class LmevalLog:
    """What one harness log says per document, in first-seen order.

    ``counts.ids`` are the documents' ``doc_id`` as strings; ``doc_hash`` maps each id to its
    ``doc_hash``; ``repeats`` is K, the responses per document.
    """

    counts: QuestionCounts
    doc_hash: dict[str, str]
    repeats: int


def _responses(record: dict, where: str) -> list[str]:
    resps = record["resps"]
    if isinstance(resps, list) and len(resps) == 1 and isinstance(resps[0], list):
        resps = resps[0]  # generation requests log one list of K responses per request
    if not isinstance(resps, list) or not all(isinstance(r, str) for r in resps):
        raise DataError(f"{where}: 'resps' must hold a list of response strings")
    if not resps:
        raise DataError(f"{where}: 'resps' holds no response")
    return resps


def read_lmeval(path: str | os.PathLike, *, grade: Grader) -> LmevalLog:
    """Read a harness ``samples_*.jsonl`` log into per-document counts.

    Parameters
    ----------
    path : path-like
        A file written by ``lm-eval ... --log_samples`` with ``repeats`` > 1.
    grade : Grader, keyword-only
        Grades a document's raw responses against its target
        (:func:`zerogap.tasks.extract.target_grader` gives zerogap's extractors).

    Returns
    -------
    LmevalLog
        ``counts.correct[i]`` of ``counts.samples[i]`` (= K) responses to document ``i`` were
        right; ``counts.first`` grades each document's first response (the 0/1 readout of G-AP).

    Raises
    ------
    DataError
        One line naming the file and the line: a record that is not a harness record, a missing
        field, a document whose lines disagree (responses or hash), documents with different K,
        or K = 1 (one response per document has no solve probability).

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "samples_gsm8k.jsonl"
    >>> rec = {"doc_id": 0, "target": "#### 4", "doc_hash": "h0", "filter": "strict-match",
    ...        "resps": [["The answer is 4.", "The answer is 5.", "4"]]}
    >>> _ = f.write_text(json.dumps(rec) + "\\n" + json.dumps({**rec, "filter": "flexible"}))
    >>> last_word = lambda responses, target: [r.split()[-1].strip(".") == target.split()[-1]
    ...                                        for r in responses]
    >>> log = read_lmeval(f, grade=last_word)
    >>> log.counts.ids, log.counts.correct.tolist(), log.counts.samples.tolist(), log.repeats
    (('0',), [2], [3], 3)
    """
    seen: dict[str, tuple[int, list[str], str]] = {}  # doc id -> (line, responses, doc_hash)
    ids: list[str] = []
    correct: list[int] = []
    first: list[int] = []
    repeats = None
    for line_no, record in read_jsonl(path):
        where = f"{path}:{line_no}"
        if not is_lmeval_record(record):
            missing = ", ".join(sorted(SIGNATURE - record.keys()))
            raise DataError(f"{where}: not an lm-evaluation-harness sample record "
                             f"(missing {missing})")
        doc_id = str(record["doc_id"])
        responses = _responses(record, where)
        doc_hash = str(record["doc_hash"])
        if doc_id in seen:  # the same document under another filter
            line, earlier, earlier_hash = seen[doc_id]
            if responses != earlier or doc_hash != earlier_hash:
                raise DataError(f"{where}: doc_id {doc_id} differs from its line {line} "
                                 f"({'doc_hash' if doc_hash != earlier_hash else 'resps'})")
            continue
        if repeats is None:
            repeats = len(responses)
            if repeats == 1:
                raise DataError(
                    f"{where}: one response per document (repeats = 1): a solve probability "
                    "needs several; rerun the harness with repeats > 1 and --log_samples"
                )
        elif len(responses) != repeats:
            raise DataError(f"{where}: doc_id {doc_id} has {len(responses)} responses, "
                             f"earlier documents {repeats}")
        try:
            grades = grade(responses, str(record["target"]))
        except ValueError as err:
            raise DataError(f"{where}: target of doc_id {doc_id}: {err}") from None
        seen[doc_id] = (line_no, responses, doc_hash)
        ids.append(doc_id)
        correct.append(sum(grades))
        first.append(int(grades[0]))
    if repeats is None:
        raise DataError(f"{path}: empty file: no documents")
    counts = QuestionCounts(
        path=str(path), ids=tuple(ids), correct=np.asarray(correct, dtype=np.int64),
        samples=np.full(len(ids), repeats, dtype=np.int64),
        first=np.asarray(first, dtype=np.int64),
    )
    return LmevalLog(counts, {i: seen[i][2] for i in ids}, repeats)


def check_same_documents(reference: LmevalLog, other: LmevalLog) -> None:
    """Raise :class:`~zerogap.errors.DataError` unless both logs hold the same documents with
    the same hashes.

    Documents are matched by ``doc_id``; a hash that differs means the two runs saw different
    text under the same id (another dataset revision or prompt), so their gaps would be
    meaningless.
    """
    ref, oth = reference.counts.path, other.counts.path
    only_ref = sorted(set(reference.doc_hash) - set(other.doc_hash))
    only_oth = sorted(set(other.doc_hash) - set(reference.doc_hash))
    if only_ref or only_oth:
        raise DataError(f"{oth}: documents differ from {ref}: {len(only_ref)} only in the "
                         f"first, {len(only_oth)} only in the second "
                         f"(e.g. {(only_ref or only_oth)[0]})")
    differ = [d for d, h in reference.doc_hash.items() if other.doc_hash[d] != h]
    if differ:
        raise DataError(f"{oth}: doc_hash of {len(differ)} documents differs from {ref} "
                         f"(first: doc_id {differ[0]}): the runs did not see the same documents")
