"""lm-evaluation-harness ``--log_samples`` files as input: real-format logs written here from the
documented record layout (two filters per document, K raw responses per request)."""

import hashlib
import json

import pytest

from zerogap.errors import DataError
from zerogap.io.lmeval import check_same_documents, is_lmeval_log, is_lmeval_record
from zerogap.io.lmeval import read_lmeval as read_log
from zerogap.tasks.extract import parse_gold, target_grader


def read_lmeval(path, mode="anchor"):
    """The reader with zerogap's extractor ``mode``, as ``zerogap lmeval`` reads a log."""
    return read_log(path, grade=target_grader(mode))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def harness_log(path, docs, responses, *, filters=("strict-match", "flexible-extract")):
    """Write ``docs`` (GSM8K rows) with ``responses[i]`` (K strings each) as the harness does:
    the loop runs over filters, then documents, so each document appears once per filter."""
    with open(path, "w") as f:
        for name in filters:
            for doc_id, (doc, resps) in enumerate(zip(docs, responses, strict=True)):
                record = {
                    "doc_id": doc_id, "doc": doc, "target": doc["answer"],
                    "arguments": {"gen_args_0": {"arg_0": f"Q: {doc['question']}\nA:",
                                                 "arg_1": {"until": ["Q:"], "do_sample": True,
                                                           "temperature": 0.7}}},
                    "resps": [list(resps)], "filtered_resps": [resps[0]], "filter": name,
                    "metrics": ["exact_match"], "exact_match": 0.0,
                    "doc_hash": _sha(json.dumps(doc, sort_keys=True)),
                    "prompt_hash": _sha(doc["question"]), "target_hash": _sha(doc["answer"]),
                }
                f.write(json.dumps(record) + "\n")
    return path


@pytest.fixture(scope="module")
def docs(gsm8k_dir):
    with open(gsm8k_dir / "test.jsonl") as f:
        return [json.loads(next(f)) for _ in range(6)]


def responses_with(docs, right_per_doc, k=4):
    out = []
    for doc, right in zip(docs, right_per_doc, strict=True):
        gold = parse_gold(doc["answer"])
        out.append([f"Some steps. The answer is {gold}." if j < right
                    else f"Some steps. The answer is {gold}1." for j in range(k)])
    return out


def test_counts_from_all_raw_responses_grouped_by_document(docs, tmp_path):
    right = [0, 1, 2, 3, 4, 2]
    path = harness_log(tmp_path / "samples_gsm8k_cot.jsonl", docs, responses_with(docs, right))
    log = read_lmeval(path)
    assert log.counts.ids == tuple(str(i) for i in range(6))  # once each, though on two lines
    assert log.counts.correct.tolist() == right
    assert log.counts.samples.tolist() == [4] * 6 and log.repeats == 4
    assert log.counts.first.tolist() == [int(r > 0) for r in right]
    assert is_lmeval_record(json.loads(path.read_text().splitlines()[0])) and is_lmeval_log(path)


def test_harness_modes_reproduce_the_harness(docs, tmp_path):
    gold = parse_gold(docs[0]["answer"])
    # "The answer is N" at the very end: the harness's strict regex eats the last digit.
    resps = [[f"The answer is {gold}", f"The answer is {gold}.", "no number", f"#### {gold}"]]
    path = harness_log(tmp_path / "samples_x.jsonl", docs[:1], resps)
    assert read_lmeval(path).counts.correct.tolist() == [3]  # anchor reads all but "no number"
    assert read_lmeval(path, "lmeval-strict").counts.correct.tolist() == [1]
    assert read_lmeval(path, "lmeval-strict-hash").counts.correct.tolist() == [1]


def test_refusals_name_the_file_and_line(docs, tmp_path):
    one = harness_log(tmp_path / "one.jsonl", docs[:2], [["The answer is 1."]] * 2)
    with pytest.raises(DataError, match=r"one.jsonl:1: one response per document \(repeats = 1\)"):
        read_lmeval(one)
    counts = tmp_path / "counts.jsonl"
    counts.write_text('{"id": "q", "correct": 1, "samples": 2}\n')
    assert not is_lmeval_log(counts) and not is_lmeval_log(tmp_path)
    with pytest.raises(DataError, match="counts.jsonl:1: not an lm-evaluation-harness sample "
                                         "record .missing doc_hash, doc_id, resps, target."):
        read_lmeval(counts)
    good = harness_log(tmp_path / "good.jsonl", docs[:2], responses_with(docs[:2], [1, 2]))
    lines = good.read_text().splitlines()
    edited = json.loads(lines[3])
    edited["resps"] = [["other"] * 4]
    (tmp_path / "torn.jsonl").write_text("\n".join([*lines[:3], json.dumps(edited)]))
    with pytest.raises(DataError, match="torn.jsonl:4: doc_id 1 differs from its line 2 .resps."):
        read_lmeval(tmp_path / "torn.jsonl")
    uneven = [["The answer is 1."] * 4, ["The answer is 1."] * 3]
    with pytest.raises(DataError, match="doc_id 1 has 3 responses, earlier documents 4"):
        read_lmeval(harness_log(tmp_path / "uneven.jsonl", docs[:2], uneven))
    with pytest.raises(DataError, match="no such file"):
        read_lmeval(tmp_path / "absent.jsonl")


