"""Study files: every path relative to the file (``out`` included), studies that ran under the
old rule found where they are, and a warning for a setting without a split file."""

import json

from zerogap import cli
from zerogap.study.spec import load_study, study_toml

SETTING = '''
[[setting]]
name = "s"
clean = "models/clean"
contaminated = "models/contaminated"
task = "arith"
'''


def _study(folder, head='out = "o"\n', setting=SETTING):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "study.toml"
    path.write_text(head + setting)
    return path


def test_out_and_existing_paths_are_relative_to_the_study_file(tmp_path, monkeypatch):
    path = _study(tmp_path / "a", setting=SETTING + 'task_options = {path = "data", k = 2}\n')
    (tmp_path / "a" / "models" / "clean").mkdir(parents=True)
    (tmp_path / "a" / "data").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    notes = []
    study, out = load_study(path, notes=notes)
    assert out == tmp_path / "a" / "o"
    setting = study.settings[0]
    assert setting.clean == str((tmp_path / "a" / "models" / "clean").resolve())
    assert setting.contaminated == "models/contaminated"  # exists nowhere there: as written
    assert setting.task_options == {"path": str(tmp_path / "a" / "data"), "k": 2}
    assert notes == ["setting s has no split_file: its questions are scored together, with no "
                     "leaked/unleaked rows (give the split.json zerogap contaminate wrote)"]


def test_a_study_that_ran_under_the_old_rule_resumes_where_it_is(tmp_path, monkeypatch):
    path = _study(tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "o" / "runs").mkdir(parents=True)  # out = "o" from the working folder, cut short
    notes = []
    _, out = load_study(path, notes=notes)
    assert out.resolve() == (tmp_path / "o").resolve()
    assert len(notes) == 2 and "is read relative to the study file now" in notes[0]
    assert str((tmp_path / "o").resolve()) in notes[0]
    # --out replaces the file's out: no note about it.
    from zerogap.cli import build_parser
    from zerogap.cli.evaluate import _study_from_args

    notes = []
    _, out = _study_from_args(build_parser().parse_args(
        ["evaluate", str(path), "--out", str(tmp_path / "x")]), notes)
    assert out == tmp_path / "x" and len(notes) == 1 and notes[0].startswith("setting s")
    # Once the new place holds a study, it wins, without a note.
    (tmp_path / "configs" / "o" / "runs").mkdir(parents=True)
    notes = []
    _, out = load_study(path, notes=notes)
    assert out == tmp_path / "configs" / "o" and not any("relative" in n for n in notes)


def test_the_copy_in_a_study_folder_names_that_folder_old_and_new(tmp_path, monkeypatch):
    folder = tmp_path / "runs" / "study"
    old = _study(folder, head='out = "runs/study"\n')  # written back before the rule, from tmp
    (folder / "study.json").write_text("{}")
    monkeypatch.chdir(tmp_path / "runs")  # from elsewhere: "runs/study" is nothing here
    notes = []
    study, out = load_study(old, notes=notes)
    assert out.resolve() == folder.resolve() and "this file's own folder" in notes[0]
    new = folder / "new.toml"
    new.write_text(study_toml(study))
    notes = []
    assert load_study(new, notes=notes)[1] == folder and len(notes) == 1  # the split warning


def test_the_split_warning_of_the_flags_and_a_refused_study_in_one_line(tmp_path, capsys):
    from zerogap.cli import build_parser
    from zerogap.cli.evaluate import _study_from_args

    argv = ["evaluate", "--clean", "cl", "--contaminated", "co", "--task", "arith", "--out",
            str(tmp_path / "o")]
    notes = []
    _study_from_args(build_parser().parse_args(argv), notes)
    assert len(notes) == 1 and notes[0].startswith("setting setting has no split_file")
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ["test-0"], "unleaked": ["test-1"]}))
    notes = []
    _study_from_args(build_parser().parse_args([*argv, "--split-file", str(split)]), notes)
    assert notes == []
    # A study refused (its models do not exist) says so in one line, warnings held back.
    assert cli.main(["evaluate", str(_study(tmp_path))]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("zerogap evaluate: error:")
