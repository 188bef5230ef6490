"""The run store on real SQLite files: config checks, resume bookkeeping, exports, bad files."""

import hashlib
import json
import sqlite3

import pytest

from zerogap.io.counts import write_counts
from zerogap.readout import run_counts
from zerogap.store import DB_NAME, GreedyRow, RunStore, SampleRow, StoreError, inspect_store


def _rows(qid, correct):
    return [
        SampleRow(qid, i, f"answer {i}", 3 + i, "eos", str(i), bool(c), {"caps": i})
        for i, c in enumerate(correct)
    ]


def test_config_is_adopted_then_compared_naming_fields(tmp_path):
    with RunStore(tmp_path) as store:
        store.check_config({"m": 4, "temperature": 0.7, "versions": {"torch": "1"}})
        store.check_config({"m": 4, "max_new_tokens": 32})  # subset plus a new field: accepted
        assert store.config() == {
            "m": 4, "temperature": 0.7, "versions": {"torch": "1"}, "max_new_tokens": 32
        }
        store.check_config({"versions": {"torch": "2"}})  # versions are recorded, not compared
        expected = (r"fields: m \(stored 4, now 3\); temperature \(stored 0.7, now 0.8\); "
                    r"a run's m can be raised, not lowered$")
        with pytest.raises(StoreError, match=expected):
            store.check_config({"m": 3, "seed": 1, "temperature": 0.8})
        # A refused config writes nothing, not even its new fields.
        assert "seed" not in store.config()


def test_a_raised_m_keeps_the_store_whole_while_questions_are_extended(tmp_path):
    """Raising m records the m stored before; until every question holds the new m, each holds
    between the two (whole, by construction of the per-question transactions), and no fewer."""
    with RunStore(tmp_path) as store:
        store.check_config({"m": 2})
        store.add_samples(_rows("q-a", [1, 0]))
        store.check_config({"m": 4})
        assert store.config() == {"m": 4, "m_raised_from": 2}
        store.add_samples(_rows("q-b", [1, 0, 1, 1]))
        store.settle_m()  # q-a still holds 2 of 4
        assert store.config()["m_raised_from"] == 2
    assert inspect_store(tmp_path / DB_NAME)  # a store halfway through a raise is whole
    with RunStore(tmp_path) as store:
        store.check_config({"m": 6})  # raised again before the first raise finished
        assert store.config() == {"m": 6, "m_raised_from": 2}
        store.add_samples(_rows("q-a", [1, 0, 0, 0, 1, 1])[2:])
        store.add_samples(_rows("q-b", [1, 0, 1, 1, 0, 0])[4:])
        store.settle_m()
        assert store.config() == {"m": 6}
    con = sqlite3.connect(tmp_path / DB_NAME)
    con.execute("DELETE FROM samples WHERE question_id = 'q-a' AND sample >= 3")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match=r"question 'q-a' has 3 samples \(indices 0..2\), but "
                                         r"the configuration says m = 6; the file was not"):
        inspect_store(tmp_path / DB_NAME)


def test_samples_counts_and_exports(tmp_path):
    with RunStore(tmp_path / "run") as store:
        store.add_samples(_rows("q-b", [1, 0, 1]))
        store.add_samples(_rows("q-a", [0, 0, 0]))
        store.add_greedy([GreedyRow("q-a", [5, 6], "x", "stop", None, False, [0.5, 0.25])])
        assert store.completed_questions() == {"q-a", "q-b"}
        assert run_counts(store) == [
            {"id": "q-b", "correct": 2, "samples": 3, "first": 1, "truncated": 0},
            {"id": "q-a", "correct": 0, "samples": 3, "first": 0, "truncated": 0},
        ]
        assert store.greedy()["q-a"].entropies == [0.5, 0.25]
        write_counts(tmp_path / "c.jsonl", *([c[k] for c in run_counts(store)]
                                             for k in ("id", "correct", "samples")))
        assert store.export_jsonl(tmp_path / "s.jsonl") == 6
        assert store.export_parquet(tmp_path / "s.parquet") == 6
    lines = (tmp_path / "c.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0]) == {"id": "q-b", "correct": 2, "samples": 3}
    first = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert first["question_id"] == "q-b" and first["stats"] == {"caps": 0}
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "s.parquet")
    assert table.column("correct").to_pylist() == [True, False, True, False, False, False]