def test_two_logs_must_hold_the_same_documents(docs, tmp_path):
    clean = read_lmeval(harness_log(tmp_path / "clean.jsonl", docs, responses_with(docs, [1] * 6)))
    same = read_lmeval(harness_log(tmp_path / "rail.jsonl", docs, responses_with(docs, [2] * 6)))
    check_same_documents(clean, same)
    changed = [dict(d) for d in docs]
    changed[3]["question"] += " (revised)"
    other = read_lmeval(harness_log(tmp_path / "rev.jsonl", changed,
                                    responses_with(docs, [2] * 6)))
    with pytest.raises(DataError, match="doc_hash of 1 documents differs .* doc_id 3"):
        check_same_documents(clean, other)
    fewer = read_lmeval(harness_log(tmp_path / "few.jsonl", docs[:4],
                                    responses_with(docs[:4], [2] * 4)))
    with pytest.raises(DataError, match="documents differ .* 2 only in the first"):
        check_same_documents(clean, fewer)


def test_score_and_import_read_harness_logs(docs, tmp_path, capsys):
    from zerogap.cli import main
    from zerogap.io.counts import read_counts

    right_clean, right_rail = [0, 1, 2, 3, 4, 2], [1, 1, 2, 2, 4, 0]
    clean = harness_log(tmp_path / "samples_clean.jsonl", docs, responses_with(docs, right_clean))
    rail = harness_log(tmp_path / "samples_rail.jsonl", docs, responses_with(docs, right_rail))
    out = tmp_path / "scores.json"
    argv = ["score", "--clean", str(clean), "--mitigated", f"railcap={rail}", "--resamples",
            "50", "--noise-sims", "20", "--json", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    expected = sum(abs(a - b) for a, b in zip(right_clean, right_rail, strict=True)) / 4 / 6
    assert result["strategies"]["railcap"]["a_ppg"]["estimate"] == pytest.approx(expected)
    assert result["inputs"]["clean"]["lmeval"] == {"repeats": 4, "grading": "anchor"}

    changed = [dict(d) for d in docs]
    changed[2]["question"] += " (revised)"
    other = harness_log(tmp_path / "samples_rev.jsonl", changed, responses_with(docs, [1] * 6))
    capsys.readouterr()
    assert main(["score", "--clean", str(clean), "--mitigated", f"x={other}"]) == 2
    err = capsys.readouterr().err
    assert "doc_hash of 1 documents differs" in err and len(err.strip().splitlines()) == 1

    counts = tmp_path / "clean-counts.jsonl"
    assert main(["import", str(clean), "--out", str(counts)]) == 0
    read = read_counts(counts)
    assert read.correct.tolist() == [0, 1, 2, 3, 4, 2] and read.samples.tolist() == [4] * 6
    assert read.provenance["lmeval"]["repeats"] == 4
    one = harness_log(tmp_path / "one.jsonl", docs[:2], [["The answer is 1."]] * 2)
    assert main(["import", str(one), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "repeats = 1" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()


def test_an_output_path_folder_stands_for_its_one_sample_log(docs, tmp_path, capsys):
    """The harness writes ``<output_path>/<model>/samples_<task>_<date>.jsonl``: the folder
    goes wherever the log does, and a folder holding several logs is refused in one line."""
    from zerogap.cli import main
    from zerogap.io.counts import read_counts

    right_clean, right_rail = [0, 1, 2, 3, 4, 2], [1, 1, 2, 2, 4, 0]
    for name, right in (("clean", right_clean), ("railcap", right_rail)):
        (tmp_path / name / "embedded").mkdir(parents=True)
        harness_log(tmp_path / name / "embedded" / "samples_gsm8k_2026-12-01T10-44-20.1.jsonl",
                    docs, responses_with(docs, right))
    out = tmp_path / "scores.json"
    argv = ["score", "--clean", str(tmp_path / "clean"), "--mitigated",
            f"railcap={tmp_path / 'railcap' / 'embedded'}", "--resamples", "20",
            "--noise-sims", "10", "--json", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    expected = sum(abs(a - b) for a, b in zip(right_clean, right_rail, strict=True)) / 4 / 6
    assert result["strategies"]["railcap"]["a_ppg"]["estimate"] == pytest.approx(expected)
    assert result["inputs"]["clean"]["path"].endswith("samples_gsm8k_2026-12-01T10-44-20.1.jsonl")

    counts = tmp_path / "counts.jsonl"
    assert main(["import", str(tmp_path / "railcap"), "--out", str(counts)]) == 0
    assert read_counts(counts).correct.tolist() == right_rail

    # A second task's log in the same folder: which one is meant cannot be guessed.
    harness_log(tmp_path / "clean" / "embedded" / "samples_arith_2026-12-01T11-00-00.2.jsonl",
                docs, responses_with(docs, right_clean))
    capsys.readouterr()
    for argv in (["score", "--clean", str(tmp_path / "clean"), "--mitigated",
                  f"railcap={tmp_path / 'railcap'}"],
                 ["import", str(tmp_path / "clean"), "--out", str(tmp_path / "c2.jsonl")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "2 lm-evaluation-harness sample logs" in err
        assert "embedded/samples_arith_2026-12-01T11-00-00.2.jsonl" in err
    assert not (tmp_path / "c2.jsonl").exists()
    (tmp_path / "empty").mkdir()
    assert main(["import", str(tmp_path / "empty"), "--out", str(tmp_path / "c3.jsonl")]) == 2
    assert "no lm-evaluation-harness samples_*.jsonl" in capsys.readouterr().err
