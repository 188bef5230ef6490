"""The transformers LogitsProcessor adapters agree exactly with the engine hooks."""

import pytest
import torch

from zerogap.decoding.blocking import LNEBlockingHook
from zerogap.decoding.hf import LNEBlockingLogitsProcessor, RailCapLogitsProcessor
from zerogap.decoding.railcap import RailCapHook
from zerogap.decoding.settings import RailCapConfig

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT_LEN, M = 5, 2


def engine_view(input_ids):
    """The engine's (tokens, lengths, question, sample) for generate's batch layout."""
    tokens = input_ids[:, PROMPT_LEN:]
    rows = input_ids.shape[0]
    return (tokens, torch.full((rows,), tokens.shape[1]),
            torch.arange(rows) // M, torch.arange(rows) % M)


@pytest.mark.parametrize(("mode", "protect"), [("cap", "none"), ("ban", "none"),
                                               ("cap", "answer")])
def test_railcap_processor_matches_hook_on_random_steps(mode, protect):
    gen = torch.Generator().manual_seed(1)
    trajectories = [[3, 4, 5, 3, 4, 6, 7], [1, 1, 1, 2]]
    config = RailCapConfig(n=2, mode=mode, protect=protect)
    markers = [[5, 3], [1, 1, 1]] if protect == "answer" else []  # rows 0 and 2 write one
    proc = RailCapLogitsProcessor(trajectories, config, prompt_length=PROMPT_LEN,
                                  num_return_sequences=M, answer_markers=markers)
    hook = RailCapHook(trajectories, config, samples_per_question=M, answer_markers=markers)
    unprotected = RailCapHook(trajectories, RailCapConfig(n=2, mode=mode),
                              samples_per_question=M)
    # Rows walk along their trajectories with a detour, so matches happen and stop.
    generated = torch.tensor([[3, 4, 5, 3, 4, 9], [3, 4, 6, 7, 0, 0], [1, 1, 1, 1, 2, 2],
                              [0, 1, 1, 5, 1, 1]])
    input_ids = torch.cat([torch.randint(0, 10, (4, PROMPT_LEN), generator=gen), generated], 1)
    changed = spared = 0
    for t in range(generated.shape[1] + 1):
        ids = input_ids[:, : PROMPT_LEN + t]
        logits = torch.randn(4, 10, generator=gen)
        if t < generated.shape[1]:  # each row's next token is its argmax, as when it follows g
            logits[torch.arange(4), generated[:, t]] += 10
        expected = hook(logits.clone(), *engine_view(ids))
        got = proc(ids, logits.clone())
        assert torch.equal(got, expected)
        changed += int((got != logits).any())
        capped = (unprotected(logits.clone(), *engine_view(ids)) != logits).any(-1)
        spared += int((capped & ~(got != logits).any(-1)).sum())
    assert changed >= (2 if protect == "answer" else 3)
    assert (spared > 0) == (protect == "answer")  # the protection was exercised, or not
    assert proc.interventions.tolist() == [
        hook.sample_stats(b // M, b % M)["interventions"] for b in range(4)
    ]
    assert proc.on_trajectory.tolist() == [
        hook.sample_stats(b // M, b % M)["steps_on_trajectory"] for b in range(4)
    ]


def test_railcap_processor_called_past_the_prompt_finds_an_earlier_marker():
    # A fresh processor called once on a prefix (as vLLM's reference calls it) knows that the
    # marker (5, 3) came before, as one stepped through the prefix does.
    config = RailCapConfig(n=2, protect="answer")
    trajectory = [[3, 4, 5, 3, 4, 6, 7]]
    prefix = torch.tensor([[0] * PROMPT_LEN + [3, 4, 5, 3, 4]])
    logits = torch.zeros(1, 10)
    logits[0, 6] = 5.0  # the trajectory's successor of (3, 4)
    stepped = RailCapLogitsProcessor(trajectory, config, prompt_length=PROMPT_LEN,
                                     answer_markers=[[5, 3]])
    for t in range(prefix.shape[1] - PROMPT_LEN + 1):
        out = stepped(prefix[:, : PROMPT_LEN + t], logits.clone())
    fresh = RailCapLogitsProcessor(trajectory, config, prompt_length=PROMPT_LEN,
                                   answer_markers=[[5, 3]])
    assert torch.equal(fresh(prefix, logits.clone()), out) and out[0, 6] == 5.0
    plain = RailCapLogitsProcessor(trajectory, RailCapConfig(n=2), prompt_length=PROMPT_LEN)
    assert plain(prefix, logits.clone())[0, 6] == 0.0  # capped without the protection


def test_blocking_processor_matches_hook():
    gen = torch.Generator().manual_seed(2)
    proc = LNEBlockingLogitsProcessor([1, 3], prompt_length=PROMPT_LEN, num_return_sequences=M)
    hook = LNEBlockingHook(torch.tensor([1, 3]))
    input_ids = torch.randint(0, 10, (4, PROMPT_LEN + 4), generator=gen)
    for t in range(5):
        ids = input_ids[:, : PROMPT_LEN + t]
        logits = torch.randn(4, 10, generator=gen)
        assert torch.equal(proc(ids, logits.clone()), hook(logits.clone(), *engine_view(ids)))


def test_generate_with_processor_equals_hook_on_raw_logits(tiny_llama):
    prompt = torch.tensor([[1, 100, 200, 300, 400], [1, 500, 600, 700, 800]])
    kwargs = dict(do_sample=False, max_new_tokens=12, pad_token_id=2, eos_token_id=None)
    greedy = tiny_llama.generate(prompt, **kwargs)[:, PROMPT_LEN:]
    config = RailCapConfig(n=2, mode="cap")
    proc = RailCapLogitsProcessor(greedy.tolist(), config, prompt_length=PROMPT_LEN)
    out = tiny_llama.generate(prompt, logits_processor=[proc], output_logits=True,
                              output_scores=True, return_dict_in_generate=True, **kwargs)
    hook = RailCapHook(greedy.tolist(), config, samples_per_question=1)
    tokens = out.sequences[:, PROMPT_LEN:]
    for t, (raw, processed) in enumerate(zip(out.logits, out.scores, strict=True)):
        lengths = torch.full((2,), t)
        rows, sample = torch.arange(2), torch.zeros(2, dtype=torch.long)
        expected = hook(raw.clone(), tokens[:, :t], lengths, rows, sample)
        assert torch.equal(processed, expected)
    assert int(proc.on_trajectory.sum()) > 0  # the cap was exercised, not vacuous


def test_processor_rejects_bad_layout():
    with pytest.raises(ValueError, match="prompt_length"):
        RailCapLogitsProcessor([[1]], prompt_length=-1)
    with pytest.raises(ValueError, match="num_return_sequences"):
        LNEBlockingLogitsProcessor([1], prompt_length=3, num_return_sequences=0)
