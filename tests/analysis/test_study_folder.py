"""Issue 22, damaged or edited study folders: ``zerogap report`` reads a study folder through one
reader that refuses a damaged folder in one line naming the file and the key (exit 2), before
anything is scored or written. Each case is a real copy of the reduced study's folder, damaged
the way the probe did it; on f24be4b every one of them ended in a traceback."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerogap import cli


@pytest.fixture()
def folder(study_dir, tmp_path):
    """A private copy of the evaluated reduced study."""
    out, _, _ = study_dir
    return Path(shutil.copytree(out, tmp_path / "study"))


def _edit(folder: Path, change) -> None:
    path = folder / "study.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def _entry(record):
    return record["settings"][0]


def refused(capsys, folder: Path, *fragments) -> str:
    before = _snapshot(folder)
    code = cli.main(["report", str(folder)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    assert _snapshot(folder) == before, "a refused report changed the folder"
    return err


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*")
            if p.is_file()}


KEY_DAMAGE = {
    "missing counts": (lambda r: _entry(r).pop("counts"), "settings[0].counts: missing"),
    "missing clean counts": (lambda r: _entry(r)["counts"].pop("clean"),
                             "settings[0].counts.clean: missing"),
    "questions as text": (lambda r: _entry(r).update(questions="10"),
                          "settings[0].questions: expected an integer"),
    "model as a string": (lambda r: _entry(r).update(clean="x"),
                          "settings[0].clean: expected an object"),
    "missing fingerprint holder": (lambda r: _entry(r)["contaminated"].pop("spec"),
                                   "settings[0].contaminated.spec: missing"),
    "missing fingerprint": (lambda r: _entry(r)["clean"].pop("fingerprint"),
                            "settings[0].clean.fingerprint: missing"),
    "settings not a list": (lambda r: r.update(settings={"a": 1}), "settings: expected a list"),
    "no settings": (lambda r: r.update(settings=[]), "settings: no setting"),
    "config m as text": (lambda r: r["config"].update(m="4"), "config.m: expected an integer"),
    "scoring bins wrong": (lambda r: r["scoring"].update(bins="many"),
                           "key scoring: ScoreSettings.bins must be"),
    "scoring unknown key": (lambda r: r["scoring"].update(bnis=3), "key scoring:"),
    "leaked not ids": (lambda r: _entry(r).update(leaked=[1, 2]),
                       "settings[0].leaked: expected a list of strings"),
    "commands not strings": (lambda r: r.update(commands=[{"x": 1}]), "commands: expected"),
    "dtype not text": (lambda r: r.update(dtype=16), "dtype: expected"),
    "memory peak as text": (lambda r: r["memory"].update(peak_resident_bytes="8GB"),
                            "memory.peak_resident_bytes: expected"),
    "references without the unmitigated label": (
        lambda r: _entry(r)["references"].pop("unmitigated"),
        "settings[0].references.unmitigated: missing"),
    "reads_zero not labels": (lambda r: _entry(r)["references"].update(reads_zero="all-zero"),
                              "settings[0].references.reads_zero: expected a list of strings"),
    "counts path escapes": (lambda r: _entry(r)["counts"]["strategies"].update(
        ted="../../etc/passwd"), "settings[0].counts.strategies.ted: '../../etc/passwd' is not"),
    "counts file renamed": (lambda r: _entry(r)["counts"].update(repeat="counts/nope.jsonl"),
                            "settings[0].counts.repeat:"),
    "ranks as a number": (lambda r: _entry(r).update(ranks=3), "settings[0].ranks: expected"),
    "duplicate setting": (lambda r: r["settings"].append(_entry(r)), "appears twice"),
    "scaled tau as text": (lambda r: _entry(r).setdefault("baselines", {}).update(
        ted_scaled_tau="1"), "settings[0].baselines.ted_scaled_tau: expected an integer"),
    "strategy run renamed": (lambda r: _entry(r)["runs"].update(ted="runs/nope"),
                             "settings[0].runs.ted: "),
}


@pytest.mark.parametrize("case", sorted(KEY_DAMAGE))
def test_a_mistyped_or_missing_key_names_the_file_and_the_key(folder, capsys, case):
    change, message = KEY_DAMAGE[case]
    _edit(folder, change)
    refused(capsys, folder, "study.json", message)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _file_to_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _folder_to_file(path: Path) -> None:
    shutil.rmtree(path)
    path.write_text("not a folder\n")


FILE_DAMAGE = {
    "truncated study.json": ("study.json", _truncate, "study.json: not valid JSON"),
    "missing study.json": ("study.json", Path.unlink, "study.json: no such file"),
    "truncated ranks": ("ranks/tiny-toy.json", _truncate, "tiny-toy.json: not valid JSON"),
    "missing ranks": ("ranks/tiny-toy.json", Path.unlink,
                      "settings[0].ranks: "),
    "ranks a folder": ("ranks/tiny-toy.json", _file_to_folder, "is a folder, not a file"),
    "counts a folder": ("counts/tiny-toy/ted.jsonl", _file_to_folder,
                        "settings[0].counts.strategies.ted"),
    "run dir a file": ("{greedy}", _folder_to_file, "settings[0].figure_runs.greedy"),
    "tables a file": ("tables", _folder_to_file, "tables: is a file, not a folder"),
    "figures a file": ("figures", _folder_to_file, "figures: is a file, not a folder"),
    "report.html a folder": ("report.html", _file_to_folder, "report.html: is a directory"),
    "the folder a file": (".", None, "is a file; give a zerogap evaluate folder"),
}


@pytest.mark.parametrize("case", sorted(FILE_DAMAGE))
def test_a_damaged_file_or_a_swapped_file_and_folder_is_one_line(folder, capsys, case):
    pattern, damage, message = FILE_DAMAGE[case]
    if damage is None:  # the whole folder replaced by a file
        shutil.rmtree(folder)
        folder.write_text("{}")
        assert cli.main(["report", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        return
    greedy = _entry(json.loads((folder / "study.json").read_text()))["figure_runs"]["greedy"]
    targets = sorted(folder.glob(pattern.format(greedy=greedy)))
    assert targets, pattern
    damage(targets[0])
    refused(capsys, folder, message)


def test_a_deeply_nested_study_file_is_one_line(folder, capsys):
    (folder / "study.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, folder, "study.json: JSON nested too deeply")


def test_null_optional_keys_take_their_defaults(folder, capsys):
    """``title``, ``commands``, ``versions`` and ``dtype`` may be null (as hypothesis found
    ``versions`` crashing the HTML template): the report is written with their defaults."""
    _edit(folder, lambda r: r.update(title=None, commands=None, versions=None, dtype=None))
    assert cli.main(["report", str(folder), "--resamples", "50"]) == 0
    assert "## Reproduce" in (folder / "report.md").read_text()
    assert "<title>zerogap restoration study: study</title>" in (folder / "report.html").read_text()
    assert (folder / "report.md").read_text().startswith("# Restoration study: study\n")


def test_an_intact_copy_still_reports(folder, capsys):
    (folder / "report.html").unlink()
    assert cli.main(["report", str(folder), "--resamples", "50"]) == 0
    assert (folder / "report.html").is_file() and "SA-PPG" in capsys.readouterr().out


def test_the_report_states_the_memory_budget_and_the_peak_the_study_recorded(folder, capsys):
    memory = json.loads((folder / "study.json").read_text())["memory"]
    assert memory["peak_resident_bytes"] > 0 and memory["budget_bytes"] > 0 and memory["source"]
    assert cli.main(["report", str(folder), "--resamples", "50"]) == 0
    line = next(x for x in (folder / "report.md").read_text().splitlines() if "memory" in x)
    assert f"{memory['budget_bytes'] / (1 << 30):.1f} GiB ({memory['source']})" in line
    assert f"peak resident memory {memory['peak_resident_bytes'] / (1 << 30):.1f} GiB" in line


def _report_read_only(folder: Path) -> subprocess.CompletedProcess:
    """``zerogap report folder`` with the folder read-only: for an ordinary user by its
    permissions; as root (whom permissions do not bind) on a private read-only bind mount of
    it, in a mount namespace of the subprocess's own, so nothing outlives the command."""
    command = [sys.executable, "-m", "zerogap", "report", str(folder)]
    if os.geteuid() != 0:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=120)
        finally:
            for path in [folder, *folder.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare: no way to make a folder read-only for it")
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    run = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(folder), *command],
                         capture_output=True, text=True, timeout=120)
    if "mount:" in run.stderr or "unshare:" in run.stderr:
        pytest.skip(f"no private read-only mount here: {run.stderr.strip()}")
    return run


