"""``zerogap evaluate --backend vllm`` end to end: a reduced study sampled through vLLM on the
embedded model (a second folder of the same weights as the contaminated model, so the study
switches engines), its report, and a rerun that resumes without starting vLLM."""

import json
import math
import os
import subprocess
import sys

import pytest

from zerogap.io.counts import read_counts
from zerogap.store import RunStore

from .test_cli import VLLM_OPTIONS

STRATEGIES = ("identity", "railcap", "lne-blocking", "all-zero")
QUESTIONS, M = 3, 2


def evaluate_cmd(clean, contaminated, out):
    return [sys.executable, "-m", "zerogap", "evaluate", "--backend", "vllm", "--clean", clean,
            "--contaminated", contaminated, "--task", "arith", "--limit", str(QUESTIONS),
            "-m", str(M), "--max-new-tokens", "16", "--strategies", ",".join(STRATEGIES),
            "--resamples", "200", "--out", str(out), *VLLM_OPTIONS]


@pytest.mark.slow
def test_a_study_through_vllm_reports_and_resumes(tmp_path):
    from zerogap.models import model_folder

    embedded = model_folder("embedded")
    twin = tmp_path / "contaminated"
    twin.mkdir()
    for file in os.listdir(embedded):
        (twin / file).symlink_to(os.path.join(embedded, file))
    out = tmp_path / "study"
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    first = subprocess.run(evaluate_cmd("embedded", str(twin), out), env=env,
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    for label in ("SA-PPG", *STRATEGIES):
        assert label in first.stdout
    # one progress display: a line per stage, both models loaded, every run sampled
    assert "loading the clean model" in first.stderr
    assert "loading the contaminated model" in first.stderr
    sampled = [s for s in STRATEGIES if s != "all-zero"]  # All-Zero samples nothing
    total = QUESTIONS * (2 + 2 + len(sampled))  # clean x 2, greedy x 2, sampled strategies
    assert f"{total}/{total} questions" in first.stderr

    entry = json.loads((out / "study.json").read_text())["settings"][0]
    assert entry["questions"] == QUESTIONS
    assert set(entry["counts"]["strategies"]) == set(sampled)
    for path in [entry["counts"]["clean"], entry["counts"]["repeat"],
                 *entry["counts"]["strategies"].values()]:
        counts = read_counts(out / path)
        assert len(counts) == QUESTIONS and set(counts.samples) == {M}
    for label, run in entry["runs"].items():
        with RunStore(out / run, create=False) as store:
            assert store.config()["backend"] == "vllm", label
    with RunStore(out / entry["runs"]["greedy"], create=False) as store:
        greedy = store.greedy()
    # LNE-blocking's input: one full-vocabulary entropy per generated token (and EOS)
    assert len(greedy) == QUESTIONS
    for row in greedy.values():
        assert len(row.token_ids) <= len(row.entropies) <= len(row.token_ids) + 1
        assert min(row.entropies) >= 0
    # every blocked sample records its question's count through vLLM too: the formula on those
    # entropies at the T_task the study took; the report states how many questions got each
    t_task = entry["baselines"]["lne_t_task"]
    with RunStore(out / entry["runs"]["lne-blocking"], create=False) as store:
        recorded = {r.question_id: r.stats["blocking_count"] for r in store.samples()}
    assert recorded == {q: math.floor(t_task * min(max(1 - sum(g.entropies) / len(g.entropies)
                                                       / 2, 0), 1)) for q, g in greedy.items()}
    assert "lne-blocking: " in first.stdout and "blocking count" in first.stdout
    for key in ("table1", "table2", "table3"):
        assert (out / "tables" / f"{key}.md").stat().st_size > 0
    table1 = (out / "tables" / "table1.md").read_text()
    assert all(label in table1 for label in STRATEGIES)
    ranks = json.loads((out / entry["ranks"]).read_text())
    assert sorted(ranks["ranks"]) == sorted(ranks["questions"])
    assert len(ranks["questions"]) == QUESTIONS

    stores = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("run.sqlite")}
    again = subprocess.run(evaluate_cmd("embedded", str(twin), out), env=env,
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "loading" not in again.stderr and "0/0 questions" in again.stderr
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("run.sqlite")} == stores
    summary = first.stdout[first.stdout.index("setting: "):]  # after vLLM's own log lines
    assert again.stdout.endswith(summary)  # the same report from the same samples
