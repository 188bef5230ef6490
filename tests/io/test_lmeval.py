"""lm-evaluation-harness ``--log_samples`` files as input: real-format logs written here from the
documented record layout (two filters per document, K raw responses per request)."""

import hashlib
import json

import pytest

from zerogap.io.lmeval import check_same_documents, is_lmeval_record, read_lmeval
from zerogap.tasks.extract import parse_gold


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
    assert is_lmeval_record(json.loads(path.read_text().splitlines()[0]))


def test_harness_modes_reproduce_the_harness(docs, tmp_path):
    gold = parse_gold(docs[0]["answer"])
    # "The answer is N" at the very end: the harness's strict regex eats the last digit.
    resps = [[f"The answer is {gold}", f"The answer is {gold}.", "no number", f"#### {gold}"]]
    path = harness_log(tmp_path / "samples_x.jsonl", docs[:1], resps)
    assert read_lmeval(path).counts.correct.tolist() == [3]  # anchor reads all but "no number"
    assert read_lmeval(path, mode="lmeval-strict").counts.correct.tolist() == [1]
    assert read_lmeval(path, mode="lmeval-strict-hash").counts.correct.tolist() == [1]


def test_refusals_name_the_file_and_line(docs, tmp_path):
    one = harness_log(tmp_path / "one.jsonl", docs[:2], [["The answer is 1."]] * 2)
    with pytest.raises(ValueError, match=r"one.jsonl:1: one response per document \(repeats = 1\)"):
        read_lmeval(one)
    counts = tmp_path / "counts.jsonl"
    counts.write_text('{"id": "q", "correct": 1, "samples": 2}\n')
    with pytest.raises(ValueError, match="counts.jsonl:1: not an lm-evaluation-harness sample "
                                         "record .missing doc_hash, doc_id, resps, target."):
        read_lmeval(counts)
    good = harness_log(tmp_path / "good.jsonl", docs[:2], responses_with(docs[:2], [1, 2]))
    lines = good.read_text().splitlines()
    edited = json.loads(lines[3])
    edited["resps"] = [["other"] * 4]
    (tmp_path / "torn.jsonl").write_text("\n".join([*lines[:3], json.dumps(edited)]))
    with pytest.raises(ValueError, match="torn.jsonl:4: doc_id 1 differs from its line 2 .resps."):
        read_lmeval(tmp_path / "torn.jsonl")
    uneven = [["The answer is 1."] * 4, ["The answer is 1."] * 3]
    with pytest.raises(ValueError, match="doc_id 1 has 3 responses, earlier documents 4"):
        read_lmeval(harness_log(tmp_path / "uneven.jsonl", docs[:2], uneven))
    with pytest.raises(ValueError, match="no such file"):
        read_lmeval(tmp_path / "absent.jsonl")


def test_two_logs_must_hold_the_same_documents(docs, tmp_path):
    clean = read_lmeval(harness_log(tmp_path / "clean.jsonl", docs, responses_with(docs, [1] * 6)))
    same = read_lmeval(harness_log(tmp_path / "rail.jsonl", docs, responses_with(docs, [2] * 6)))
    check_same_documents(clean, same)
    changed = [dict(d) for d in docs]
    changed[3]["question"] += " (revised)"
    other = read_lmeval(harness_log(tmp_path / "rev.jsonl", changed,
                                    responses_with(docs, [2] * 6)))
    with pytest.raises(ValueError, match="doc_hash of 1 documents differs .* doc_id 3"):
        check_same_documents(clean, other)
    fewer = read_lmeval(harness_log(tmp_path / "few.jsonl", docs[:4],
                                    responses_with(docs[:4], [2] * 4)))
    with pytest.raises(ValueError, match="documents differ .* 2 only in the first"):
        check_same_documents(clean, fewer)
