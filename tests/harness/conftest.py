"""lm-evaluation-harness set-up: a local GSM8K task (the real files, read offline through the
harness's own ``json`` dataset builder) that both ``--model hf`` and ``--model zerogap`` run on
the tiny model folder (``tiny_dir``, tests/conftest.py), offline."""

import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="needs the lmeval extra (make test installs it)")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """No hub: the task reads local files, and nothing may try the network."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def task_yaml(folder: Path, gsm8k_dir: Path, *, name: str = "gsm8k_local", repeats: int = 1,
              do_sample: bool = False, temperature: float = 0.0, max_gen_toks: int = 16,
              num_fewshot: int = 0) -> Path:
    """Write a generate_until GSM8K task config into ``folder`` (for ``--include_path``)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "task": name, "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"train": str(gsm8k_dir / "train.jsonl"),
                                          "test": str(gsm8k_dir / "test.jsonl")}},
        "test_split": "test", "fewshot_split": "train", "output_type": "generate_until",
        "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_target": "{{answer}}",
        "num_fewshot": num_fewshot, "repeats": repeats,
        "generation_kwargs": {"until": ["Question:", "\n\n"], "do_sample": do_sample,
                              "temperature": temperature, "max_gen_toks": max_gen_toks},
        "filter_list": [{"name": "strict-match", "filter": [
            {"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
            {"function": "take_first"}]}],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean",
                         "higher_is_better": True}],
    }
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return folder


@pytest.fixture
def make_task(tmp_path, gsm8k_dir):
    """``make_task(**settings)`` -> an ``--include_path`` folder holding task ``gsm8k_local``."""
    count = iter(range(100))
    return lambda **kw: task_yaml(tmp_path / f"tasks-{next(count)}", gsm8k_dir, **kw)