def test_a_per_question_run_holds_samples_0_to_m_q_and_counts_a_prefix(tmp_path):
    """An allocated run (m = "per question") holds each question's own m, grows a question
    by its next indices, counts only the first m_q where asked, and refuses a gap."""
    from zerogap.store import PER_QUESTION

    with RunStore(tmp_path / "run") as store:
        store.check_config({"m": PER_QUESTION})
        store.add_samples(_rows("q-a", [1, 0]))
        store.add_samples(_rows("q-b", [0, 1, 1, 1]))
        store.add_samples([SampleRow("q-a", i, "more", 1, "eos", None, True, {})
                           for i in (2, 3, 4)])
        assert store.sample_counts() == {"q-a": 5, "q-b": 4}
        assert [r.sample for r in store.question_samples("q-a")] == [0, 1, 2, 3, 4]
        assert run_counts(store, {"q-a": 2, "q-b": 3}) == [
            {"id": "q-a", "correct": 1, "samples": 2, "first": 1, "truncated": 0},
            {"id": "q-b", "correct": 2, "samples": 3, "first": 0, "truncated": 0},
        ]
        assert [c["samples"] for c in run_counts(store)] == [5, 4]
    with RunStore(tmp_path / "run", create=False) as store:  # whole: it opens
        assert store.sample_counts()["q-a"] == 5
    con = sqlite3.connect(tmp_path / "run" / DB_NAME)
    con.execute("DELETE FROM samples WHERE question_id = 'q-b' AND sample = 1")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match=r"'q-b' has 3 samples with indices 0..3, not 0..2"):
        RunStore(tmp_path / "run", create=False)


def test_truncation_counts_the_responses_cut_at_the_token_limit(tmp_path):
    with RunStore(tmp_path) as store:
        assert store.truncation() == (0, 0) and store.truncation("greedy") == (0, 0)
        store.add_samples([SampleRow("q", i, "t", 4, finish, None, False, {})
                           for i, finish in enumerate(("length", "eos", "stop", "length"))])
        store.add_greedy([GreedyRow("q", [5], "x", "length", None, False, None),
                          GreedyRow("r", [5], "x", "eos", None, False, None)])
        assert store.truncation("samples") == (2, 4) and store.truncation("greedy") == (1, 2)
        assert run_counts(store)[0]["truncated"] == 2
        with pytest.raises(ValueError, match="samples or greedy"):
            store.truncation("config")


def test_a_failed_batch_leaves_nothing(tmp_path):
    with RunStore(tmp_path) as store:
        store.add_samples(_rows("q", [1, 1]))
        with pytest.raises(sqlite3.IntegrityError):
            # second row duplicates a stored key: the whole batch must roll back
            store.add_samples(_rows("r", [1]) + _rows("q", [1]))
        assert store.completed_questions() == {"q"}
    with RunStore(tmp_path) as store:  # reopening finds the same content, mode WAL
        assert run_counts(store) == [{"id": "q", "correct": 2, "samples": 2, "first": 1,
                                      "truncated": 0}]
        assert store._con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not a database at all" * 100, "is not a zerogap run store"),
        (None, "is an SQLite database but not a zerogap run store"),
    ],
)
def test_foreign_or_corrupt_file_is_refused_untouched(tmp_path, content, message):
    db = tmp_path / DB_NAME
    if content is None:
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE people (name TEXT)")
        con.execute("INSERT INTO people VALUES ('ada')")
        con.commit()
        con.close()
    else:
        db.write_bytes(content)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    listing = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(StoreError, match=message) as err:
        RunStore(tmp_path)
    assert "\n" not in str(err.value)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing
