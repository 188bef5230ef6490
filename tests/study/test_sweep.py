"""``zerogap evaluate --models DIR --sweep ...``: contamination strengths as the settings of one
study (Table 3 across them), the variants built by ``zerogap contaminate``'s own build."""

import json

import pytest

import helpers
from zerogap import cli
from zerogap.pipelines.contamination import build
from zerogap.pipelines.contamination_config import ContaminationConfig
from zerogap.study.spec import SweepSpec, load_study
from zerogap.study.sweep import sweep_settings

STUDY_FLAGS = ["--strategies", "identity,all-zero", "-m", "2", "--max-new-tokens", "4",
               "--resamples", "50", "--quiet"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A contamination folder on the tiny Llama: M_cl and one M_co (1 epoch, 1 copy), arith
    with 4 test questions (2 leaked), one optimizer step per stage."""
    root = tmp_path_factory.mktemp("sweep")
    config = ContaminationConfig(
        model=str(helpers.save_tiny(root / "base")), task="arith",
        task_options={"n_train": 40, "n_test": 4, "k": 1}, train_questions=2, leaked=2,
        lora_r=4, lora_alpha=8, global_batch=2, micro_batch=2, clean_epochs=1, epochs=1,
        dtype="float32")
    build(config, root / "models")
    return root / "models"


def test_a_two_variant_sweep_builds_the_missing_one_and_fills_table_3(built, tmp_path):
    # No sweep values: the variant the folder was built with, its task and base from the manifest.
    settings = sweep_settings(SweepSpec(models=str(built)))
    assert [(s.name, s.task, s.base) for s in settings] == [
        ("e1-c1", "arith", str(built.parent / "base"))]
    assert settings[0].contaminated == str(built / "contaminated")

    out = tmp_path / "study"
    assert cli.main(["evaluate", "--models", str(built), "--sweep", "copies=1,2",
                     *STUDY_FLAGS, "--out", str(out)]) == 0

    stages = json.loads((built / "manifest.json").read_text())["stages"]
    assert {"clean", "contaminated", "contaminated-e1-c1", "contaminated-e1-c2"} == set(stages)
    assert stages["contaminated-e1-c2"]["examples"] == 2 * stages["contaminated-e1-c1"]["examples"]

    table3 = json.loads((out / "tables" / "table3.json").read_text())
    assert table3["columns"] == ["e1-c1", "e1-c2"]
    cells = {r["row"]: r["cells"] for r in table3["sections"][0]["rows"]}
    for strategy in ("identity", "all-zero"):
        assert all(cells[strategy][column] is not None for column in table3["columns"])

    first, second = json.loads((out / "study.json").read_text())["settings"]
    assert first["runs"]["clean"] == second["runs"]["clean"]  # one M_cl, sampled once
    assert first["runs"]["identity"] != second["runs"]["identity"]
    assert first["contaminated"]["fingerprint"] != second["contaminated"]["fingerprint"]
    assert first["split_file"] == str(built / "split.json")

    spec, folder = load_study(out / "study.toml")  # written back: the sweep, not its expansion
    assert folder == out and spec.settings == ()
    assert (spec.sweep.models, spec.sweep.copies) == (str(built), (1, 2))


def test_sweep_table_in_a_study_file(built, tmp_path):
    study = tmp_path / "study.toml"
    study.write_text(f'out = "{tmp_path / "out"}"\nm = 3\n[sweep]\nmodels = "{built}"\n'
                     "epochs = [1, 2]\nlimit = 4\n")
    spec, _ = load_study(study)
    assert (spec.sweep.epochs, spec.sweep.copies, spec.sweep.limit) == ((1, 2), (), 4)
    names = [(s.name, s.contaminated.rsplit("/", 1)[1]) for s in sweep_settings(spec.sweep)]
    assert names == [("e1-c1", "contaminated-e1-c1"), ("e2-c1", "contaminated-e2-c1")]
    study.write_text(f'[sweep]\nmodels = "{built}"\ncopies = [0]\n')
    with pytest.raises(ValueError, match=r"study.toml: sweep: copies must be"):
        load_study(study)


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "copies=1,2", "--out", "{out}"], "--sweep needs --models"),
    (["--models", "{empty}", "--sweep", "copies=1,2", "--out", "{out}"], "no manifest.json"),
    (["--models", "{built}", "--task", "arith", "--out", "{out}"], "drop --task"),
    (["--models", "{built}", "--sweep", "copies=2,2", "--out", "{out}"], "repeats a value"),
])
def test_bad_sweep_input_is_one_line_exit_2_and_writes_nothing(argv, message, built, tmp_path,
                                                              capsys):
    out, empty = tmp_path / "out", tmp_path / "empty"
    empty.mkdir()
    before = sorted(p.name for p in built.iterdir())
    argv = [a.format(out=out, empty=empty, built=built) for a in argv]
    assert cli.main(["evaluate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists() and sorted(p.name for p in built.iterdir()) == before
