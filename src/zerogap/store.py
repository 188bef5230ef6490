"""The run store: one SQLite database per run directory.

A run directory holds ``run.sqlite`` (WAL journal). Tables:

``meta``
    ``(key, value)``: the store's format marker and version.
``config``
    ``(key, value JSON)``: what the run is (model fingerprint, task and its config, strategy and
    its config, m, temperature, seed, token limit, package versions). A command opening the
    store compares the fields it sets with the stored ones and refuses to continue if any
    differ; fields it does not set (a greedy run does not set m) are left alone, and fields not
    yet stored are added. ``versions`` is recorded when first stored but never compared, so a
    run can be resumed after a library upgrade.
``samples``
    One row per sample: ``question_id, sample, text, n_tokens, finish, extracted, correct,
    stats`` (JSON object, e.g. intervention counts). Primary key ``(question_id, sample)``.
``greedy``
    One row per question: ``question_id, token_ids`` (JSON list), ``text, finish, extracted,
    correct, entropies`` (JSON list or NULL).

All samples of a question are written in one transaction, so a question is either complete or
absent: a killed run resumes by skipping the questions already stored.

A store opened for writing holds an exclusive lock on ``run.lock`` (which records the holder's
pid) until it is closed; the operating system releases it when the process dies, so a killed
run never blocks its resume, while a second live writer is refused before it writes anything.
Readers (``create=False``) take no lock: WAL lets them read while a writer works.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from zerogap.errors import StoreError, UserError
from zerogap.io.files import atomic_write

DB_NAME = "run.sqlite"
LOCK_NAME = "run.lock"
FORMAT = "zerogap-run-store"
VERSION = 1
UNCOMPARED_FIELDS = frozenset({"versions"})

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE config (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE samples (
    question_id TEXT NOT NULL,
    sample INTEGER NOT NULL,
    text TEXT NOT NULL,
    n_tokens INTEGER NOT NULL,
    finish TEXT NOT NULL,
    extracted TEXT,
    correct INTEGER NOT NULL,
    stats TEXT NOT NULL,
    PRIMARY KEY (question_id, sample)
);
CREATE TABLE greedy (
    question_id TEXT PRIMARY KEY,
    token_ids TEXT NOT NULL,
    text TEXT NOT NULL,
    finish TEXT NOT NULL,
    extracted TEXT,
    correct INTEGER NOT NULL,
    entropies TEXT
);
"""


@dataclass(frozen=True)
class SampleRow:
    """One stored sample (the unit a task grades)."""

    question_id: str
    sample: int
    text: str
    n_tokens: int
    finish: str
    extracted: str | None
    correct: bool
    stats: dict


@dataclass(frozen=True)
class GreedyRow:
    """One stored greedy decode; ``entropies`` is None when they were not requested."""

    question_id: str
    token_ids: list[int]
    text: str
    finish: str
    extracted: str | None
    correct: bool
    entropies: list[float] | None


def _check_existing(path: Path) -> None:
    """Read-only check that ``path`` is a zerogap store; raises StoreError otherwise.

    Opened with ``mode=ro`` so that a foreign or damaged file is never written to.
    """
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            query = "SELECT name FROM sqlite_master WHERE type='table'"
            tables = {r[0] for r in con.execute(query)}
            marker = (
                dict(con.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
            )
        finally:
            con.close()
    except sqlite3.DatabaseError as err:
        raise StoreError(f"{path} is not a zerogap run store ({err})") from None
    if marker.get("format") != FORMAT:
        raise StoreError(f"{path} is an SQLite database but not a zerogap run store")
    if int(marker.get("version", -1)) != VERSION:
        raise StoreError(
            f"{path} has run-store version {marker.get('version')}, this zerogap reads {VERSION}"
        )


def writer_lock(run_dir: Path, *, record: bool = True) -> IO[str]:
    """Take ``run_dir``'s exclusive writer lock and return its open file (close it to release).

    ``record`` writes this process's pid into the lock file for a refused writer to name; a
    probe (``record=False``) leaves the file as it is. Raises :class:`StoreError` naming the
    holder's pid when another process holds the lock.
    """
    handle = open(run_dir / LOCK_NAME, "a+", encoding="utf-8")  # noqa: SIM115 (held open)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StoreError(
            f"run directory {run_dir} is being written by another zerogap process (pid {holder});"
            " wait for it to finish or stop it"
        ) from None
    if record:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
    return handle


