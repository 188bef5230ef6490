"""The examples in ``examples/``: a third-party logits strategy and a third-party backend, each
found through its package's entry point (a dist-info written from its ``pyproject.toml``, as pip
would install it; no network), run end to end in a fresh interpreter."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import helpers  # tests/helpers.py, on sys.path through tests/conftest.py
from zerogap.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HELPERS = ROOT / "tests"  # helpers.py: the byte tokenizer, the tiny Llama, toy-arith


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site-packages")
    for example in ("no-stutter", "generate-backend"):
        helpers.install_example(EXAMPLES / example, folder)
    return folder


def zerogap(site: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter that sees the installed examples (and toy-arith)."""
    code = "import sys, helpers; from zerogap import cli; sys.exit(cli.main(sys.argv[1:]))"
    path = f"{ROOT / 'src'}:{site}:{HELPERS}"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={"PYTHONPATH": path, "HOME": str(site)}, timeout=600)


def test_the_example_strategy_is_listed_and_its_settings_are_checked(site):
    listed = zerogap(site, "strategy", "list")
    assert listed.returncode == 0, listed.stderr
    assert "no-stutter" in listed.stdout and "railcap" in listed.stdout
    shown = zerogap(site, "strategy", "show", "no-stutter")
    assert shown.returncode == 0 and "window" in shown.stdout


def test_the_example_strategy_samples_no_token_of_its_window(site, tmp_path):
    """By construction no sampled token equals one of the two before it."""
    script = """
import json, helpers
from zerogap.engine.base import SamplingSpec
from zerogap.engine.hf import HFBackend
from zerogap.strategies import PrepareContext, get_strategy
spec = get_strategy("no-stutter", {"window": 2}).prepare(PrepareContext(m=6))
out = HFBackend(helpers.tiny_model(), helpers.byte_tokenizer()).sample(
    ["Q: 1+1=?\\nA:", "Q: 9+9=?\\nA:"], SamplingSpec(m=6, temperature=2.0, max_new_tokens=40),
    question_ids=["a", "b"], intervention=spec.logits)
print(json.dumps([g.token_ids for q in out for g in q]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={"PYTHONPATH": f"{ROOT / 'src'}:{site}:{HELPERS}"}, timeout=600,
                          check=True)
    samples = json.loads(done.stdout)
    assert len(samples) == 12 and sum(map(len, samples)) > 12 * 5
    repeats = [(s, t) for s in samples for t in range(1, len(s))
               if s[t] in s[max(0, t - 2):t]]
    assert repeats == []


def test_the_example_backend_samples_a_run_and_refuses_what_it_cannot_run(site, tmp_path):
    model_dir = helpers.save_tiny(tmp_path / "tiny")
    common = ("--model", str(model_dir), "--task", "toy-arith", "--limit", "3",
              "--max-new-tokens", "12", "-m", "4", "--dtype", "float32", "--quiet")
    ran = zerogap(site, "sample", *common, "--backend", "hf-generate",
                  "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    with RunStore(tmp_path / "run", create=False) as store:
        config = store.config()
        samples = list(store.samples())
    assert config["backend"] == "hf-generate" and config["noise"] == "torch-seed-per-question-v1"
    assert sorted({r.question_id for r in samples}) == ["test-0", "test-1", "test-2"]
    assert len(samples) == 12 and all(r.n_tokens <= 12 for r in samples)
    refused = zerogap(site, "sample", *common, "--backend", "hf-generate", "--strategy",
                      "no-stutter", "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2
    assert "strategy no-stutter needs logits support" in refused.stderr
    assert not (tmp_path / "refused").exists()
