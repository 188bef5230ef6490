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


def neurons_argv(folders, leaked, out, *extra):
    """Two leaked items, two calibration items, 4 causal blocks of 32: 22 greedy decodes."""
    return ["neurons", "--base", folders["base"], "--contaminated", folders["con"],
            "--clean", folders["un"], "--task", Sums.name, "--split-file", str(leaked),
            "--calibration-size", "2", "--neuron-block", "32", "--max-new-tokens", "4",
            "--out", str(out), "--quiet", *extra]


@pytest.fixture(scope="module")
def leaked(tmp_path_factory):
    path = tmp_path_factory.mktemp("leaked") / "leaked.txt"
    path.write_text("test-0\ntest-1\n")
    return path


@pytest.fixture(scope="module")
def ranked(folders, leaked, tmp_path_factory):
    """An uninterrupted ``zerogap neurons`` run: its output file."""
    out = tmp_path_factory.mktemp("ranked") / "neurons.json"
    assert main(neurons_argv(folders, leaked, out)) == 0
    return out


def test_neurons_then_shortcut_sampling(folders, ranked, tmp_path, capsys, monkeypatch):
    from zerogap.io import neurons

    out = ranked
    record = json.loads(out.read_text())
    assert sorted(map(tuple, record["neurons"])) == [(0, i) for i in range(128)]
    meta = record["meta"]
    # No --limit: the whole split is what the list is evaluated on, so the neurons are located
    # on every leaked question and scored on leaked and unleaked ones in turn, in sample.
    assert meta["leaked_ids"] == ["test-0", "test-1"]
    assert meta["calibration_ids"] == ["test-0", "test-2"]
    assert meta["calibration_disjoint"] is False
    assert meta["contaminated"]["spec"] == folders["con"] and meta["block_size"] == 32
    assert not out.with_name(out.name + ".journal.jsonl").exists()
    run_dir = tmp_path / "run"
    reads = []
    load = neurons.load_neurons
    monkeypatch.setattr(neurons, "load_neurons", lambda path: reads.append(path) or load(path))
    assert main(["sample", "--model", folders["con"], "--task", Sums.name, "-m", "2",
                 "--max-new-tokens", "4", "--strategy", "shortcut", "--set",
                 f"neurons={out}", "--set", f"base={folders['base']}", "--out",
                 str(run_dir), "--quiet"]) == 0, capsys.readouterr().err
    assert (run_dir / "run.sqlite").exists()
    assert reads == [str(out)]  # checked before the model loads, and that list is patched


