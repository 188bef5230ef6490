"""The vLLM backend against the backend contract, on the embedded model."""

import pytest

from zerogap.engine.base import SamplingSpec
from zerogap.errors import UserError

PROMPTS = ["Q: Ann has 3 bags of 4 apples. How many apples?\nA:", "Q: What is 9 plus 9?\nA:"]


@pytest.fixture(scope="module")
def backend(embedded_llm):
    from zerogap.engine.vllm import VLLMBackend

    return VLLMBackend(embedded_llm)


def test_m_samples_per_question_with_question_seeds(backend):
    spec = SamplingSpec(m=4, temperature=0.9, max_new_tokens=16, seed=3, stop=("\n",))
    first = backend.sample(PROMPTS, spec, question_ids=["a", "b"])
    again = backend.sample(PROMPTS[::-1], spec, question_ids=["b", "a"])
    assert [len(q) for q in first] == [4, 4]
    texts = [[g.text for g in q] for q in first]
    # Seeds follow question ids, not positions: reordering the questions redraws the same
    # samples, up to vLLM's batch-dependent float differences flipping a near-tie (not promised
    # batch-invariant), hence "most" rather than "all".
    same = sum(a == b for q, r in zip(texts, again[::-1], strict=True)
               for a, b in zip(q, [g.text for g in r], strict=True))
    assert same >= 6
    assert all(len(set(q)) > 1 for q in texts)  # the m children draw different samples
    for g in (g for q in first for g in q):
        assert g.finish in {"eos", "stop", "length"} and "\n" not in g.text
        assert len(g.token_ids) <= 16
    # The same prompt under two question ids draws two different sets of samples.
    twins = backend.sample([PROMPTS[0]] * 2, spec, question_ids=["x", "y"])
    assert [g.text for g in twins[0]] != [g.text for g in twins[1]]


def test_what_vllm_cannot_give_is_refused(backend, monkeypatch):
    spec = SamplingSpec(m=1, max_new_tokens=4)
    with pytest.raises(UserError, match="cannot patch activations"):
        backend.sample(PROMPTS, spec, question_ids=["a", "b"], patch=lambda model: None)
    assert not backend.capabilities.patching and backend.capabilities.entropies
    # An LLM started with vLLM's default cap on logprobs cannot give full-vocabulary entropies.
    from zerogap.engine.vllm import VLLMBackend

    monkeypatch.setattr(backend.llm.llm_engine.model_config, "max_logprobs", 20)
    capped = VLLMBackend(backend.llm)
    assert not capped.capabilities.entropies
    with pytest.raises(UserError, match="start it with max_logprobs=-1"):
        capped.greedy(PROMPTS, spec, entropies=True)


def test_greedy_entropies_equal_the_hf_engines(backend):
    """Full-vocabulary entropies of vLLM's greedy decodes (what LNE-blocking counts from) equal
    the HF engine's step for step on the same decodes, the EOS step included."""
    from zerogap.engine import greedy
    from zerogap.models import load_model

    loaded = load_model("embedded", device="cpu")
    spec = SamplingSpec(m=1, max_new_tokens=24)
    theirs = backend.greedy(PROMPTS, spec, entropies=True)
    ours = greedy(loaded.model, loaded.tokenizer, PROMPTS, max_new_tokens=24,
                  return_entropy=True)
    for mine, hf in zip(theirs, ours, strict=True):
        assert mine.token_ids == hf.token_ids and mine.finish == hf.finish
        assert len(mine.entropies) == len(hf.entropies) == len(hf.token_ids) + (
            hf.finish == "eos")
        assert mine.entropies == pytest.approx(hf.entropies, rel=1e-3, abs=1e-3)
    assert len({round(h, 3) for g in ours for h in g.entropies}) > 3  # not a constant
