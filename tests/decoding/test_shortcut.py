"""Shortcut-neuron scoring and patching on the weight-free tiny Llama."""

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from zerogap.decoding.settings import ShortcutConfig
from zerogap.decoding.shortcut import NeuronPatch, decoder_layers
from zerogap.io.neurons import load_neurons, save_neurons
from zerogap.pipelines.neurons import (
    causal_scores,
    comparative_scores,
    rank_neurons,
)

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = torch.tensor([[1, 40, 41, 42, 43, 44], [1, 50, 51, 52, 53, 54]])


@pytest.fixture(scope="module")
def pair(make_tiny_llama):
    return make_tiny_llama(0), make_tiny_llama(1)


GEN = dict(do_sample=False, max_new_tokens=8, pad_token_id=2, eos_token_id=None,
           output_logits=True, return_dict_in_generate=True)


@torch.no_grad()
def test_cached_patched_generate_equals_uncached_recompute(pair):
    target, source = pair
    neurons = [(0, i) for i in range(0, 128, 2)] + [(1, 3), (1, 77)]
    patch = NeuronPatch(source, neurons)
    with patch(target):
        out = target.generate(PROMPT, **GEN)
        # One pass over the whole decoded sequence, no cache: what each step should have seen.
        full = target(input_ids=out.sequences, use_cache=False).logits
    steps = torch.stack(out.logits, 1)  # (B, 8, V)
    torch.testing.assert_close(steps, full[:, PROMPT.shape[1] - 1 : -1], atol=1e-4, rtol=1e-4)
    plain = torch.stack(target.generate(PROMPT, **GEN).logits, 1)
    assert (plain - steps).abs().max() > 1e-2  # the patch changed the logits
    # The source's attention indices are restored afterwards.
    assert [layer.self_attn.layer_idx for layer in decoder_layers(source)] == [0, 1]


def first_down_input(model):
    """Forward PROMPT through ``model`` and return layer 0's down_proj input as it arrives."""
    seen = []
    hook = decoder_layers(model)[0].mlp.down_proj.register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].clone())
    )
    model(input_ids=PROMPT, use_cache=False)
    hook.remove()
    return seen[0]


@torch.no_grad()
def test_patched_neurons_carry_source_activations(pair):
    target, source = pair
    from_source, plain = first_down_input(source), first_down_input(target)
    with NeuronPatch(source, [(0, 5), (0, 9), (1, 100)])(target):
        patched = first_down_input(target)  # hook registered after the patch's: sees its output
    assert torch.equal(patched[..., [5, 9]], from_source[..., [5, 9]])
    untouched = [i for i in range(128) if i not in (5, 9)]
    assert torch.equal(patched[..., untouched], plain[..., untouched])
    assert not torch.equal(plain[..., [5, 9]], from_source[..., [5, 9]])


def test_non_llama_mlp_is_refused():
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64))
    with pytest.raises(ValueError, match="Llama-style MLPs.*GPT2LMHeadModel"):
        decoder_layers(gpt2)


def test_neurons_outside_the_model_are_refused(pair):
    target, source = pair
    with pytest.raises(ValueError, match=r"neuron \(2, 0\)"), NeuronPatch(source, [(2, 0)])(target):
        pass


@torch.no_grad()
def test_comparative_scores_zero_for_identical_models_and_positive_otherwise(pair):
    con, un = pair
    items = [([1, 40, 41], [7, 8, 9]), ([1, 50], [11])]
    same = comparative_scores(con, con, items)
    assert same.shape == (1, 128) and torch.count_nonzero(same) == 0
    diff = comparative_scores(con, un, items)
    assert (diff > 0).float().mean() > 0.9
    with pytest.raises(ValueError, match="non-empty completion"):
        comparative_scores(con, un, [([1, 2], [])])


@torch.no_grad()
def test_comparative_scores_of_padded_calls_equal_those_of_one_item_per_call(pair, monkeypatch):
    from zerogap.pipelines import neurons

    con, un = pair
    items = [([1, 40, 41, 42, 43], [7, 8, 9]), ([1, 50], [11]), ([1, 60, 61], [12, 13])]
    together = comparative_scores(con, un, items)  # one right-padded call
    monkeypatch.setattr(neurons, "_FORCED_TOKENS", 1)  # every item alone, unpadded
    assert torch.allclose(together, comparative_scores(con, un, items), rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_causal_scores_follow_the_block_formula(pair, make_tiny_llama):
    con, un = pair
    base = make_tiny_llama(2)
    short = dict(do_sample=False, max_new_tokens=2, pad_token_id=2, eos_token_id=None)
    targets = con.generate(PROMPT, **short)

    def accuracy(model, patch):
        # Share of prompts whose greedy answer equals the contaminated model's.
        with patch(model) if patch else torch.no_grad():
            out = model.generate(PROMPT, **short)
        return float((out == targets).all(1).float().mean())

    scores = causal_scores(base, con, un, accuracy, block_size=64)
    assert scores.shape == (1, 128)
    assert torch.unique(scores[0, :64]).numel() == torch.unique(scores[0, 64:]).numel() == 1
    patch = NeuronPatch(un, [(0, i) for i in range(64, 128)])
    expected = (accuracy(base, patch) - accuracy(base, None)) + (
        accuracy(con, None) - accuracy(con, patch))
    assert scores[0, 64].item() == pytest.approx(expected)
    with pytest.raises(ValueError, match="block_size 100"):
        causal_scores(base, con, un, accuracy, block_size=100)


def test_rank_save_load_round_trip(tmp_path):
    neurons = rank_neurons(torch.tensor([[0.3, 0.1, 0.7]]), 2)
    assert neurons == [(0, 2), (0, 0)]
    path = tmp_path / "neurons.json"
    save_neurons(path, neurons, {"model": "tiny"})
    assert load_neurons(path) == (neurons, {"model": "tiny"})
    path.write_text(json.dumps({"format": "zerogap-shortcut-neurons", "neurons": [[0, -1]]}))
    with pytest.raises(ValueError, match="neurons.json.*layer, index"):
        load_neurons(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not a JSON neuron list"):
        load_neurons(path)


def test_config_validation():
    with pytest.raises(ValueError, match="top_k"):
        ShortcutConfig(top_k=-1)
    with pytest.raises(ValueError, match="base"):
        ShortcutConfig(base=None)
    assert ShortcutConfig.from_json(ShortcutConfig(top_k=5).to_json()).top_k == 5
