"""``zerogap lm-eval``: the harness's own command line with ``--model zerogap`` registered,
end to end with ``zerogap score`` on the ``--output_path`` folders it writes."""

import json
import os
import subprocess
import sys

import pytest


def zerogap(*args, cwd):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "zerogap", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_railcap_in_the_harness_scores_against_a_plain_hf_run(tiny_dir, make_task, tmp_path):
    tasks = make_task(repeats=4, do_sample=True, temperature=0.7, max_gen_toks=12)
    common = ["--tasks", "gsm8k_local", "--include_path", str(tasks), "--limit", "3",
              "--device", "cpu", "--log_samples"]
    clean = zerogap("lm-eval", "run", "--model", "hf", "--model_args", f"pretrained={tiny_dir}",
                    *common, "--output_path", "out/clean", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr[-2000:]
    railcap = zerogap("lm-eval", "run", "--model", "zerogap", "--model_args",
                      f"pretrained={tiny_dir},strategy=railcap,n=3", *common,
                      "--output_path", "out/railcap", cwd=tmp_path)
    assert railcap.returncode == 0, railcap.stderr[-2000:]
    results = json.loads(next((tmp_path / "out" / "railcap").rglob("results_*.json")).read_text())
    assert results["config"]["model_args"] == {"pretrained": str(tiny_dir),
                                               "strategy": "railcap", "n": 3}

    scored = zerogap("score", "--clean", "out/clean", "--mitigated", "railcap=out/railcap",
                     "--resamples", "20", "--noise-sims", "10", "--json", "scores.json",
                     cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    assert scored.stdout.startswith("3 questions, clean m = 4")
    card = json.loads((tmp_path / "scores.json").read_text())
    assert card["inputs"]["mitigated"]["railcap"]["lmeval"] == {"repeats": 4, "grading": "anchor"}


def test_a_bad_strategy_setting_is_one_line_with_exit_code_2(tiny_dir, make_task, tmp_path):
    result = zerogap("lm-eval", "run", "--model", "zerogap", "--model_args",
                     f"pretrained={tiny_dir},strategy=railcap,mode=sideways",
                     "--tasks", "gsm8k_local", "--include_path", str(make_task()),
                     "--device", "cpu", cwd=tmp_path)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("zerogap lm-eval: error: --model_args mode:") and "sideways" in last


def test_help_says_what_zerogap_adds_then_shows_the_harnesss(tmp_path):
    result = zerogap("lm-eval", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("zerogap lm-eval: lm-evaluation-harness's own command line")
    assert "usage: lm-eval" in result.stdout and "``" not in result.stdout
