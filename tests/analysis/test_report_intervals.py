"""A study too small for calibrated intervals says so in the terminal summary, the controls'
lines and the tables, never ``[nan, nan]`` (on a copy of the evaluated reduced study)."""

import json
import re
import shutil
from pathlib import Path

from zerogap import cli
from zerogap.uncertainty.intervals import MIN_QUESTIONS


def test_an_interval_that_cannot_be_estimated_says_why(study_dir, tmp_path, capsys):
    out, _, _ = study_dir
    folder = Path(shutil.copytree(out, tmp_path / "study"))
    record = json.loads((folder / "study.json").read_text())
    entry = record["settings"][0]
    entry["counts"]["controls"] = {"railcap": entry["counts"]["strategies"]["railcap"]}
    (folder / "study.json").write_text(json.dumps(record))

    assert cli.main(["report", str(folder), "--resamples", "50"]) == 0
    terminal = capsys.readouterr().out
    questions = int(re.search(r"^tiny-toy: (\d+) questions", terminal, re.M).group(1))
    assert questions < MIN_QUESTIONS
    why = f"(too few questions ({questions} < {MIN_QUESTIONS}) for a calibrated statement)"
    controls = terminal[terminal.index("controls on the clean model"):].splitlines()[1]
    assert controls.strip().startswith("railcap: SA-PPG ") and controls.endswith(why), controls
    for text in (terminal, (folder / "report.md").read_text()):
        assert "nan" not in text.lower()
        assert why in text
