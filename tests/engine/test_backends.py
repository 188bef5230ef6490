"""The backend contract: the registry, the protocol every built-in backend fills, teacher-forced
ranks, and no backend named by string outside the registry."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import helpers
from zerogap.engine import greedy
from zerogap.engine.base import (
    Backend,
    EngineOptions,
    backend_capabilities,
    backend_class,
    backend_names,
)
from zerogap.engine.hf import HFBackend
from zerogap.errors import UserError

SRC = Path(__file__).resolve().parents[2] / "src"


def test_built_in_backends_are_registered_and_fill_the_protocol():
    assert {"hf", "vllm"} <= set(backend_names())
    members = [m for m in dir(Backend) if not m.startswith("_")]
    assert {"check_available", "start", "sample", "greedy", "forced_ranks", "close"} <= set(
        members)
    for name in ("hf", "vllm"):
        cls = backend_class(name)
        assert cls.name == name
        missing = [m for m in members if not hasattr(cls, m)]
        assert not missing, (name, missing)
    assert backend_capabilities("vllm").exclusive and not backend_capabilities("hf").exclusive
    with pytest.raises(UserError, match="unknown backend 'tgi'; known backends: hf, vllm"):
        backend_class("tgi")


def test_engine_options_validate_every_field():
    with pytest.raises(UserError, match="EngineOptions.dtype must be one of"):
        EngineOptions(dtype="float77")
    with pytest.raises(UserError, match="EngineOptions.device must be a string, got 3"):
        EngineOptions(dtype="float77", device=3)
    with pytest.raises(UserError,
                       match="EngineOptions.tensor_parallel_size must be at least 1, got 0"):
        EngineOptions(tensor_parallel_size=0)
    assert EngineOptions.from_dict(EngineOptions(max_batch=4).to_dict()).max_batch == 4


def test_the_vllm_backend_module_imports_no_model_library():
    code = ("import sys, zerogap.engine.vllm; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', "
            "'vllm'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC)}, check=True).stdout
    assert out.strip() == "[]"


def test_forced_ranks_of_a_models_own_greedy_tokens_are_all_first():
    """Teacher-forced on its own greedy decode a model agrees at every step (rank 1); another
    model's greedy tokens get ranks > 1 exactly where the two argmaxes differ."""
    tok, own, other = helpers.byte_tokenizer(), helpers.tiny_model(0), helpers.tiny_model(3)
    prompt = "Q: 2+3=?\nA:"
    ids = greedy(own, tok, [prompt], max_new_tokens=10)[0].token_ids
    assert HFBackend(own, tok).forced_ranks([prompt, prompt], [ids, []]) == [[1] * len(ids), []]
    ranks = HFBackend(other, tok).forced_ranks([prompt], [ids])[0]
    with torch.no_grad():
        logits = other(torch.tensor([tok(prompt)["input_ids"] + ids])).logits[0]
    start = len(tok(prompt)["input_ids"]) - 1
    differ = [int(logits[start + t].argmax()) != ids[t] for t in range(len(ids))]
    assert [r > 1 for r in ranks] == differ and all(1 <= r <= helpers.VOCAB for r in ranks)


# A comparison of a backend's name with a string literal: `backend == "vllm"`, `"hf" != x`.
_NAME_CHECK = re.compile(r"""(==|!=)\s*["'](hf|vllm)["']|["'](hf|vllm)["']\s*(==|!=)""")


def test_no_backend_name_is_compared_outside_the_registry():
    found = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if _NAME_CHECK.search(line)]
    assert found == []
