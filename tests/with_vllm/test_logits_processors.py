"""RailCap and LNE-blocking inside vLLM: loaded through the entry point, equal to the transformers
adapters on the same prefixes step by step, and inert for requests that do not ask for them."""

import pytest
import torch

from zerogap.decoding import vllm as zv
from zerogap.decoding.hf import LNEBlockingLogitsProcessor, RailCapLogitsProcessor
from zerogap.decoding.settings import RailCapConfig

PROMPTS = ["Q: Tom has 7 apples and buys 5 more. How many apples does Tom have?\nA:",
           "Q: What is 12 minus 4?\nA:"]


@pytest.fixture
def record(monkeypatch):
    """Patch a processor class's ``apply`` (the class vLLM loaded from the entry point) to keep,
    per call, each opted-in row's settings and generated prefix, and the logits in and out."""
    calls = {}

    def watch(cls):
        original = cls.apply
        calls[cls] = []

        def apply(self, logits):
            rows = {i: (r.settings, list(r.output)) for i, r in self.rows.items()}
            before = logits.clone()
            after = original(self, logits)
            calls[cls].append((rows, before, after.clone()))
            return after

        monkeypatch.setattr(cls, "apply", apply)
        return calls[cls]

    return watch


def greedy_ids(llm, prompts, max_tokens=32):
    from vllm import SamplingParams

    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens),
                        use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def check_rows(calls, reference):
    """Every opted-in row equals ``reference(settings, prefix, logits_in)``; every other row is
    untouched. Returns (rows checked, rows the processor changed, untouched rows checked)."""
    checked = changed = plain = 0
    for rows, before, after in calls:
        for i in range(before.shape[0]):
            if i in rows:
                settings, prefix = rows[i]
                expected = reference(settings, prefix, before[i : i + 1].clone())[0]
                assert torch.equal(after[i], expected)
                checked += 1
                changed += int(not torch.equal(after[i], before[i]))
            else:
                assert torch.equal(after[i], before[i])
                plain += 1
    return checked, changed, plain


@pytest.mark.parametrize(("mode", "protect"), [("cap", False), ("ban", False), ("cap", True)])
def test_railcap_in_vllm_equals_the_hf_adapter(embedded_llm, record, mode, protect):
    from vllm import SamplingParams

    calls = record(zv.RailCapProcessor)
    trajectories = greedy_ids(embedded_llm, PROMPTS)
    calls.clear()
    # As answer markers, tokens 3-4 of each greedy decode: samples that follow it are protected
    # from there on, the others are not.
    markers = [t[3:5] for t in trajectories] if protect else []
    extra = {"answer_markers": markers} if protect else {}
    params = [SamplingParams(n=4, temperature=0.7, max_tokens=32, seed=11,
                             extra_args={"railcap": {"trajectory": t, "n": 2, "mode": mode,
                                                     **extra}})
              for t in trajectories]
    # The plain request sits between RailCap requests and ends early, so the opted-in rows are
    # first apart (copied out and back) and then, once vLLM condenses its batch, consecutive (a
    # view): both ways through the processor are checked.
    plain = SamplingParams(n=2, temperature=0.7, max_tokens=6, seed=11)
    embedded_llm.generate([PROMPTS[0], PROMPTS[0], *PROMPTS[1:]], [params[0], plain, *params[1:]],
                          use_tqdm=False)

    def reference(settings, prefix, logits):
        trajectory, n, mode_, answer_markers = settings
        config = RailCapConfig(n=n, mode=mode_, protect="answer" if answer_markers else "none")
        proc = RailCapLogitsProcessor([trajectory], config, prompt_length=1,
                                      answer_markers=answer_markers)
        return proc(torch.tensor([[0, *prefix]]), logits)

    checked, changed, plain_rows = check_rows(calls, reference)
    assert checked > 0 and plain_rows > 0  # RailCap rows and plain rows shared batches
    consecutive = {max(rows) - min(rows) + 1 == len(rows) for rows, _, _ in calls if rows}
    assert consecutive == {True, False}
    assert changed > 0  # the cap was exercised, not vacuous
    if protect:  # some rows were past their marker, so protection took part
        assert any(any(prefix[i : i + len(m)] == list(m) for m in settings[3]
                       for i in range(len(prefix) - len(m) + 1))
                   for rows, _, _ in calls for settings, prefix in rows.values())


def test_lne_blocking_in_vllm_equals_the_hf_adapter(embedded_llm, record):
    from vllm import SamplingParams

    calls = record(zv.LNEBlockingProcessor)
    params = [SamplingParams(n=3, temperature=0.7, max_tokens=12, seed=3,
                             extra_args={"lne_blocking": {"count": k}}) for k in (2, 5)]
    embedded_llm.generate(PROMPTS, params, use_tqdm=False)

    def reference(count, prefix, logits):
        proc = LNEBlockingLogitsProcessor([count], prompt_length=1)
        return proc(torch.tensor([[0, *prefix]]), logits)

    checked, changed, _ = check_rows(calls, reference)
    assert changed == 3 * (2 + 5)  # exactly the first `count` positions of every sample


def test_bad_extra_args_are_refused_at_admission(embedded_llm):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    for bad in ({"railcap": {"trajectory": "1 2 3"}}, {"railcap": {"trajectory": [1], "n": 0}},
                {"railcap": {"trajectory": [1], "mode": "clip"}},
                {"railcap": {"trajectory": [1], "answer_markers": [[]]}},
                {"lne_blocking": {"count": -1}}):
        with pytest.raises((ValueError, VLLMValidationError), match="extra_args"):
            embedded_llm.generate(PROMPTS[:1], SamplingParams(max_tokens=2, extra_args=bad),
                                  use_tqdm=False)


def test_greedy_decodes_match_the_hf_engine(embedded_llm):
    from zerogap.engine import greedy
    from zerogap.models import load_model

    loaded = load_model("embedded", device="cpu")
    ours = greedy(loaded.model, loaded.tokenizer, PROMPTS, max_new_tokens=32)
    eos = loaded.tokenizer.eos_token_id
    theirs = [ids[: ids.index(eos)] if eos in ids else ids
              for ids in greedy_ids(embedded_llm, PROMPTS)]
    assert [g.token_ids for g in ours] == theirs
