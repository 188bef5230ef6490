import json

import numpy as np
import pytest

from zerogap.errors import DataError
from zerogap.io.counts import read_counts, write_counts


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(*records):
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def test_counts_outcomes_and_long_shapes_read_the_same(tmp_path):
    counts = write(
        tmp_path,
        "counts.jsonl",
        jsonl(
            {"id": "a", "correct": 2, "samples": 3, "first": 1},
            {"id": "b", "correct": 0, "samples": 2, "first": 0},
        ),
    )
    outcomes = write(
        tmp_path,
        "outcomes.jsonl",
        jsonl({"id": "a", "outcomes": [1, 0, 1]}, {"id": "b", "outcomes": [0, 0]}),
    )
    long_csv = write(tmp_path, "long.csv", "id,sample,correct\nb,1,0\na,2,1\na,0,1\na,1,0\nb,0,0\n")
    counts_csv = write(tmp_path, "counts.csv", "id,correct,samples,first\na,2,3,1\nb,0,2,0\n")
    for path in (counts, outcomes, counts_csv):
        run = read_counts(path)
        assert run.ids == ("a", "b")
        np.testing.assert_array_equal(run.correct, [2, 0])
        np.testing.assert_array_equal(run.samples, [3, 2])
        np.testing.assert_array_equal(run.first, [1, 0])
    run = read_counts(long_csv)
    assert run.ids == ("b", "a")
    np.testing.assert_array_equal(run.correct, [0, 2])
    np.testing.assert_array_equal(run.first, [0, 1])  # sample 0 is first, whatever the row order


def test_a_counts_file_is_read_from_disk_once(tmp_path, monkeypatch):
    # The reader looks at the text to tell JSONL from CSV, then parses that same text: a file
    # read twice costs twice (inputs may be hundreds of MB) and could change in between.
    import zerogap.io.files as files

    reads = []
    real = files.read_bytes

    def counted(path, **kwargs):
        reads.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(files, "read_bytes", counted)
    for name, text in (("c.jsonl", jsonl({"id": "a", "correct": 1, "samples": 2})),
                       ("c.csv", "id,correct,samples\na,1,2\n")):
        reads.clear()
        run = read_counts(write(tmp_path, name, text))
        assert run.ids == ("a",) and run.correct.tolist() == [1]
        assert len(reads) == 1, f"{name} read {len(reads)} times"


def test_write_then_read_round_trips(tmp_path):
    path = tmp_path / "out.jsonl"
    write_counts(path, ["x", 7], [3, 0], [5, 5], first=[1, 0])
    run = read_counts(path)
    assert run.ids == ("x", "7")
    np.testing.assert_array_equal(run.correct, [3, 0])
    assert not (tmp_path / "out.jsonl.tmp").exists()


def test_alignment_reorders_and_reports_differing_question_sets(tmp_path):
    clean = read_counts(write(tmp_path, "c.csv", "id,correct,samples\na,1,2\nb,2,2\nc,0,2\n"))
    other = read_counts(write(tmp_path, "o.csv", "id,correct,samples\nc,1,2\na,0,2\nb,2,2\n"))
    aligned = other.aligned_to(clean)
    assert aligned.ids == clean.ids
    np.testing.assert_array_equal(aligned.correct, [0, 2, 1])
    partial = read_counts(write(tmp_path, "p.csv", "id,correct,samples\na,0,2\nz,1,2\ny,1,2\n"))
    with pytest.raises(ValueError) as err:
        partial.aligned_to(clean)
    message = str(err.value)
    assert "2 missing (b, c)" in message and "2 not in" in message and "(y, z)" in message


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("empty.jsonl", "", "empty file"),
        ("blank.csv", "id,correct,samples\n", "empty file"),
        (
            "bad.jsonl",
            '{"id": "a", "correct": 1, "samples": 2}\n{"id": "b", "correct": 1,\n',
            r"bad.jsonl:2: malformed JSON",
        ),
        ("list.jsonl", "[1, 2]\n", r"list.jsonl:1: expected a JSON object"),
        ("noid.jsonl", jsonl({"correct": 1, "samples": 2}), "match no known shape"),
        (
            "emptyid.csv",
            "id,correct,samples\n,1,2\n",
            r"emptyid.csv:2: missing or invalid question id",
        ),
        (
            "dup.jsonl",
            jsonl({"id": "a", "correct": 1, "samples": 2}, {"id": "a", "correct": 0, "samples": 2}),
            r"dup.jsonl:2: duplicate question id 'a' \(first on line 1\)",
        ),
        (
            "dupsample.csv",
            "id,sample,correct\na,0,1\na,0,0\n",
            r"dupsample.csv:3: duplicate sample 0",
        ),
        (
            "over.csv",
            "id,correct,samples\na,5,3\n",
            r"over.csv:2: correct \(5\) exceeds samples \(3\)",
        ),
        ("neg.csv", "id,correct,samples\na,-1,3\n", "correct is negative"),
        (
            "frac.jsonl",
            jsonl({"id": "a", "correct": 1.5, "samples": 3}),
            "correct must be an integer",
        ),
        ("text.csv", "id,correct,samples\na,two,3\n", "correct must be an integer, got 'two'"),
        ("nan.jsonl", '{"id": "a", "correct": NaN, "samples": 3}\n', "an integer, got nan"),
        ("nancsv.csv", "id,correct,samples\na,nan,3\n", "correct must be an integer, got nan"),
        ("zero.csv", "id,correct,samples\na,0,0\n", "has zero samples"),
        ("unknown.csv", "id,correct,samples,model\na,1,3,x\n", r"unknown field\(s\) model"),
        (
            "mixed.jsonl",
            jsonl({"id": "a", "correct": 1, "samples": 2}, {"id": "b", "outcomes": [1]}),
            "shape 'outcomes' but the file started with 'counts'",
        ),
        ("bin.jsonl", jsonl({"id": "a", "outcomes": [1, 2]}), "outcomes must be 0 or 1"),
        ("cols.csv", "id,correct,samples\na,1\n", r"cols.csv:2: expected 3 columns"),
        (
            "partfirst.jsonl",
            jsonl(
                {"id": "a", "correct": 1, "samples": 2, "first": 1},
                {"id": "b", "correct": 1, "samples": 2},
            ),
            "'first' is given for some questions but not all",
        ),
        ("bool.jsonl", jsonl({"id": "a", "correct": True, "samples": 2}), "must be an integer"),
    ],
)
def test_bad_files_get_one_line_errors_naming_the_problem(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    with pytest.raises(ValueError, match=message) as err:
        read_counts(path)
    assert "\n" not in str(err.value)
    assert path.read_text(encoding="utf-8") == text  # reading never touches the file


def test_missing_file_and_directory_are_named(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl: no such file"):
        read_counts(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match=f"{tmp_path}: is a directory"):
        read_counts(tmp_path)
