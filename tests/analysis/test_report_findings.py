"""The report shows each finding with its rule, says "not testable here" with the design
criterion that failed (and, on its first screen, that the paper's premise is missing), and
splits RailCap's collateral damage between its answer slot and its reasoning steps (issue 47):
in the Markdown, the HTML and the terminal summary, on a copy of the evaluated reduced study."""

import html
import json
import shutil
from pathlib import Path

from zerogap import cli
from zerogap.analysis.design import KEYS, ROUGE_UNLEAKED, Criterion, write_design
from zerogap.analysis.findings import PROTECTED


def test_findings_render_with_their_rules_and_failed_preconditions(study_dir, tmp_path, capsys):
    out, _, _ = study_dir
    folder = Path(shutil.copytree(out, tmp_path / "study"))
    record = json.loads((folder / "study.json").read_text())
    entry = record["settings"][0]
    # The study's design file as a study in the miniature's failure mode writes it: every
    # criterion met but F1's dispersion criterion.
    failed = ROUGE_UNLEAKED
    criteria = [Criterion(key, "a statistic", 0.9, ">=", 0.5, key != failed, "detail")
                for key in KEYS]
    write_design(folder / "design" / "checks.json", criteria, [])
    entry["design"] = "design/checks.json"
    # RailCap and its answer-protecting variant as controls on the clean model.
    railcap = entry["counts"]["strategies"]["railcap"]
    entry["counts"]["controls"] = {"railcap": railcap,
                                   PROTECTED: entry["counts"]["strategies"]["identity"]}
    (folder / "study.json").write_text(json.dumps(record))

    assert cli.main(["report", str(folder), "--resamples", "50"]) == 0
    terminal = capsys.readouterr().out
    markdown = (folder / "report.md").read_text()
    page = (folder / "report.html").read_text()
    glance = markdown[markdown.index("## At a glance"):markdown.index("## Design")]
    assert f"- F1 not testable here: RailCap's SA-PPG below Identity's and every baseline's " \
           f"(not met: {failed})" in glance
    # The first screen says plainly that the premise is missing, from the measured values.
    premise = (f"The paper's premise does not hold here: {failed} 0.900, required >= 0.500. "
               "F1 and F2 are therefore not testable here")
    assert premise in glance and premise in html.unescape(page)
    assert premise in terminal.split("design checks (")[0]  # before the criteria's details
    for text in (terminal, markdown):
        assert f"F1 not testable here (not met: {failed})" in text
        assert text.count("rule: reproduced if") == 3
        assert "reproduced if all 5 tests hold one-sided at 0.05 (intersection-union); not " \
               "reproduced if one reverses after Holm's correction over the 5" in text
        assert "from binomial sampling alone" in text  # F3's expectation beside its value
        # F3 draws a verdict at the paper's m = 50 only: the toy study's is another m
        assert "F3 arithmetic at this m" in text and "the paper's statement is at m = 50" in text
        assert "answer slot: RailCap's collateral damage" in text
    assert f"design criteria not met: {failed}" in page and "intersection-union" in page
    assert f"from the reasoning steps ({PROTECTED})" in page
    findings = json.loads((folder / "tables" / "findings.json").read_text())["tiny-toy"]
    assert findings[0]["failed"] == [failed] and findings[0]["outcome"] == "not testable here"
    assert findings[2]["expected"] is not None  # F3's binomial expectation is recorded
    assert findings[2]["outcome"] == "arithmetic at this m"