def test_a_read_only_folder_is_one_line_and_keeps_its_report(folder):
    before = (folder / "report.md").read_bytes()
    run = _report_read_only(folder)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "not writable" in run.stderr, run.stderr
    assert (folder / "report.md").read_bytes() == before


# -- property-based: any damage to study.json is a report or one line ------------------------

SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
           | st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


def _paths(value, prefix=()):
    """Every key path into a JSON value (the value itself first)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _apply(record, path, action, value):
    *head, last = path
    parent = record
    for key in head:
        parent = parent[key]
    if action == "delete":
        del parent[last]
    else:
        parent[last] = value


@pytest.mark.slow
def test_no_damage_to_a_study_file_gets_a_traceback(study_dir, tmp_path_factory):
    out, _, _ = study_dir
    record = json.loads((out / "study.json").read_text())
    # Scoring settings made cheap, so an edit the report accepts costs little.
    record["scoring"].update(resamples=20, noise_sims=20)
    paths = [p for p in _paths(record) if p]
    base = tmp_path_factory.mktemp("fuzz-base") / "study"
    shutil.copytree(out, base)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.sampled_from(paths), st.sampled_from(["delete", "set"]),
                              VALUES), min_size=1, max_size=3))
    def check(edits):
        damaged = json.loads(json.dumps(record))
        for path, action, value in edits:
            try:
                _apply(damaged, path, action, value)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier edit removed or replaced what this one names
        (base / "study.json").write_text(json.dumps(damaged))
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli.main(["report", str(base)])
        message = err.getvalue()
        assert code in (0, 2), (code, message)
        if code == 2:
            assert message.count("\n") == 1 and ": error: " in message, message

    check()


def test_the_report_reads_its_reference_labels_from_the_study_record(folder, capsys):
    """Issue 57: the study records which label is the unmitigated run and which read 0 (from
    what the strategies declare), and the report names no strategy itself; a folder written
    before that record reports exactly as one with it."""
    from zerogap.analysis.report import score_setting
    from zerogap.analysis.score import ScoreSettings

    entry = _entry(json.loads((folder / "study.json").read_text()))
    assert entry["references"] == {"unmitigated": "identity", "reads_zero": []}
    scoring = ScoreSettings(resamples=50)
    assert "all-zero" in score_setting(folder, entry, scoring).strategies
    # A label recorded as reading 0 stands for All-Zero: no synthetic row is added.
    ted_reads_zero = {**entry, "references": {"unmitigated": "identity", "reads_zero": ["ted"]}}
    assert "all-zero" not in score_setting(folder, ted_reads_zero, scoring).strategies

    assert cli.main(["report", str(folder), "--resamples", "50"]) == 0
    recorded = (folder / "report.md").read_text()
    _edit(folder, lambda r: _entry(r).pop("references"))
    assert cli.main(["report", str(folder), "--resamples", "50"]) == 0
    assert (folder / "report.md").read_text() == recorded
    assert "Figure 1" in recorded  # the unmitigated run's samples were found
