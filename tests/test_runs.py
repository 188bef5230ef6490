"""Runs through the CLI into real run stores: resume after SIGKILL, refusals, exports."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import (
    RUN_SCRIPT,
    SRC,
    count_stored,
    run_main,
    sample_args,
    stored_samples,
    tree_digest,
)
from zerogap.store import DB_NAME


def test_killed_and_resumed_run_equals_uninterrupted(tiny_dir, tmp_path):
    reference = tmp_path / "reference"
    assert run_main(sample_args(tiny_dir, reference, "--batch-size", "64")) == 0
    expected = stored_samples(reference)
    assert len(expected) == 10 * 6

    run_dir = tmp_path / "killed"
    rng = random.Random(0)
    kills = 0
    for _ in range(3):
        before = count_stored(run_dir)
        proc = subprocess.Popen([sys.executable, "-c", RUN_SCRIPT,
                                 *sample_args(tiny_dir, run_dir, "--batch-size", "7")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.monotonic() + 60
        while (proc.poll() is None and count_stored(run_dir) <= before
               and time.monotonic() < deadline):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        stored = stored_samples(run_dir)
        assert len(stored) % 6 == 0  # whole questions only
        assert stored == [row for row in expected if row[:2] in {r[:2] for r in stored}]
    assert kills >= 1
    assert run_main(sample_args(tiny_dir, run_dir, "--batch-size", "7")) == 0
    assert stored_samples(run_dir) == expected


def test_export_show_and_greedy(tiny_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "3")) == 0
    assert run_main(["greedy", "--model", str(tiny_dir), "--task", "toy-arith", "--limit", "2",
                 "--max-new-tokens", "8", "--out", str(run_dir), "--quiet",
                 "--task-option", "stop=Q:"]) == 0
    assert run_main(["runs", "export", str(run_dir), "--counts", str(tmp_path / "c.jsonl"),
                 "--jsonl", str(tmp_path / "s.jsonl")]) == 0
    header, *counts = (json.loads(line) for line in (tmp_path / "c.jsonl").read_text()
                                                      .splitlines())
    assert header["provenance"]["path"] == str(run_dir)
    assert header["provenance"]["run"]["task"] == "toy-arith"
    assert header["provenance"]["run"]["readout"] == "plain"
    assert [c["id"] for c in counts] == ["test-0", "test-1", "test-2"]
    assert all(c["samples"] == 6 and 0 <= c["correct"] <= 6 for c in counts)
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 18
    capsys.readouterr()
    assert run_main(["runs", "show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "questions done     3" in shown and "samples            18" in shown
    assert "greedy decodes     2" in shown and "backend            \"hf\"" in shown
    # extending the run with a larger limit samples only the new questions
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "4")) == 0
    assert "sampled 1 questions (4 stored" in capsys.readouterr().out


def test_bad_inputs_give_one_line_and_touch_nothing(tiny_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2")) == 0
    before = tree_digest(run_dir)
    capsys.readouterr()

    cases = [
        (sample_args(tiny_dir, run_dir, "--limit", "2", "-m", "5"),
         "differing fields: m (stored 6"),
        (sample_args(tmp_path / "nowhere", run_dir), "model path"),
        (["sample", "--model", str(tiny_dir), "--task", "no-such-task", "--out",
          str(run_dir)], "unknown task 'no-such-task'"),
        (sample_args(tiny_dir, run_dir, "--strategy", "magic"), "unknown strategy 'magic'"),
    ]
    for argv, message in cases:
        assert run_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert tree_digest(run_dir) == before

    fresh = tmp_path / "never-created"
    assert run_main(sample_args(tmp_path / "nowhere", fresh)) == 2
    assert not fresh.exists()

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / DB_NAME).write_bytes(b"\x00garbage" * 512)
    corrupt_before = tree_digest(corrupt)
    assert run_main(sample_args(tiny_dir, corrupt)) == 2
    assert "is not a zerogap run store" in capsys.readouterr().err
    assert run_main(["runs", "show", str(corrupt)]) == 2
    assert tree_digest(corrupt) == corrupt_before


def test_peft_adapter_folder_is_merged(tiny_dir, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from zerogap.models import load_model

    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                                LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)  # B starts at zero; make the adapter change the function
    peft_model.save_pretrained(tmp_path / "adapter")
    base = load_model(str(tiny_dir), device="cpu")
    merged = load_model(str(tmp_path / "adapter"), device="cpu")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(merged.model(ids).logits, peft_model.eval()(ids).logits, atol=1e-5)
    assert merged.fingerprint != base.fingerprint
    assert load_model(str(tiny_dir), device="cpu").fingerprint == base.fingerprint


@pytest.mark.slow
def test_embedded_model_loads_from_its_cache(tmp_path):
    import torch

    from zerogap.engine import greedy
    from zerogap.models import cache_dir, load_model

    first = load_model("embedded", device="cpu")  # converts on a fresh machine
    t0 = time.perf_counter()
    again = load_model("embedded", device="cpu")
    assert time.perf_counter() - t0 < 10  # the 13 s GGUF conversion is not repeated
    assert again.fingerprint == first.fingerprint
    assert any((cache_dir() / "models").glob("gguf-SmolLM2-135M-Instruct*"))
    assert type(again.model).__name__ == "LlamaForCausalLM"
    prompts = ["Question: What is 2 plus 3?\nAnswer:", "Question: What is 6 plus 1?\nAnswer:"]
    out = greedy(again.model, again.tokenizer, prompts, max_new_tokens=8)
    for prompt, g in zip(prompts, out, strict=True):
        enc = again.tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            ref = again.model.generate(**enc, max_new_tokens=8, do_sample=False)
        ref = ref[0, enc.input_ids.shape[1]:].tolist()
        eos = again.tokenizer.eos_token_id
        assert g.token_ids == (ref[: ref.index(eos)] if eos in ref else ref)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-m", "0"], "-m must be at least 1, got 0"),
        (["-T", "0"], "-T must be at least 0.01, got 0.0"),
        (["--top-p", "1.5"], "--top-p must be at most 1, got 1.5"),
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--task-option", "path=x"], "task toy-arith has no option 'path'; known: n, stop"),
        (["--task-option", "n=two"], "--task-option n: must be an integer, got 'two'"),
        (["--strategy", "railcap", "--set", "mode=clip"],
         "--set mode: must be one of 'cap', 'ban'"),
    ],
)
def test_bad_settings_are_refused_before_the_model_loads(tmp_path, capsys, extra, message):
    # The model path does not exist: an error about the settings, and no run directory, show
    # that the settings were checked before the model load and before any write.
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tmp_path / "no-model", run_dir, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not run_dir.exists()


def test_a_second_writer_is_refused_naming_the_first(tiny_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from zerogap.store import RunStore; "
         f"s = RunStore({str(run_dir)!r}); print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert run_main(sample_args(tiny_dir, run_dir, "--limit", "1")) == 2
        err = capsys.readouterr().err
        assert f"being written by another zerogap process (pid {holder.pid})" in err
        assert err.count("\n") == 1
    finally:
        holder.kill()  # killed, as a forgotten shell job would be: the OS releases the lock
        holder.wait()
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "1")) == 0
    assert "sampled 1 questions" in capsys.readouterr().out


def test_bfloat16_run_is_recorded_apart_from_float32(tiny_dir, tmp_path, capsys):
    run_dir = tmp_path / "bf16"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2", "--dtype", "bfloat16")) == 0
    rows = stored_samples(run_dir)
    assert len(rows) == 12 and all(1 <= n <= 24 for *_, n, _, _ in rows)
    before = tree_digest(run_dir)
    capsys.readouterr()
    # float32 weights are another run: resuming the bfloat16 run with them is refused, before
    # the model loads (the dtype is compared before the fingerprint)
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2", "--dtype", "float32")) == 2
    err = capsys.readouterr().err
    assert 'dtype (stored "bfloat16", now "float32")' in err and err.count("\n") == 1, err
    assert tree_digest(run_dir) == before


def _cpuinfo(path: Path, *flags: str) -> Path:
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx512f {' '.join(flags)}\n")
    return path


def _config(run_dir):
    from zerogap.store import RunStore

    with RunStore(run_dir, create=False) as store:
        return store.config()


def test_a_run_resumes_in_the_dtype_it_records(tiny_dir, tmp_path, capsys, monkeypatch):
    from zerogap import models

    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(models, "CPUINFO", _cpuinfo(cpuinfo, "amx_bf16"))
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "1")) == 0
    assert _config(run_dir)["dtype"] == "bfloat16"  # the default, auto, on a CPU with AMX-BF16
    first = stored_samples(run_dir)
    # On a CPU without bfloat16 products auto would be float32: the run keeps its own dtype.
    _cpuinfo(cpuinfo)
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2")) == 0
    assert _config(run_dir)["dtype"] == "bfloat16"
    rows = stored_samples(run_dir)
    assert len(rows) == 12 and rows[:6] == first
    assert "sampled 1 questions" in capsys.readouterr().out
    # A new run on that CPU takes float32.
    assert run_main(sample_args(tiny_dir, tmp_path / "new", "--limit", "1")) == 0
    assert _config(tmp_path / "new")["dtype"] == "float32"


def test_concrete_dtype_resolves_auto_for_the_device_the_backend_computes_on(tmp_path,
                                                                          monkeypatch):
    from zerogap import models
    from zerogap.engine.base import concrete_dtype

    monkeypatch.setattr(models, "CPUINFO", _cpuinfo(tmp_path / "cpuinfo", "avx512_bf16"))
    assert concrete_dtype("auto", "hf", "cpu") == "bfloat16"
    assert concrete_dtype(None, "hf", "cpu") == "bfloat16"
    assert concrete_dtype("float32", "hf", "cpu") == "float32"  # a named dtype is kept
    _cpuinfo(tmp_path / "cpuinfo")
    assert concrete_dtype("auto", "hf", "cpu") == "float32"
    assert concrete_dtype("bfloat16", "hf", "cpu") == "bfloat16"


def test_a_run_stored_before_dtypes_were_recorded_resumes_in_float32(tiny_dir, tmp_path,
                                                                     monkeypatch):
    from zerogap import models

    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "1", "--dtype", "float32")) == 0
    con = sqlite3.connect(run_dir / DB_NAME)
    with con:  # as a store written before runs recorded their dtype
        con.execute("DELETE FROM config WHERE key = 'dtype'")
    con.close()
    assert "dtype" not in _config(run_dir)
    # auto would take bfloat16 here, whose fingerprint the stored run would refuse
    monkeypatch.setattr(models, "CPUINFO", _cpuinfo(tmp_path / "cpuinfo", "avx512_bf16"))
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2")) == 0
    assert _config(run_dir)["dtype"] == "float32" and len(stored_samples(run_dir)) == 12


def test_a_railcap_sample_checks_its_run_once(tiny_dir, tmp_path, monkeypatch):
    """``zerogap sample --strategy railcap`` builds the strategy once, checks the engine options
    once and the first prompt against the context once (before the store exists), though the
    run also decodes greedily; its two passes are two labelled progress stages."""
    import zerogap.runs
    from zerogap import progress

    calls = {"build": 0, "engine": 0, "fits": 0}

    def counting(key, function):
        def count(*args, **kw):
            calls[key] += 1
            return function(*args, **kw)
        return count

    monkeypatch.setattr(zerogap.runs, "build_strategy",
                        counting("build", zerogap.runs.build_strategy))
    monkeypatch.setattr(zerogap.runs, "check_engine", counting("engine", zerogap.runs.check_engine))
    monkeypatch.setattr(zerogap.runs.LoadedEngine, "check_fits",
                        counting("fits", zerogap.runs.LoadedEngine.check_fits))
    stages = []
    monkeypatch.setattr(progress.Bars, "__call__", lambda self, event: stages.append(event.stage))
    run_dir = tmp_path / "run"
    argv = [a for a in sample_args(tiny_dir, run_dir, "--limit", "2", "--strategy", "railcap")
            if a != "--quiet"]
    assert run_main(argv) == 0
    assert calls == {"build": 1, "engine": 1, "fits": 1}
    assert list(dict.fromkeys(stages)) == ["greedy decodes for railcap's trajectories",
                                           "railcap samples"]
    assert len(stored_samples(run_dir)) == 12
    with zerogap.runs.RunStore(run_dir, create=False) as store:
        assert len(store.completed_greedy()) == 2  # RailCap's greedy decodes, made by the run
