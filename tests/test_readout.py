"""Readouts from real run stores: ``runs show`` and ``runs export --counts`` agree, torch-free."""

import json
import subprocess
import sys
from pathlib import Path

from zerogap import cli
from zerogap.readout import run_counts
from zerogap.store import RunStore, SampleRow

SRC = Path(__file__).resolve().parents[1] / "src"


def _ted_run(run_dir):
    """A TED run: question a keeps 2 of 4 samples (1 correct), b keeps none (readout 0);
    samples a1 (dropped), a2 (kept) and b0 were cut at the token limit."""
    with RunStore(run_dir) as store:
        store.check_config({"strategy": "ted", "strategy_config": {}, "readout": "ted-kept"})
        kept = {"a": [True, False, True, False], "b": [False] * 4}
        correct = {"a": [True, True, False, True], "b": [True, True, True, True]}
        cut = {("a", 1), ("a", 2), ("b", 0)}
        for qid in ("a", "b"):
            store.add_samples([SampleRow(qid, i, "t", 1, "length" if (qid, i) in cut else "eos",
                                         None, correct[qid][i], {"ted_kept": kept[qid][i]})
                               for i in range(4)])


def test_show_and_export_read_a_ted_run_the_same_way(tmp_path, capsys):
    _ted_run(tmp_path / "run")
    out = tmp_path / "c.jsonl"
    assert cli.main(["runs", "export", str(tmp_path / "run"), "--counts", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    # the single draw reads the first kept sample: b kept none, so it reads 0 (sample 0 is
    # correct, which the raw first sample would have read); truncation counts the samples the
    # readout counts: a's kept a2 (not the dropped a1), b's b0 (b counts all four)
    assert rows == [{"id": "a", "correct": 1, "samples": 2, "first": 1, "truncated": 1},
                    {"id": "b", "correct": 0, "samples": 4, "first": 0, "truncated": 1}]
    capsys.readouterr()
    assert cli.main(["runs", "show", str(tmp_path / "run")]) == 0
    shown = capsys.readouterr().out
    # 1 correct of 6 counted samples: raw counts would read 7 of 8.
    assert "readout            \"ted-kept\"" not in shown and "readout            ted-kept" in shown
    assert "samples            6" in shown and "accuracy           0.1667" in shown


def test_show_as_json_says_what_the_table_says(tmp_path, capsys):
    _ted_run(tmp_path / "run")
    assert cli.main(["runs", "show", str(tmp_path / "run"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["readout"] == "ted-kept"
    assert shown["config"] == {"strategy": "ted", "strategy_config": {}, "readout": "ted-kept"}
    assert shown["truncated"] == {"responses": 3, "of": 8}  # every stored sample
    assert (shown["questions_done"], shown["samples"]) == (2, 6)
    assert shown["accuracy"] == 1 / 6 and shown["histogram"] == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    out = tmp_path / "show.json"
    assert cli.main(["runs", "show", str(tmp_path / "run"), "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == shown
    assert cli.main(["runs", "show", str(tmp_path / "run"), "--json",
                     str(tmp_path / "no" / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_older_stores_without_a_readout_field_use_the_strategys(tmp_path):
    with RunStore(tmp_path) as store:
        store.check_config({"strategy": "all-zero", "strategy_config": {}})
        store.add_samples([SampleRow("q", i, "", 0, "synthetic", None, False, {})
                           for i in range(3)])
        assert run_counts(store) == [{"id": "q", "correct": 0, "samples": 3, "first": 0,
                                      "truncated": 0}]


def test_reading_showing_and_exporting_a_run_never_import_torch(tmp_path):
    _ted_run(tmp_path / "run")
    code = (
        "import sys; from zerogap.cli import main; "
        f"assert main(['runs', 'show', {str(tmp_path / 'run')!r}]) == 0; "
        f"assert main(['runs', 'export', {str(tmp_path / 'run')!r}, '--counts', "
        f"{str(tmp_path / 'c.jsonl')!r}]) == 0; "
        f"assert main(['score', '--clean', {str(tmp_path / 'run')!r}, '--mitigated', "
        f"'r={tmp_path / 'c.jsonl'}', '--resamples', '10', '--noise-sims', '10']) == 0; "
        "bad = [m for m in ('torch', 'transformers', 'rapidfuzz') if m in sys.modules]; "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONPATH": str(SRC)})
    assert result.returncode == 0, result.stderr
