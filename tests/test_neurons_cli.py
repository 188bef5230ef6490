"""``zerogap neurons`` on saved tiny Llama folders, then the shortcut strategy from its list."""

import json

import pytest

from zerogap import cli
from zerogap.tasks.base import Grade, Question, register_task, task_names

pytestmark = pytest.mark.usefixtures("one_thread")

ITEMS = [("2+3", "5"), ("4+4", "8"), ("1+6", "7"), ("3+3", "6")]


class Sums:
    name = "neurons-cli-sums"
    stop = ("\n",)

    def questions(self, split="test"):
        return [Question(f"test-{i}", q, a) for i, (q, a) in enumerate(ITEMS)]

    def prompt(self, question):
        return f"Q: {question.text}=?\nA:"

    def grade(self, question, response):
        ok = response.strip().startswith(question.answer)
        return Grade(question.answer if ok else None, ok)

    def config(self):
        return {}


if Sums.name not in task_names():
    register_task(Sums.name)(Sums)


def main(argv):
    saved, cli.COMMAND_MODULES = cli.COMMAND_MODULES, ("zerogap.cli.run", "zerogap.cli.neurons")
    try:
        return cli.main(argv)
    finally:
        cli.COMMAND_MODULES = saved


@pytest.fixture(scope="module")
def folders(tmp_path_factory, make_tiny_llama, smol_tokenizer):
    out = {}
    for seed, role in enumerate(("base", "con", "un")):
        folder = tmp_path_factory.mktemp(role)
        make_tiny_llama(seed).save_pretrained(folder)
        smol_tokenizer.save_pretrained(folder)
        out[role] = str(folder)
    return out


def test_neurons_then_shortcut_sampling(folders, tmp_path, capsys):
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("test-0\ntest-1\n")
    out = tmp_path / "neurons.json"
    argv = ["neurons", "--base", folders["base"], "--contaminated", folders["con"],
            "--uncontaminated", folders["un"], "--task", Sums.name, "--leaked", str(leaked),
            "--calibration-size", "2", "--block-size", "64", "--max-new-tokens", "4",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    assert sorted(map(tuple, record["neurons"])) == [(0, i) for i in range(128)]
    meta = record["meta"]
    assert meta["leaked_ids"] == ["test-0", "test-1"]
    assert meta["calibration_ids"] == ["test-2", "test-3"]
    assert meta["contaminated"]["spec"] == folders["con"] and meta["block_size"] == 64
    run_dir = tmp_path / "run"
    assert main(["sample", "--model", folders["con"], "--task", Sums.name, "-m", "2",
                 "--max-new-tokens", "4", "--strategy", "shortcut", "--set",
                 f"neurons={out}", "--set", f"base={folders['base']}", "--run-dir",
                 str(run_dir), "--quiet"]) == 0, capsys.readouterr().err
    assert (run_dir / "run.sqlite").exists()


def test_unknown_leaked_id_is_one_line_error(folders, tmp_path, capsys):
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("test-0\ntest-9\n")
    argv = ["neurons", "--base", folders["base"], "--contaminated", folders["con"],
            "--uncontaminated", folders["un"], "--task", Sums.name, "--leaked", str(leaked),
            "--out", str(tmp_path / "n.json"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "1 ids not in split 'test'" in err and "'test-9'" in err
    assert not (tmp_path / "n.json").exists()