def test_a_limit_locates_and_scores_on_the_split_past_the_evaluated_questions(
        folders, tmp_path, capsys):
    """``--limit 2`` evaluates test-0 (leaked) and test-2 (unleaked, the split.json's own
    list), so the neurons are located on test-1 and scored on test-1 and test-3: none of them
    evaluated, half leaked; the command says so."""
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ["test-0", "test-1"],
                                 "unleaked": ["test-2", "test-3"]}))
    out = tmp_path / "neurons.json"
    assert main(neurons_argv(folders, split, out, "--limit", "2")) == 0
    assert "calibration questions: disjoint from the evaluated questions" in \
        capsys.readouterr().out
    meta = json.loads(out.read_text())["meta"]
    assert meta["leaked_ids"] == ["test-1"]
    assert meta["calibration_ids"] == ["test-1", "test-3"]
    assert not {"test-0", "test-2"} & {*meta["leaked_ids"], *meta["calibration_ids"]}
    assert meta["calibration_disjoint"] is True
    # a limit the split cannot fill half and half is refused before any model loads
    assert main(neurons_argv(folders, split, tmp_path / "n.json", "--limit", "6")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--limit: limit 6 needs 3 leaked and 3 unleaked questions; the split has 2 and 2" in err
    # so is a split.json whose sides share a question
    split.write_text(json.dumps({"leaked": ["test-0", "test-1"], "unleaked": ["test-1"]}))
    assert main(neurons_argv(folders, split, tmp_path / "n.json")) == 2
    assert "1 ids are both leaked and unleaked (first: 'test-1')" in capsys.readouterr().err
    assert not (tmp_path / "n.json").exists()


def test_unknown_leaked_id_is_one_line_error(folders, tmp_path, capsys):
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("test-0\ntest-9\n")
    argv = ["neurons", "--base", folders["base"], "--contaminated", folders["con"],
            "--clean", folders["un"], "--task", Sums.name, "--split-file", str(leaked),
            "--out", str(tmp_path / "n.json"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "1 ids not in split 'test'" in err and "'test-9'" in err
    assert not (tmp_path / "n.json").exists()



@pytest.fixture
def interrupt(monkeypatch):
    """``interrupt(k)``: the next runs stop (as Ctrl-C would) before their (k+1)-th question
    result; returns the list of results recorded since."""
    from zerogap.pipelines import neurons

    record = neurons.Journal.record

    def after(k):
        kept = []

        def stop(self, *result):
            if len(kept) == k:
                raise KeyboardInterrupt
            kept.append(result)
            record(self, *result)

        monkeypatch.setattr(neurons.Journal, "record", stop)
        return kept

    return after


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_same_neurons(folders, leaked, ranked, tmp_path,
                                                         capsys, interrupt):
    out = tmp_path / "resumed.json"
    journal = tmp_path / "resumed.json.journal.jsonl"
    interrupt(11)
    assert main(neurons_argv(folders, leaked, out)) == 130
    assert not out.exists()
    assert len(journal.read_text().splitlines()) == 2 + 11  # header, models, 11 results
    with journal.open("a") as f:
        f.write('{"pass": "base+0:32-63", "id": "te')  # the half line a killed writer leaves
    decoded = interrupt(10**6)
    assert main(neurons_argv(folders, leaked, out)) == 0, capsys.readouterr().err
    assert "resuming from" in capsys.readouterr().err
    assert len(decoded) == 22 - 11  # only what the journal lacked
    a, b = (json.loads(p.read_text()) for p in (ranked, out))
    assert b["neurons"] == a["neurons"] and b["meta"]["accuracy"] == a["meta"]["accuracy"]
    assert not journal.exists()


def test_a_journal_of_other_options_is_refused_before_any_model_loads(
        folders, leaked, tmp_path, capsys, interrupt, monkeypatch):
    out = tmp_path / "n.json"
    interrupt(3)
    assert main(neurons_argv(folders, leaked, out)) == 130
    # transformers' weight-loading bars may precede it (whether they show depends on earlier
    # tests' settings), so only the last line is the command's own
    assert capsys.readouterr().err.splitlines()[-1] == "zerogap neurons: interrupted"
    journal = tmp_path / "n.json.journal.jsonl"
    kept = journal.read_bytes()

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("zerogap.models.load_model", no_load)
    assert main(neurons_argv(folders, leaked, out, "--neuron-block", "64")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another configuration (differs in block_size)" in err
    assert journal.read_bytes() == kept and not out.exists()


def test_location_reports_every_decode_of_every_pass(make_tiny_llama, smol_tokenizer):
    """The progress callback advances question by question through each greedy pass (two
    leaked decodes, then 2 unpatched and 2 x 4 patched passes over 2 calibration items), so a
    long causal scoring never sits on one block; the total is known from the first call."""
    from zerogap.pipelines.neurons import locate_neurons

    task = Sums()
    questions = task.questions()
    base, con, un = (make_tiny_llama(seed) for seed in range(3))
    calls = []
    locate_neurons(base, con, un, smol_tokenizer, task, questions[:2], questions[2:],
                   block_size=32, max_new_tokens=4,
                   progress=lambda event: calls.append((event.done, event.total)))
    assert calls[0] == (0, 22) and {total for _, total in calls} == {22}
    assert [done for done, _ in calls] == list(range(23))


def test_a_block_size_that_does_not_divide_the_width_is_stated_and_used(folders, leaked,
                                                                        ranked, tmp_path,
                                                                        capsys):
    """``--neuron-block 30`` on an MLP width of 128: the run says, before the search and under
    --quiet, that it uses blocks of 32 (the nearest divisor), and ranks as blocks of 32 do."""
    out = tmp_path / "neurons.json"
    assert main(neurons_argv(folders, leaked, out, "--neuron-block", "30")) == 0
    err = capsys.readouterr().err
    assert ("zerogap neurons: note: blocks of 32 neurons, the divisor of the MLP width 128 "
            "nearest to --neuron-block 30") in err
    got, want = json.loads(out.read_text()), json.loads(ranked.read_text())
    assert got["neurons"] == want["neurons"] and got["meta"]["block_size"] == 32
