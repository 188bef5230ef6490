"""The copy-paste task YAML of docs/lm-eval.md runs as printed: m = 50 sampled responses per
question from the local GSM8K files, their paths relative to the folder the harness runs in."""

import re
from pathlib import Path

import lm_eval
from lm_eval.tasks import TaskManager

import zerogap.harness  # noqa: F401  (registers --model zerogap)

DOC = Path(__file__).resolve().parents[2] / "docs" / "lm-eval.md"


def test_the_documented_task_yaml_gives_50_samples_per_question(tiny_dir, gsm8k_dir, tmp_path,
                                                                monkeypatch, one_thread):
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "gsm8k_sampled.yaml").write_text(block)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "gsm8k").symlink_to(gsm8k_dir)
    monkeypatch.chdir(tmp_path)
    manager = TaskManager(include_path="tasks", include_defaults=False)
    # Zero-shot and four tokens: the tiny model's context cannot hold eight byte-level
    # exemplars, and the response length is not what is checked here.
    out = lm_eval.simple_evaluate(model="zerogap", model_args=f"pretrained={tiny_dir}",
                                  tasks=["gsm8k_sampled"], task_manager=manager, limit=2,
                                  num_fewshot=0, gen_kwargs={"max_gen_toks": 4},
                                  log_samples=True, device="cpu")
    samples = out["samples"]["gsm8k_sampled"]
    assert sorted(s["doc_id"] for s in samples) == [0, 1]
    assert all(len(s["resps"][0]) == 50 for s in samples)
    assert out["configs"]["gsm8k_sampled"]["generation_kwargs"]["temperature"] == 0.7
