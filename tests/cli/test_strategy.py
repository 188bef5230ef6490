"""Every strategy from the CLI on the embedded model with a small contaminated adapter: samples
land in their run stores with their statistics, and the counts export carries each readout."""

import json

import pytest

from zerogap import cli
from zerogap.io.neurons import save_neurons
from zerogap.strategies import get_strategy
from zerogap.tasks.base import Grade, Question

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

ITEMS = [("Tom has 12 pens and gives away 5. How many are left?", "7"),
         ("Ann buys 3 bags of 4 apples. How many apples?", "12")]


class Items:
    name = "strategy-cli-items"
    stop = ("\n\n",)

    def questions(self, split="test"):
        return [Question(f"test-{i}", q, a) for i, (q, a) in enumerate(ITEMS)]

    def prompt(self, question):
        return f"Question: {question.text}\nAnswer:"

    def grade(self, question, response):
        ok = question.answer in response
        return Grade(question.answer if ok else None, ok)

    def config(self):
        return {}




def main(argv):
    saved, cli.COMMAND_MODULES = cli.COMMAND_MODULES, ("zerogap.cli.run",)
    try:
        return cli.main(argv)
    finally:
        cli.COMMAND_MODULES = saved


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    import torch
    from peft import LoraConfig, get_peft_model

    from zerogap.models import load_model

    folder = tmp_path_factory.mktemp("adapter")
    model = get_peft_model(load_model("embedded", device="cpu").model,
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.02)  # B starts at zero; make the adapter change the model
    model.peft_config["default"].base_model_name_or_path = "embedded"
    model.save_pretrained(folder)
    return folder


def test_every_strategy_runs_from_the_cli(adapter, tmp_path, capsys, register_task):
    register_task(Items)
    neurons = tmp_path / "neurons.json"
    save_neurons(neurons, [(layer, i) for layer in range(29) for i in range(0, 1536, 100)], {})
    settings = {
        "identity": [],
        "railcap": ["--set", "n=2"],
        "railcap-ban": ["--set", "n=2"],
        "ted": ["--set", "tau=1"],
        "lne-blocking": ["--set", "t_task=4"],
        "shortcut": ["--set", f"neurons={neurons}", "--set", "base=embedded", "--set", "top_k=60"],
        "all-zero": [],
    }
    counts = {}
    for name, extra in settings.items():
        run_dir = tmp_path / name
        argv = ["sample", "--model", str(adapter), "--task", Items.name, "-m", "3",
                "--max-new-tokens", "8", "--strategy", name, "--greedy-dir",
                str(tmp_path / "greedy"), "--out", str(run_dir), "--quiet", *extra]
        assert main(argv) == 0, capsys.readouterr().err
        out = tmp_path / f"{name}.jsonl"
        assert main(["runs", "export", str(run_dir), "--counts", str(out), "--jsonl",
                     str(tmp_path / f"{name}-samples.jsonl")]) == 0
        header, *counts[name] = (json.loads(line) for line in out.read_text().splitlines())
        assert header["provenance"]["run"]["strategy"] == name
        assert header["provenance"]["run"]["readout"] == get_strategy(name).readout
        samples = [json.loads(line)
                   for line in (tmp_path / f"{name}-samples.jsonl").read_text().splitlines()]
        assert len(samples) == 6
        stats_keys = {k for s in samples for k in s["stats"]}
        expected = {"railcap": {"interventions", "steps_on_trajectory"},
                    "railcap-ban": {"interventions", "steps_on_trajectory"},
                    "ted": {"ted_kept"}, "lne-blocking": {"blocking_count"}}.get(name, set())
        assert stats_keys == expected, name
    for name, rows in counts.items():
        assert sorted(r["id"] for r in rows) == ["test-0", "test-1"], name  # completion order
        assert all(0 <= r["correct"] <= r["samples"] and r["first"] in (0, 1) for r in rows)
    assert all(r["correct"] == 0 for r in counts["all-zero"])
    assert all(r["samples"] == 3 for name in ("identity", "railcap", "shortcut")
               for r in counts[name])


def test_bad_settings_fail_with_one_line_before_loading(tmp_path, capsys, register_task):
    register_task(Items)
    base = ["sample", "--model", "embedded", "--task", Items.name, "--out",
            str(tmp_path / "r"), "--quiet", "--strategy", "railcap"]
    assert main([*base, "--set", "n=four"]) == 2
    assert "--set n: must be an integer, got 'four'" in capsys.readouterr().err
    assert main([*base, "--set", "mode=clip"]) == 2
    assert "--set mode: must be one of 'cap', 'ban', got 'clip'" in capsys.readouterr().err
    assert main([*base, "--set", "temperature=1.0"]) == 2  # the run's -T is the only one
    assert "strategy railcap has no option 'temperature'" in capsys.readouterr().err
    shortcut = [*base[:-1], "shortcut", "--set", "base=embedded"]
    assert main([*shortcut, "--set", f"neurons={tmp_path / 'missing.json'}"]) == 2
    err = capsys.readouterr().err
    assert "missing.json" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
