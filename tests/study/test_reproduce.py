"""``zerogap reproduce``'s plumbing, reduced: the command builds a preset's models (M_co kept
along its exposures), writes the split that evaluates the questions past the design search's,
and runs the whole study on them, ablation included, into a report. The reproduce preset
itself takes hours (docs/reproduction.md); here the same path runs the tiny Llama on a
reduced `multistep` recipe."""

import json
import sqlite3
from pathlib import Path

import pytest

from zerogap import cli
from zerogap.pipelines.contamination_config import PRESETS
from zerogap.store import DB_NAME
from zerogap.study.demo import EVALUATED_SPLIT, REPRODUCE, Showcase
from zerogap.study.spec import ABLATION

pytestmark = pytest.mark.usefixtures("one_thread")


def test_reproduce_builds_and_studies_the_questions_past_the_searched_ones(
        tiny_dir, tmp_path, monkeypatch, capsys):
    import zerogap.study.demo

    recipe = {**PRESETS["reproduce"], "model": str(tiny_dir),
              "task_options": {"n_train": 40, "n_test": 24, "k": 0, "solutions": 2},
              "train_questions": 4, "replay": 2, "generated_general": 2, "leaked": 8,
              "lora_r": 4, "lora_alpha": 8, "global_batch": 2, "micro_batch": 2,
              "clean_epochs": 1, "epochs": 2, "keep_every": 1,
              "dtype": "float32"}  # trained and sampled alike on every CPU
    monkeypatch.setitem(PRESETS, "tiny-reproduce", recipe)
    tiny = Showcase(command="reproduce", preset="tiny-reproduce", questions=8, m=2,
                    max_new_tokens=6, neuron_block=0, neuron_candidates=2, calibration_size=4,
                    title="reduced reproduction", sizing="reduced", searched=2, ablation=True,
                    seed=REPRODUCE.seed)
    monkeypatch.setitem(zerogap.study.demo.SHOWCASES, "reproduce", tiny)
    out = tmp_path / "reproduce"
    assert cli.main(["reproduce", "--out", str(out), "--workers", "1", "--dtype", "float32",
                     "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "design checks (" in printed and "F1 " in printed and "F2 " in printed
    split = json.loads((out / "models" / "split.json").read_text())
    assert sorted(p.name for p in (out / "models").glob("contaminated-x*")) == [
        "contaminated-x1", "contaminated-x2"]
    record = json.loads((out / "study.json").read_text())
    assert record["config"]["seed"] == REPRODUCE.seed
    assert record["commands"][0].startswith(f"zerogap reproduce --out {out}")
    (entry,) = record["settings"]
    assert Path(entry["split_file"]).resolve() == (out / "models" / EVALUATED_SPLIT).resolve()
    assert set(ABLATION) <= set(entry["runs"])
    # every strategy sampled the questions past the searched ones, and only those
    fresh = {*split["leaked"][2:6], *split["unleaked"][2:6]}
    for label in ("identity", "railcap", "shortcut", "lne-blocking", *ABLATION):
        assert _sampled_questions(out / entry["runs"][label]) == fresh, label
    assert (out / "report.html").is_file()


def _sampled_questions(run_dir: Path) -> set[str]:
    con = sqlite3.connect(f"file:{run_dir / DB_NAME}?mode=ro", uri=True)
    try:
        return {q for (q,) in con.execute("SELECT DISTINCT question_id FROM samples")}
    finally:
        con.close()
