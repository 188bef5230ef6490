"""The examples in ``examples/``: a third-party logits strategy, backend, study job kind and
study executor, each found through its package's entry point (a dist-info written from its
``pyproject.toml``, as pip would install it; no network), run end to end in a fresh
interpreter."""

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
    for example in ("no-stutter", "generate-backend", "answer-lengths", "serial-executor"):
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


def _study_file(path: Path, models: dict, **keys: str) -> Path:
    """A reduced study of the tiny models (identity, TED over its samples, RailCap) with
    ``keys`` (TOML values) added at the top level."""
    top = "".join(f"{k} = {v}\n" for k, v in keys.items())
    path.write_text(
        f'{top}strategies = ["identity", "ted", "railcap"]\nm = 4\nmax_new_tokens = 6\n'
        f'resamples = 200\ncalibration_size = 2\n[[setting]]\nname = "tiny-toy"\n'
        f'clean = "{models["clean"]}"\ncontaminated = "{models["contaminated"]}"\n'
        f'base = "{models["clean"]}"\ntask = "toy-arith"\nsplit_file = "{models["split"]}"\n')
    return path


def test_the_example_job_kind_and_executor_run_a_study(site, study_models, tmp_path):
    """The study adds the example's job to its setting and the example executor runs every job
    once, in an order where each comes after the jobs whose output it reads."""
    log, out = tmp_path / "jobs.log", tmp_path / "study"
    study = _study_file(tmp_path / "study.toml", study_models, jobs='["answer-lengths"]',
                        executor=f'"serial:log={log}"')
    ran = zerogap(site, "evaluate", str(study), "--out", str(out), "--quiet", "--dtype",
                  "float32")
    assert ran.returncode == 0, ran.stderr
    record = json.loads((out / "study.json").read_text())
    assert (record["executor"], record["workers"]) == ("serial", 1)
    entry = record["settings"][0]
    # every job ran once, the greedy decodes before the runs that read them, the added job last
    labels = [line.split("\t")[0] for line in log.read_text().splitlines()]
    assert len(labels) == len(set(labels)) and labels[-1] == "tiny-toy answer lengths"
    assert labels.index("contaminated greedy") < labels.index("identity") < labels.index("ted")
    assert {"clean", "identity", "ted", "railcap", "design checks"} <= set(labels)
    # the added job's file: each scored run's mean response length, as its store holds it
    lengths = json.loads((out / "answer-lengths" / "tiny-toy.json").read_text())
    scored = {k: v for k, v in entry["runs"].items() if k not in ("greedy", "clean greedy")}
    assert lengths.keys() == scored.keys()
    for label, run in scored.items():
        assert set(lengths[label]) == {row[0] for row in helpers.stored_samples(out / run)}
        assert all(0 < n <= 6 for n in lengths[label].values())
    assert all(set(lengths[k]) == {f"test-{i}" for i in range(10)}
               for k in ("clean", "identity", "railcap"))
    with RunStore(out / scored["identity"], create=False) as store:
        rows = [r for r in store.samples() if r.question_id == "test-0"]
    assert lengths["identity"]["test-0"] == sum(r.n_tokens for r in rows) / len(rows)


@pytest.mark.parametrize(("keys", "message"), [
    ({"jobs": '["greedy"]'}, "job kind 'greedy' is one the study plans itself"),
    ({"jobs": '["lengths"]'}, "unknown job kind 'lengths'"),
    ({"executor": '"serial:logs=x"'}, "executor serial has no option 'logs'; known: log"),
])
def test_a_study_refuses_a_kind_or_executor_option_it_does_not_know(site, study_models,
                                                                    tmp_path, keys, message):
    out = tmp_path / "study"
    ran = zerogap(site, "evaluate", str(_study_file(tmp_path / "study.toml", study_models,
                                                    **keys)), "--out", str(out))
    assert ran.returncode == 2 and message in ran.stderr and len(ran.stderr.splitlines()) == 1
    assert not out.exists()
