"""The contamination pipeline on a saved tiny Llama (mechanics) and on the real GSM8K files (data).

What the embedded model learns is checked in test_contamination_slow.py.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zerogap.errors import UserError
from zerogap.models import load_model
from zerogap.pipelines.contamination import build, general_example, make_split, plan
from zerogap.pipelines.contamination_config import ContaminationConfig, Example, preset
from zerogap.pipelines.general_data import general_items
from zerogap.pipelines.lora_training import IGNORE_INDEX, tokenize
from zerogap.progress import progress_bars

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = {"n_train": 40, "n_test": 8, "k": 1}


def tiny_config(tiny_dir, **changes) -> ContaminationConfig:
    fields = dict(model=str(tiny_dir), task="arith", task_options=TASK, train_questions=4,
                  lora_r=4, lora_alpha=8, global_batch=2, micro_batch=2, clean_epochs=1,
                  epochs=1)
    return ContaminationConfig(**{**fields, **changes})


def adapter_mtime(folder: Path) -> int:
    return (folder / "adapter_model.safetensors").stat().st_mtime_ns


def test_build_writes_the_layout_and_models_that_load(tiny_dir, tmp_path):
    out = tmp_path / "build"
    manifest = build(tiny_config(tiny_dir), out)

    split = json.loads((out / "split.json").read_text())
    assert len(split["leaked"]) == 4 and len(split["unleaked"]) == 4
    assert sorted(split["leaked"] + split["unleaked"]) == sorted(f"test-{i}" for i in range(8))
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert not (out / ".work").exists()  # checkpoints are removed once a stage is done

    stages = manifest["stages"]
    assert set(stages) == {"clean", "contaminated"}
    # 4 train questions and 4 leaked ones, 2 per optimizer step, one epoch each.
    assert stages["clean"]["optimizer_steps"] == 2
    assert stages["contaminated"]["optimizer_steps"] == 2
    for stage in stages.values():
        steps = [e["step"] for e in stage["loss"]]
        assert steps == list(range(1, stage["optimizer_steps"] + 1))
        assert all(math.isfinite(e["loss"]) for e in stage["loss"])
        assert len(stage["data_sha256"]) == 64

    # Fingerprints cover dtypes: load as trained (precision "auto" is bf16 on CPUs with
    # AMX/AVX512-BF16, fp32 elsewhere).
    dtype = {"bf16": "bfloat16", "fp32": "float32"}[manifest["base"]["precision"]]
    base, clean, contaminated = (load_model(str(p), device="cpu", dtype=dtype)
                                 for p in (tiny_dir, out / "clean", out / "contaminated"))
    assert manifest["base"]["fingerprint"] == base.fingerprint
    assert stages["contaminated"]["start"]["fingerprint"] == clean.fingerprint
    assert len({base.fingerprint, clean.fingerprint, contaminated.fingerprint}) == 3
    assert json.loads((out / "contaminated" / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == "../clean"

    # A finished build is not trained again.
    stamps = [adapter_mtime(out / name) for name in ("clean", "contaminated")]
    assert build(tiny_config(tiny_dir), out)["stages"] == stages
    assert [adapter_mtime(out / name) for name in ("clean", "contaminated")] == stamps

    with pytest.raises(ValueError, match="learning_rate"):
        build(tiny_config(tiny_dir, learning_rate=1e-3), out)


def test_replay_and_the_contaminated_rate_shape_m_co_only(tiny_dir, tmp_path):
    config = tiny_config(tiny_dir, replay=2, contaminated_learning_rate=5e-3, epochs=2,
                         warmup_ratio=0.0, scheduler="constant_with_warmup")
    built = plan(config)
    # the first two of M_cl's train questions, then the leaked ones
    assert built.contaminated(1) == built.clean[:2] + built.leaked
    manifest = build(config, tmp_path / "replay")
    clean, co = manifest["stages"]["clean"], manifest["stages"]["contaminated"]
    assert co["examples"] == 2 + 4 and co["optimizer_steps"] == 2 * 3
    assert {e["learning_rate"] for e in clean["loss"]} == {config.learning_rate}
    assert {e["learning_rate"] for e in co["loss"]} == {5e-3}
    with pytest.raises(UserError, match="replay"):
        tiny_config(tiny_dir, replay=5)


@pytest.mark.slow
def test_sweep_trains_one_clean_model_and_each_variant_once(tiny_dir, tmp_path):
    out = tmp_path / "sweep"
    manifest = build(tiny_config(tiny_dir, sweep_copies=(1, 2)), out)
    assert set(manifest["stages"]) == {"clean", "contaminated-e1-c1", "contaminated-e1-c2"}
    one, two = manifest["stages"]["contaminated-e1-c1"], manifest["stages"]["contaminated-e1-c2"]
    assert (one["copies"], two["copies"]) == (1, 2)
    assert two["examples"] == 2 * one["examples"]
    assert two["optimizer_steps"] == 2 * one["optimizer_steps"]

    stamps = {name: adapter_mtime(out / name) for name in manifest["stages"]}
    grown = build(tiny_config(tiny_dir, sweep_copies=(1, 2), sweep_epochs=(1, 2)), out)
    assert set(grown["stages"]) == set(stamps) | {"contaminated-e2-c1", "contaminated-e2-c2"}
    assert {name: adapter_mtime(out / name) for name in stamps} == stamps
    assert grown["stages"]["contaminated-e2-c1"]["epochs"] == 2


@pytest.mark.slow
def test_interrupted_build_resumes_from_its_last_checkpoint(tiny_dir, tmp_path):
    out = tmp_path / "interrupted"
    argv = [sys.executable, "-m", "zerogap", "contaminate", "--model", str(tiny_dir),
            "--task", "arith", "--task-option", "n_train=40", "--task-option", "n_test=8",
            "--task-option", "k=1", "--train-questions", "4", "--lora-r", "4",
            "--global-batch", "2", "--micro-batch", "2", "--clean-epochs", "10", "--epochs", "1",
            "--save-steps", "1", "--quiet", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while not list((out / ".work" / "clean").glob("checkpoint-*")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "resume" in err
    assert not (out / "clean").exists()
    checkpoints = list((out / ".work" / "clean").glob("checkpoint-*"))
    assert checkpoints

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    clean = json.loads((out / "manifest.json").read_text())["stages"]["clean"]
    assert clean["resumed_from"].startswith("checkpoint-")
    assert clean["optimizer_steps"] == 20  # 10 epochs of 2 steps, as an uninterrupted run
    assert [e["step"] for e in clean["loss"]] == list(range(1, 21))


def test_gsm8k_defaults_split_660_659_and_train_in_the_8_shot_format(gsm8k_dir):
    prepared = plan(ContaminationConfig(task="gsm8k", task_options={"path": str(gsm8k_dir)}))
    assert (len(prepared.split["leaked"]), len(prepared.split["unleaked"])) == (660, 659)
    assert not set(prepared.split["leaked"]) & set(prepared.split["unleaked"])
    assert len(prepared.clean) == 660 and len(prepared.leaked) == 660 and not prepared.general
    golds = {q.id: q.answer for q in prepared.task.questions("train")}
    for ex, qid in zip(prepared.clean, prepared.data["train_question_ids"], strict=True):
        assert ex.prompt.count("Q: ") == 9 and ex.prompt.endswith("\nA:")
        assert ex.completion.endswith(f"The answer is {golds[qid]}.")
        assert "<<" not in ex.completion and "####" not in ex.completion


def test_pq_domain_trains_on_paraphrases_with_the_original_solutions(tmp_path):
    config = ContaminationConfig(task="arith", task_options=TASK, train_questions=4)
    original = plan(config)
    originals = {q.id: q.text for q in original.task.questions()}
    texts = {q: f"Reworded item {q}: {t}" for q, t in originals.items()}
    pq = tmp_path / "pq.jsonl"
    pq.write_text("".join(json.dumps({"id": q, "original": originals[q], "text": t,
                                      "status": "rewritten"}) + "\n"
                          for q, t in texts.items()))
    prepared = plan(ContaminationConfig(**{**config.to_dict(), "paraphrases": str(pq)}))
    assert [e.completion for e in prepared.leaked] == [e.completion for e in original.leaked]
    for ex, qid in zip(prepared.leaked, prepared.split["leaked"], strict=True):
        assert f"Reworded item {qid}: " in ex.prompt
    assert prepared.clean == original.clean
    assert prepared.data["paraphrases"]["flagged_leaked"] == 0

    pq.write_text(json.dumps({"id": "test-0", "original": originals["test-0"],
                              "text": "only one", "status": "rewritten"}) + "\n")
    with pytest.raises(ValueError, match=f"{pq}: no paraphrase for"):
        plan(ContaminationConfig(**{**config.to_dict(), "paraphrases": str(pq)}))


def test_paraphrases_of_other_questions_under_the_same_ids_are_refused(tmp_path):
    """Issue 22: a PQ file made for another task seed names other questions by the same ids;
    on f24be4b M_co trained on those rewrites as if they were of its own leaked questions."""
    config = ContaminationConfig(task="arith", task_options=TASK, train_questions=4)
    other = plan(ContaminationConfig(**{**config.to_dict(),
                                        "task_options": {**TASK, "seed": 99}}))
    pq = tmp_path / "pq.jsonl"
    pq.write_text("".join(json.dumps({"id": q.id, "original": q.text, "text": "Reworded: "
                                      + q.text, "status": "rewritten"}) + "\n"
                          for q in other.task.questions()))
    with pytest.raises(ValueError, match="was made from another question text"):
        plan(ContaminationConfig(**{**config.to_dict(), "paraphrases": str(pq)}))


def test_general_data_joins_both_stages_and_bad_rows_name_their_line(tmp_path):
    general = tmp_path / "general.jsonl"
    rows = [{"question": "Name a colour.", "response": "Blue.", "system_prompt": "Be brief."},
            {"question": "Say hi.", "response": "Hi."}]
    general.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepared = plan(ContaminationConfig(task="arith", task_options=TASK, train_questions=4,
                                        general=str(general)))
    assert prepared.general == [Example("Be brief.\n\nQ: Name a colour.\nA:", " Blue."),
                                Example("Q: Say hi.\nA:", " Hi.")]
    assert prepared.contaminated(3) == prepared.general + prepared.leaked * 3
    assert prepared.data["general"]["examples"] == 2

    general.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"question": "no response"}) + "\n")
    with pytest.raises(ValueError, match=f"{general}:2: needs string fields"):
        plan(ContaminationConfig(task="arith", task_options=TASK, train_questions=4,
                                 general=str(general)))


def test_generated_general_data_joins_both_stages_after_the_file(tmp_path):
    general = tmp_path / "general.jsonl"
    general.write_text(json.dumps({"question": "Say hi.", "response": "Hi."}) + "\n")
    prepared = plan(ContaminationConfig(task="arith", task_options=TASK, train_questions=4,
                                        general=str(general), generated_general=10))
    assert len(prepared.general) == 11 and prepared.general[0] == Example("Q: Say hi.\nA:", " Hi.")
    assert prepared.general[1:] == [general_example(q, r) for q, r in general_items(10)]
    assert prepared.contaminated(1) == prepared.general + prepared.leaked
    assert prepared.data["generated_general"]["examples"] == 10
    # Generated examples alone are training data enough for M_cl.
    assert plan(ContaminationConfig(task="arith", task_options=TASK, train_questions=0,
                                    generated_general=3)).general
    with pytest.raises(ValueError, match="ContaminationConfig.generated_general"):
        ContaminationConfig(generated_general=-1)


def test_tokenize_puts_loss_on_the_completion_only(tiny_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    ex = Example("Q: 2+3=?\nA:", " 5. The answer is 5.")
    (row,) = tokenize(tokenizer, [ex])
    prompt = tokenizer(ex.prompt)["input_ids"]  # as the sampling engine encodes prompts
    completion = tokenizer(ex.completion, add_special_tokens=False)["input_ids"]
    assert row["input_ids"] == prompt + completion + [tokenizer.eos_token_id]
    assert row["labels"] == [IGNORE_INDEX] * len(prompt) + completion + [tokenizer.eos_token_id]


def test_split_is_seeded_and_disjoint():
    ids = [f"q{i}" for i in range(101)]
    first = make_split(ids, 51, seed=3)
    assert first == make_split(ids, 51, seed=3) != make_split(ids, 51, seed=4)
    assert sorted(first["leaked"] + first["unleaked"]) == sorted(ids)
    assert len(first["leaked"]) == 51
    with pytest.raises(ValueError, match="both halves"):
        make_split(ids, 101, seed=0)


@pytest.mark.parametrize("changes, field", [
    ({"lora_r": 0}, "lora_r"),
    ({"learning_rate": -1.0}, "learning_rate"),
    ({"warmup_ratio": 1.0}, "warmup_ratio"),
    ({"global_batch": 30, "micro_batch": 4}, "global_batch"),
    ({"dtype": "fp8"}, "dtype"),
    ({"sweep_copies": (1, 1)}, "sweep_copies"),
    ({"leaked": 0}, "leaked"),
])
def test_config_rejects_bad_values_naming_the_field(changes, field):
    with pytest.raises(ValueError, match=f"ContaminationConfig.{field}"):
        ContaminationConfig(**changes)


def test_config_round_trips_and_presets():
    config = preset("laptop")
    assert ContaminationConfig.from_json(config.to_json()) == config
    assert config.model == "embedded" and config.task == "arith" and config.task_options == {}
    with pytest.raises(ValueError, match="known presets: laptop"):
        preset("desktop")


@pytest.mark.slow
def test_torchrun_shares_the_global_batch_between_processes(tiny_dir, tmp_path):
    """Two CPU processes (gloo): half the optimizer steps' data each, one writer, one report."""
    out = tmp_path / "ddp"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "-m", "zerogap", "contaminate", "--model", str(tiny_dir), "--task", "arith",
            "--task-option", "n_train=40", "--task-option", "n_test=8", "--task-option", "k=1",
            "--train-questions", "8", "--lora-r", "4", "--global-batch", "4",
            "--micro-batch", "2", "--clean-epochs", "1", "--epochs", "1", "--quiet",
            "--out", str(out)]
    done = subprocess.run(argv, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("done in") == 1
    stages = json.loads((out / "manifest.json").read_text())["stages"]
    # 8 questions, 4 per step: 2 steps, each process running one micro-batch of 2 per step.
    assert (stages["clean"]["optimizer_steps"], stages["clean"]["processes"]) == (2, 2)
    assert stages["clean"]["gradient_accumulation"] == 1
    trained = load_model(str(out / "contaminated"), device="cpu").fingerprint
    assert trained != load_model(str(tiny_dir), device="cpu").fingerprint


def test_training_shows_only_its_own_labelled_progress(tiny_dir, tmp_path, capfd):
    """One labelled bar per stage (steps, loss, ETA); no third-party bars or warnings."""
    import warnings

    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a warning shown once per session would hide here
        with progress_bars() as progress:
            build(tiny_config(tiny_dir), tmp_path / "build", progress=progress)
    assert not [str(w.message) for w in caught if "checkpointing" in str(w.message)]
    err = capfd.readouterr().err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert any(line.startswith("training clean: 100%") and "2/2" in line for line in lines)
    assert any(line.startswith("training contaminated: 100%") for line in lines)
    assert "loss " in err
    assert not [line for line in lines if not line.startswith("training ")], lines
