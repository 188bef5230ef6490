"""The lm-evaluation-harness task zerogap ships (examples/lm-eval/gsm8k_sampled.yaml) is the
one docs/lm-eval.md prints, and with the page's offline dataset lines it runs as documented: m =
50 sampled responses per question from local GSM8K files, their paths relative to the folder
the harness runs in."""

import re
from pathlib import Path

import lm_eval
from lm_eval.tasks import TaskManager

import zerogap.harness  # noqa: F401  (registers --model zerogap)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "lm-eval.md"
SHIPPED = ROOT / "examples" / "lm-eval" / "gsm8k_sampled.yaml"
HUB_LINES = "dataset_path: openai/gsm8k\ndataset_name: main\n"


def test_the_page_prints_the_shipped_task_file():
    shipped, offline = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)[:2]
    assert shipped == SHIPPED.read_text()
    assert HUB_LINES in shipped and offline.startswith("dataset_path: json\n")


def test_the_shipped_folder_holds_the_task_the_examples_name():
    manager = TaskManager(include_path=str(SHIPPED.parent), include_defaults=False)
    assert "gsm8k_sampled" in manager.all_tasks


def test_the_documented_task_with_its_offline_lines_gives_50_samples_per_question(
        tiny_dir, gsm8k_dir, tmp_path, monkeypatch, one_thread):
    _, offline = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)[:2]
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "gsm8k_sampled.yaml").write_text(
        SHIPPED.read_text().replace(HUB_LINES, offline))
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
