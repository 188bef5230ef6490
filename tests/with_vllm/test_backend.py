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


def test_what_vllm_cannot_give_is_refused(backend):
    spec = SamplingSpec(m=1, max_new_tokens=4)
    with pytest.raises(UserError, match="no full-vocabulary entropies"):
        backend.greedy(PROMPTS, spec, entropies=True)
    with pytest.raises(UserError, match="cannot patch activations"):
        backend.sample(PROMPTS, spec, question_ids=["a", "b"], patch=lambda model: None)
    assert not backend.capabilities.patching and not backend.capabilities.entropies