def check_store_dir(run_dir: str | Path) -> None:
    """Read-only check that ``run_dir`` can become or resume a run store, before anything loads.

    Refuses (:class:`StoreError`) a path that is a file, a ``run.sqlite`` that is not a zerogap
    store, and a directory whose writer lock another process holds. Writes nothing (the lock is
    probed only where its file already exists).
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise StoreError(f"run directory {run_dir} is a file")
    if (run_dir / DB_NAME).exists():
        RunStore(run_dir, create=False).close()  # a full open and close leaves no WAL files
    if (run_dir / LOCK_NAME).exists():
        writer_lock(run_dir, record=False).close()


class RunStore:
    """A run directory's database. Use :meth:`open`; close with :meth:`close` or ``with``.

    Parameters
    ----------
    run_dir : path
        Directory holding ``run.sqlite``.
    create : bool
        Open for writing: create the directory and an empty store if absent, and take the
        directory's writer lock (:class:`StoreError` naming the holder's pid if another
        process has it). Otherwise open for reading; a missing store is an error.
    """

    def __init__(self, run_dir: str | Path, *, create: bool = True):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / DB_NAME
        if self.path.exists():
            _check_existing(self.path)
            fresh = False
        elif create:
            if self.run_dir.exists() and not self.run_dir.is_dir():
                raise StoreError(f"run directory {self.run_dir} is a file")
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fresh = True
        else:
            raise StoreError(f"no run store at {self.path}")
        self._lock = writer_lock(self.run_dir) if create else None
        self._con = sqlite3.connect(self.path, isolation_level=None)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")
        if fresh:
            # One script, one transaction: a store is created whole or not at all.
            self._con.executescript(
                f"BEGIN IMMEDIATE;{_SCHEMA}"
                f"INSERT INTO meta VALUES ('format', '{FORMAT}'), ('version', '{VERSION}');COMMIT;"
            )

    # -- plumbing -------------------------------------------------------------------------------

    def _transaction(self):
        return _Transaction(self._con)

    def _insert(self, table: str, rows: list[tuple]) -> None:
        """Insert ``rows`` into ``table`` in one transaction (all or none)."""
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            with self._transaction():
                self._con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)

    def close(self) -> None:
        self._con.close()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the lock
            self._lock = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- config ---------------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The stored configuration, field by field."""
        return {k: json.loads(v) for k, v in self._con.execute("SELECT key, value FROM config")}

    def check_config(self, fields: dict[str, Any]) -> None:
        """Adopt ``fields`` as this run's configuration, or refuse if a stored field differs.

        Raises
        ------
        StoreError
            Naming every differing field with its stored and its new value; nothing is written.
        """
        fields = json.loads(json.dumps(fields))  # normalise tuples, numbers, key order
        stored = self.config()
        differ = [
            f"{k} (stored {json.dumps(stored[k])}, now {json.dumps(v)})"
            for k, v in fields.items()
            if k in stored and k not in UNCOMPARED_FIELDS and stored[k] != v
        ]
        if differ:
            raise StoreError(
                f"run directory {self.run_dir} holds a different run; differing fields: "
                + "; ".join(differ)
            )
        new = [(k, json.dumps(v)) for k, v in fields.items() if k not in stored]
        if new:
            with self._transaction():
                self._con.executemany("INSERT INTO config VALUES (?, ?)", new)

    # -- samples --------------------------------------------------------------------------------

    def completed_questions(self) -> set[str]:
        """Ids of the questions whose samples are stored (all of them, by construction)."""
        return {r[0] for r in self._con.execute("SELECT DISTINCT question_id FROM samples")}

    def add_samples(self, rows: Iterable[SampleRow]) -> None:
        """Write a batch of samples (whole questions) in one transaction."""
        self._insert("samples", [
            (r.question_id, r.sample, r.text, r.n_tokens, r.finish, r.extracted, int(r.correct),
             json.dumps(r.stats, sort_keys=True))
            for r in rows
        ])

    def samples(self) -> Iterator[SampleRow]:
        """All samples, questions in the order they were stored, samples in index order."""
        query = """
            SELECT s.question_id, s.sample, s.text, s.n_tokens, s.finish, s.extracted, s.correct,
                   s.stats
            FROM samples s
            JOIN (SELECT question_id, MIN(rowid) AS first FROM samples GROUP BY question_id) o
              ON o.question_id = s.question_id
            ORDER BY o.first, s.sample
        """
        for q, i, text, n, finish, extracted, correct, stats in self._con.execute(query):
            yield SampleRow(q, i, text, n, finish, extracted, bool(correct), json.loads(stats))

    # -- greedy ---------------------------------------------------------------------------------

    def completed_greedy(self) -> set[str]:
        return {r[0] for r in self._con.execute("SELECT question_id FROM greedy")}

    def add_greedy(self, rows: Iterable[GreedyRow]) -> None:
        """Write a batch of greedy decodes in one transaction."""
        self._insert("greedy", [
            (r.question_id, json.dumps(r.token_ids), r.text, r.finish, r.extracted,
             int(r.correct), None if r.entropies is None else json.dumps(r.entropies))
            for r in rows
        ])

    def greedy(self) -> dict[str, GreedyRow]:
        """Greedy decodes by question id, in stored order."""
        out = {}
        for q, ids, text, finish, extracted, correct, ent in self._con.execute(
            "SELECT * FROM greedy ORDER BY rowid"
        ):
            out[q] = GreedyRow(
                q, json.loads(ids), text, finish, extracted, bool(correct),
                None if ent is None else json.loads(ent),
            )
        return out

    # -- export ---------------------------------------------------------------------------------

    def export_jsonl(self, out: str | Path) -> int:
        """Write every sample as one JSON object per line; returns the line count."""
        n = 0

        def lines():
            nonlocal n
            for r in self.samples():
                n += 1
                yield json.dumps(_sample_record(r), ensure_ascii=False)

        with atomic_write(out) as handle:
            for line in lines():
                handle.write(line + "\n")
        return n

    def export_parquet(self, out: str | Path) -> int:
        """Write every sample to a Parquet file (needs pyarrow); returns the row count."""
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError("Parquet export needs pyarrow: pip install zerogap[parquet]") from None
        records = [_sample_record(r) for r in self.samples()]
        for r in records:
            r["stats"] = json.dumps(r["stats"], sort_keys=True)
        schema = pa.schema(
            [
                ("question_id", pa.string()), ("sample", pa.int32()), ("text", pa.string()),
                ("n_tokens", pa.int32()), ("finish", pa.string()), ("extracted", pa.string()),
                ("correct", pa.bool_()), ("stats", pa.string()),
            ]
        )
        table = pa.Table.from_pylist(records, schema=schema)
        with atomic_write(out, binary=True) as handle:
            pq.write_table(table, handle)
        return len(records)


def _sample_record(r: SampleRow) -> dict[str, Any]:
    return {
        "question_id": r.question_id, "sample": r.sample, "text": r.text, "n_tokens": r.n_tokens,
        "finish": r.finish, "extracted": r.extracted, "correct": r.correct, "stats": r.stats,
    }


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception."""

    def __init__(self, con: sqlite3.Connection):
        self._con = con

    def __enter__(self):
        self._con.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *exc):
        self._con.execute("ROLLBACK" if exc_type else "COMMIT")
