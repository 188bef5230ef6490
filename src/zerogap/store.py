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
    A question holds samples ``0 .. m-1`` (while a raised m is being filled in, ``0 .. k-1``
    with k from ``m_raised_from`` to m); a run whose configuration says ``m = "per question"``
    (:data:`PER_QUESTION`, an allocated study's) holds ``0 .. m_q - 1``, m_q its own.
``greedy``
    One row per question: ``question_id, token_ids`` (JSON list), ``text, finish, extracted,
    correct, entropies`` (JSON list or NULL).

All samples of a question are written in one transaction, so a question is either complete or
absent: a killed run resumes by skipping the questions already stored. Samples added to a stored
question (a per-question run's larger m_q) are written in one transaction too.

A store opened for writing holds an exclusive lock on ``run.lock`` (which records the holder's
pid) until it is closed; the operating system releases it when the process dies, so a killed
run never blocks its resume, while a second live writer is refused before it writes anything.
Readers (``create=False``) take no lock and never write: WAL lets them read while a writer
works, and a cleanly closed store on read-only media opens as SQLite's ``immutable`` database.

Faults. The schema is created in one transaction, and a database without any table (what a
disk that fills during the very first write leaves) is recognised as empty and rebuilt by the
next writer, so a run resumes after space is freed whatever write failed. A write the machine
refuses (disk full, file-size limit, I/O error) is one :class:`~zerogap.errors.ResourceError`
line saying what to free; the questions already stored are kept. Every open first checks the
file read-only (:func:`inspect_store`: SQLite's ``quick_check``, the schema, value ranges, each
question's sample count against ``m``) and refuses a damaged store in one line that says what is
wrong and that the file was not changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from zerogap.errors import ResourceError, StoreError, UserError
from zerogap.io.files import atomic_write, space_hint, write_fault

DB_NAME = "run.sqlite"
LOCK_NAME = "run.lock"
FORMAT = "zerogap-run-store"
VERSION = 1
# A uniform run whose m was raised records the m it held before until every question is
# extended (RunStore.check_config): its questions then hold between that many and m samples.
M_RAISED_FROM = "m_raised_from"
UNCOMPARED_FIELDS = frozenset({"versions", M_RAISED_FROM})
# The configuration's m of a run whose questions each have their own (an allocated study).
PER_QUESTION = "per question"
# Format history: stores written before runs recorded their ``readout`` kind name only their
# strategy; these two were the strategies then whose readout was not plain. Frozen: every
# store written since records its kind (zerogap.readout.readout_of reads either).
LEGACY_READOUTS = {"ted": "ted-kept", "all-zero": "zero"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS config (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
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
CREATE TABLE IF NOT EXISTS greedy (
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


# SQLite primary result codes (the low byte of ``sqlite_errorcode``).
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN = 8, 10, 11, 13, 14
_SQLITE_NOTADB = 26


@functools.cache
def _expected_columns() -> dict[str, list[tuple[str, str]]]:
    """``{table: [(column, declared type), ...]}`` of the schema this version writes."""
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(_SCHEMA)
        return {t: [(c[1], c[2]) for c in con.execute(f"PRAGMA table_info({t})")]
                for t in ("meta", "config", "samples", "greedy")}
    finally:
        con.close()


def _readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write and creates no file beside ``path``.

    With no write-ahead log beside it (the last writer closed cleanly) the database file alone
    holds the run, so it opens ``immutable``: no lock, no ``-shm`` file, so it works on
    read-only media. Otherwise (a writer is at work, or was killed) ``mode=ro`` reads through the
    log, which needs its ``-shm`` file.
    """
    wal = path.with_name(path.name + "-wal")
    clean = not wal.exists() or wal.stat().st_size == 0
    uri = path.absolute().as_uri() + ("?immutable=1" if clean else "?mode=ro")
    return sqlite3.connect(uri, uri=True, isolation_level=None)


def _damage(con: sqlite3.Connection) -> str | None:
    """What is wrong with the zerogap store behind ``con``, or None when it is whole.

    Linear in the file's size (``PRAGMA quick_check`` reads every page; the other checks scan
    the samples once in primary-key order).
    """
    problem = con.execute("PRAGMA quick_check(1)").fetchone()[0]
    if problem != "ok":  # SQLite's report spans lines: keep the message on one
        return f"SQLite finds it corrupt ({' '.join(problem.split())})"
    for table, columns in _expected_columns().items():
        found = [(c[1], c[2]) for c in con.execute(f"PRAGMA table_info({table})")]
        if not found:
            return f"table {table} is missing"
        if found != columns:
            return f"table {table} has columns {', '.join(c for c, _ in found)}, not " + \
                   ", ".join(c for c, _ in columns)
    bad = con.execute("SELECT key FROM config WHERE NOT json_valid(value) LIMIT 1").fetchone()
    if bad:
        return f"config field {bad[0]} is not JSON"
    checks = {
        "samples": "correct NOT IN (0, 1) OR typeof(sample) != 'integer' OR sample < 0 "
                   "OR typeof(n_tokens) != 'integer' OR n_tokens < 0 OR NOT json_valid(stats)",
        "greedy": "correct NOT IN (0, 1) OR NOT json_valid(token_ids) "
                  "OR (entropies IS NOT NULL AND NOT json_valid(entropies))",
    }
    for table, condition in checks.items():
        row = con.execute(f"SELECT question_id FROM {table} WHERE {condition} LIMIT 1").fetchone()
        if row:
            return f"a {table} row of question {row[0]!r} holds an impossible value " \
                   "(correct must be 0 or 1, counts and indices whole and >= 0, JSON valid)"
    stored_m = con.execute("SELECT value FROM config WHERE key = 'm'").fetchone()
    if stored_m is not None and json.loads(stored_m[0]) == PER_QUESTION:
        row = con.execute("SELECT question_id, COUNT(*), MIN(sample), MAX(sample) FROM samples "
                          "GROUP BY question_id HAVING MIN(sample) != 0 "
                          "OR MAX(sample) != COUNT(*) - 1 LIMIT 1").fetchone()
        return None if row is None else (f"question {row[0]!r} has {row[1]} samples with "
                                         f"indices {row[2]}..{row[3]}, not 0..{row[1] - 1}")
    if stored_m is not None:
        m, source = json.loads(stored_m[0]), "the configuration says"
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            return f"the configuration's m is {stored_m[0]}, not a whole number >= 1"
    else:  # samples written without a run configuration: every question as many as the first
        first = con.execute("SELECT COUNT(*) FROM samples WHERE question_id = "
                            "(SELECT question_id FROM samples ORDER BY rowid LIMIT 1)").fetchone()
        m, source = first[0], "the first question has"
        if m == 0:
            return None
    raised = con.execute("SELECT value FROM config WHERE key = ?", (M_RAISED_FROM,)).fetchone()
    least = m if raised is None else json.loads(raised[0])
    if isinstance(least, bool) or not isinstance(least, int) or not 1 <= least <= m:
        return f"the configuration's {M_RAISED_FROM} is {raised[0]}, not a whole number " \
               f"from 1 to m = {m}"
    row = con.execute(
        "SELECT question_id, COUNT(*), MIN(sample), MAX(sample) FROM samples "
        "GROUP BY question_id HAVING COUNT(*) < ?1 OR COUNT(*) > ?2 OR MIN(sample) != 0 "
        "OR MAX(sample) != COUNT(*) - 1 LIMIT 1", (least, m),
    ).fetchone()
    if row:
        held = f"m = {m}" if least == m else f"m = {m} (raised from {least})"
        return f"question {row[0]!r} has {row[1]} samples (indices {row[2]}..{row[3]}), " \
               f"but {source} {held}"
    return None


def _raises_m(stored: Any, new: Any) -> bool:
    """Whether a uniform ``new`` m is larger than a uniform ``stored`` one."""
    def uniform(m: Any) -> bool:
        return isinstance(m, int) and not isinstance(m, bool)

    return uniform(stored) and uniform(new) and new > stored


def inspect_store(path: str | Path) -> bool:
    """Check, read-only, that ``path`` is a whole zerogap store; False if it is an empty
    database (no table at all: a first write that failed), which a writer rebuilds.

    Raises
    ------
    StoreError
        For a file that is not a zerogap store, has another version, or is damaged, in one line
        that says what is wrong and that the file was not changed.
    """
    path = Path(path)
    unchanged = "the file was not changed"
    try:
        con = _readonly(path)
        try:
            query = "SELECT name FROM sqlite_master WHERE type='table'"
            tables = {r[0] for r in con.execute(query)}
            if not tables:
                return False
            marker = dict(con.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
            if marker.get("format") != FORMAT:
                raise StoreError(f"{path} is an SQLite database but not a zerogap run store")
            if str(marker.get("version")) != str(VERSION):
                raise StoreError(f"{path} has run-store version {marker.get('version')}, this "
                                 f"zerogap reads {VERSION}")
            problem = _damage(con)
        finally:
            con.close()
    except sqlite3.DatabaseError as err:
        code = getattr(err, "sqlite_errorcode", 0) & 0xFF
        if code == _SQLITE_NOTADB:
            raise StoreError(f"{path} is not a zerogap run store ({err})") from None
        if code in (_SQLITE_CANTOPEN, _SQLITE_READONLY):
            raise StoreError(
                f"{path} was not closed cleanly (its write-ahead log remains) and its folder is "
                "read-only: copy the run directory to writable storage to read it"
            ) from None
        raise StoreError(f"{path} is damaged ({err}); {unchanged}") from None
    if problem is not None:
        raise StoreError(f"{path} is damaged: {problem}; {unchanged}")
    return True


def writer_lock(run_dir: Path, *, record: bool = True, name: str = LOCK_NAME,
                what: str = "run directory") -> IO[str]:
    """Take ``run_dir``'s exclusive writer lock (the file ``name`` in it) and return its open
    file (close it to release).

    ``record`` writes this process's pid into the lock file for a refused writer to name; a
    probe (``record=False``) leaves the file as it is. Raises :class:`StoreError` naming the
    holder's pid when another process holds the lock (``what``: what the folder is, for it).
    """
    try:
        handle = open(run_dir / name, "a+", encoding="utf-8")  # noqa: SIM115 (held open)
    except OSError as err:
        raise write_fault(run_dir / name, err, "nothing was written") or err from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StoreError(
            f"{what} {run_dir} is being written by another zerogap process (pid {holder});"
            " wait for it to finish or stop it"
        ) from None
    if record:
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
        except OSError as err:
            with contextlib.suppress(OSError):  # closing retries the failed flush
                handle.close()
            raise write_fault(run_dir / name, err, "nothing was written") \
                or err from None
    return handle


def check_store_dir(run_dir: str | Path) -> None:
    """Read-only check that ``run_dir`` can become or resume a run store, before anything loads.

    Refuses (:class:`StoreError`) a path that is a file, a ``run.sqlite`` that is not a whole
    zerogap store (an empty one is accepted: the writer rebuilds it), and a directory whose
    writer lock another process holds. Writes nothing (the lock is probed only where its file
    already exists).
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise StoreError(f"run directory {run_dir} is a file")
    if (run_dir / DB_NAME).exists():
        inspect_store(run_dir / DB_NAME)
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
        self._lock: IO[str] | None = None
        whole = self.path.exists() and inspect_store(self.path)
        if not create:
            if not whole:
                raise StoreError(f"no run store at {self.path}" if not self.path.exists() else
                                 f"{self.path} holds no run yet (an empty database, as a failed "
                                 "first write leaves); the command that writes the run rebuilds it")
            with self._guard():
                self._con = _readonly(self.path)
            return
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise StoreError(f"run directory {self.run_dir} is a file")
        with self._guard():
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise write_fault(self.run_dir, err, "nothing was written") or err from None
            self._lock = writer_lock(self.run_dir)
            try:
                self._con = sqlite3.connect(self.path, isolation_level=None)
                self._con.execute("PRAGMA journal_mode=WAL")
                self._con.execute("PRAGMA synchronous=NORMAL")
                if not whole:
                    # One script, one transaction: a store is created whole or not at all. It is
                    # idempotent, so an empty database left by a failed first write is rebuilt.
                    self._con.executescript(
                        f"BEGIN IMMEDIATE;{_SCHEMA}INSERT OR IGNORE INTO meta VALUES "
                        f"('format', '{FORMAT}'), ('version', '{VERSION}');COMMIT;"
                    )
            except BaseException:
                self.close()
                raise

    # -- plumbing -------------------------------------------------------------------------------

    def _transaction(self):
        return _Transaction(self._con)

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Turn the machine refusing a write, and damage found while reading, into one line."""
        try:
            yield
        except sqlite3.OperationalError as err:
            code = getattr(err, "sqlite_errorcode", 0) & 0xFF
            if code in (_SQLITE_FULL, _SQLITE_IOERR):
                raise ResourceError(
                    f"cannot write {self.path} ({err}); the questions stored before are kept: "
                    f"{space_hint(self.run_dir)}, then run the same command again to resume"
                ) from None
            if code == _SQLITE_READONLY:
                raise ResourceError(f"cannot write {self.path} ({err}): its folder or file is "
                                    "read-only; run the command on writable storage") from None
            if "no such table" in str(err) or "no such column" in str(err):
                raise StoreError(f"{self.path} is damaged ({err})") from None
            raise
        except sqlite3.DatabaseError as err:
            if getattr(err, "sqlite_errorcode", 0) & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
                raise StoreError(f"{self.path} is damaged ({err})") from None
            raise

    def _insert(self, table: str, rows: list[tuple]) -> None:
        """Insert ``rows`` into ``table`` in one transaction (all or none)."""
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            with self._guard(), self._transaction():
                self._con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)

    def close(self) -> None:
        if hasattr(self, "_con"):
            with contextlib.suppress(sqlite3.Error):  # a failed checkpoint keeps the WAL: fine
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
        with self._guard():
            rows = self._con.execute("SELECT key, value FROM config").fetchall()
        return {k: json.loads(v) for k, v in rows}

    def refuse_other(self, fields: dict[str, Any]) -> None:
        """Refuse, writing nothing, when a stored field differs from ``fields``; a reader store
        runs it before any model loads (:func:`zerogap.runs.check_resume`).

        A larger uniform ``m`` is no difference: a run's m may be raised, adding to each
        question only the sample indices it lacks (:meth:`check_config`); a smaller one is.

        Raises
        ------
        StoreError
            Naming every differing field with its stored and its new value.
        """
        fields = json.loads(json.dumps(fields))  # normalise tuples, numbers, key order
        stored = self.config()
        differ = [
            f"{k} (stored {json.dumps(stored[k])}, now {json.dumps(v)})"
            for k, v in fields.items()
            if k in stored and k not in UNCOMPARED_FIELDS and stored[k] != v
            and not (k == "m" and _raises_m(stored[k], v))
        ]
        if differ:
            lowered = "m" in fields and "m" in stored and _raises_m(fields["m"], stored["m"])
            raise StoreError(
                f"run directory {self.run_dir} holds a different run; differing fields: "
                + "; ".join(differ)
                + ("; a run's m can be raised, not lowered" if lowered else "")
            )

    def check_config(self, fields: dict[str, Any]) -> None:
        """Adopt ``fields`` as this run's configuration, or refuse if a stored field differs
        (:meth:`refuse_other`; nothing is written then).

        A larger uniform ``m`` replaces the stored one, and ``m_raised_from`` keeps the smallest
        m stored before, so that the store stays whole while its questions are extended one by
        one (each then holds between the two); :meth:`settle_m` drops it once every question
        holds m.
        """
        self.refuse_other(fields)
        fields = json.loads(json.dumps(fields))
        stored = self.config()
        new = [(k, json.dumps(v)) for k, v in fields.items() if k not in stored]
        if "m" in fields and "m" in stored and _raises_m(stored["m"], fields["m"]):
            new.append(("m", json.dumps(fields["m"])))
            if M_RAISED_FROM not in stored:
                new.append((M_RAISED_FROM, json.dumps(stored["m"])))
        if new:
            with self._guard(), self._transaction():
                self._con.executemany("INSERT OR REPLACE INTO config VALUES (?, ?)", new)

    def settle_m(self) -> None:
        """Drop ``m_raised_from`` once every stored question holds the configuration's m."""
        config = self.config()
        if M_RAISED_FROM in config and set(self.sample_counts().values()) <= {config["m"]}:
            with self._guard(), self._transaction():
                self._con.execute("DELETE FROM config WHERE key = ?", (M_RAISED_FROM,))

    # -- samples --------------------------------------------------------------------------------

    def completed_questions(self) -> set[str]:
        """Ids of the questions whose samples are stored (all of them, by construction)."""
        with self._guard():
            return {r[0] for r in self._con.execute("SELECT DISTINCT question_id FROM samples")}

    def sample_counts(self) -> dict[str, int]:
        """Samples stored per question id (a question's are indices ``0 .. count - 1``)."""
        with self._guard():
            return dict(self._con.execute(
                "SELECT question_id, COUNT(*) FROM samples GROUP BY question_id"))

    def question_samples(self, question_id: str) -> list[SampleRow]:
        """The stored samples of one question, in index order."""
        with self._guard():
            rows = self._con.execute(
                "SELECT question_id, sample, text, n_tokens, finish, extracted, correct, stats "
                "FROM samples WHERE question_id = ? ORDER BY sample", (question_id,)).fetchall()
        return [SampleRow(q, i, text, n, finish, extracted, bool(correct), json.loads(stats))
                for q, i, text, n, finish, extracted, correct, stats in rows]

    def add_samples(self, rows: Iterable[SampleRow]) -> None:
        """Write a batch of samples (whole questions, or the samples added to stored ones) in
        one transaction."""
        self._insert("samples", [
            (r.question_id, r.sample, r.text, r.n_tokens, r.finish, r.extracted, int(r.correct),
             json.dumps(r.stats, sort_keys=True))
            for r in rows
        ])

    def truncation(self, table: str = "samples") -> tuple[int, int]:
        """``(cut, total)``: how many of the stored responses (``"samples"`` or ``"greedy"``
        decodes) hit the token limit (finish ``"length"``), and how many are stored."""
        if table not in ("samples", "greedy"):
            raise ValueError(f"table must be samples or greedy, got {table!r}")
        with self._guard():
            cut, total = self._con.execute(
                f"SELECT COALESCE(SUM(finish = 'length'), 0), COUNT(*) FROM {table}").fetchone()
        return int(cut), int(total)

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
        with self._guard():
            for q, i, text, n, finish, extracted, correct, stats in self._con.execute(query):
                yield SampleRow(q, i, text, n, finish, extracted, bool(correct), json.loads(stats))

    # -- greedy ---------------------------------------------------------------------------------

    def completed_greedy(self) -> set[str]:
        with self._guard():
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
        with self._guard():
            rows = self._con.execute("SELECT * FROM greedy ORDER BY rowid").fetchall()
        for q, ids, text, finish, extracted, correct, ent in rows:
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
            raise UserError("Parquet export needs pyarrow: pip install -e '.[parquet]' from a "
                            "checkout") from None
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
        if exc_type is None:
            self._con.execute("COMMIT")
            return
        # After a full disk or an I/O error SQLite may have rolled back already; the original
        # error is the one to report.
        with contextlib.suppress(sqlite3.Error):
            self._con.execute("ROLLBACK")
