"""The engine on a real (tiny, weight-free) Llama: correctness, batch independence, hooks."""

import contextlib
import math

import pytest
import torch

from helpers import VOCAB
from zerogap.engine import greedy, noise, sample

PROMPTS = [f"Q: 1+1=?\nA: 2\n\nQ: {a}+{b}=?\nA:" for a, b in [(2, 3), (10, 7), (4, 4), (21, 9)]]
IDS = [f"q{i}" for i in range(len(PROMPTS))]


def _ids(gens):
    return [[g.token_ids for g in q] for q in gens]


def test_gumbel_argmax_equals_full_vocabulary_argmax():
    torch.manual_seed(0)
    hashes = noise.token_hashes(5000, "cpu")
    # Flat rows keep every token a candidate, middling rows about 15% of them, peaked rows a few.
    scores = torch.cat([torch.randn(6, 5000) * s for s in (0.1, 8.0, 40.0)])
    keys = torch.tensor([noise.row_key(3, "q", s) for s in range(18)], dtype=torch.int32)
    steps = torch.arange(18)
    step_keys = noise._fmix32(keys + steps.to(torch.int32) * noise._GOLDEN)
    for temperature in (1.0, 0.7, 1.3):
        got = noise.gumbel_argmax(scores.clone(), keys, steps, hashes, temperature)
        full = scores / temperature + noise._gumbel(step_keys, hashes.expand(18, -1))
        assert torch.equal(got, full.argmax(-1))
        assert torch.equal(got, noise.gumbel_argmax(scores / temperature, keys, steps, hashes))


def test_gumbel_argmax_draws_from_the_softmax():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    n = 20000
    scores = probs.log().expand(n, -1).clone()
    keys = torch.tensor([noise.row_key(0, "q", s) for s in range(n)], dtype=torch.int32)
    drawn = noise.gumbel_argmax(scores, keys, torch.zeros(n, dtype=torch.long),
                                noise.token_hashes(4, "cpu"))
    freq = torch.bincount(drawn, minlength=4).float() / n
    # 4 standard errors at p=0.5, n=20000 is 0.014
    assert torch.allclose(freq, probs, atol=0.015), freq


def test_top_k_and_top_p_filters():
    scores = torch.tensor([[3.0, 2.0, 1.0, 0.0]]).log_softmax(-1)
    assert torch.isinf(noise.filter_top_k_top_p(scores.clone(), 2, None)[0, 2:]).all()
    p = scores.softmax(-1)[0]
    kept = ~torch.isinf(noise.filter_top_k_top_p(scores.clone(), None, float(p[0]) + 1e-3))
    assert kept[0].tolist() == [True, True, False, False]


def test_samples_do_not_depend_on_batching_order_or_m(tiny):
    model, tok = tiny
    kw = dict(temperature=0.7, max_new_tokens=12, seed=5)
    full = sample(model, tok, PROMPTS, m=4, question_ids=IDS, **kw)
    narrow = sample(model, tok, PROMPTS, m=4, question_ids=IDS, max_batch=3, **kw)
    subset = sample(model, tok, PROMPTS[::-1][:3], m=2, question_ids=IDS[::-1][:3],
                    max_batch=5, **kw)
    assert _ids(full) == _ids(narrow)
    assert _ids(subset) == [[g.token_ids for g in q[:2]] for q in full[::-1][:3]]
    other_seed = sample(model, tok, PROMPTS, m=4, question_ids=IDS, **{**kw, "seed": 6})
    assert _ids(other_seed) != _ids(full)
    # the 4 samples of a question differ from one another
    assert all(len({tuple(t) for t in q}) == 4 for q in _ids(full))


def test_a_range_of_sample_indices_draws_what_range_m_draws_there(tiny):
    """An allocated run's per-question m and a resumed question's missing samples draw sample
    indices other than 0..m-1: each is the draw a call of range(m) makes at that index, and
    the intervention hears the index it drew."""
    model, tok = tiny
    kw = dict(temperature=0.7, max_new_tokens=12, seed=5, question_ids=IDS, max_batch=4)
    banned = tok.convert_tokens_to_ids("e")
    full = sample(model, tok, PROMPTS, m=6, intervention=_BanAndCount(banned), **kw)
    ranges = [range(0, 6), range(2, 5), range(5, 6), range(1, 3)]
    ban = _BanAndCount(banned)
    parts = sample(model, tok, PROMPTS, m=1, indices=ranges, intervention=ban, **kw)
    assert _ids(parts) == [[g.token_ids for g in q[r.start:r.stop]]
                           for q, r in zip(full, ranges, strict=True)]
    assert [[g.stats for g in q] for q in parts] == [
        [g.stats for g in q[r.start:r.stop]] for q, r in zip(full, ranges, strict=True)]
    assert {(q, s) for q, s in ban.calls} == {(q, s) for q, r in enumerate(ranges) for s in r}
    with pytest.raises(ValueError, match="non-empty range"):
        sample(model, tok, PROMPTS, m=1, indices=[range(2)] * 3 + [range(0)], **kw)


def test_finish_reasons_eos_and_stop(tiny):
    model, tok = tiny
    gens = sample(model, tok, PROMPTS, m=8, temperature=1.0, max_new_tokens=20,
                  question_ids=IDS, stop=("e",))
    reasons = {g.finish for q in gens for g in q}
    assert reasons <= {"eos", "stop", "length"} and "stop" in reasons
    for g in (g for q in gens for g in q):
        assert len(g.token_ids) <= 20 and VOCAB - 1 not in g.token_ids
        assert "e" not in g.text
        if g.finish == "stop":
            assert "e" in tok.decode(g.token_ids)
            assert tok.decode(g.token_ids).startswith(g.text)
        if g.finish == "length":
            assert len(g.token_ids) == 20


def test_greedy_matches_generate_and_reports_entropy(tiny):
    model, tok = tiny
    out = greedy(model, tok, PROMPTS, max_new_tokens=10, return_entropy=True, max_batch=2)
    for prompt, g in zip(PROMPTS, out, strict=True):
        enc = tok(prompt, return_tensors="pt")
        ref = model.generate(**enc, max_new_tokens=10, do_sample=False,
                             pad_token_id=VOCAB - 1)[0, enc.input_ids.shape[1]:].tolist()
        if VOCAB - 1 in ref:
            ref = ref[: ref.index(VOCAB - 1)]
        assert g.token_ids == ref
        assert len(g.entropies) == len(g.token_ids) + (g.finish == "eos")
        assert all(0 <= h <= math.log(VOCAB) + 1e-4 for h in g.entropies)


def test_questions_are_encoded_together_left_padded_with_the_keys_of_each_alone(tiny):
    from zerogap.engine.attention import prefix_attention
    from zerogap.engine.hf import _Decoder

    model, tok = tiny
    shapes = []  # (batch, tokens) of each forward call
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    try:
        greedy(model, tok, PROMPTS, max_new_tokens=3, max_batch=4)
    finally:
        handle.remove()
    decoder = _Decoder(model, tok, PROMPTS, max_new_tokens=3, stop=(), max_batch=None,
                       prefixes=None)
    start = decoder.prefix_len
    questions = [ids[start:] for ids in decoder.ids]
    assert len({len(q) for q in questions}) > 1  # the batch is padded
    encodes = [s for s in shapes if s[1] > 1 and s != (1, start)]
    assert encodes == [(len(PROMPTS), max(len(q) for q in questions))]
    with torch.inference_mode(), prefix_attention(model):
        prefix = decoder.prefill.encode([decoder.ids[0][:start]], None, 0)[1][0]
        logits, keys = decoder.prefill.encode(questions, prefix, start)
        for i, question in enumerate(questions):
            alone_logits, alone_keys = decoder.prefill.encode([question], prefix, start)
            assert torch.allclose(logits[i], alone_logits[0], atol=1e-5)
            for (k, v), (k_alone, v_alone) in zip(keys[i], alone_keys[0], strict=True):
                assert k.shape == k_alone.shape == (1, k.shape[1], len(question), k.shape[3])
                assert torch.allclose(k, k_alone, atol=1e-5)
                assert torch.allclose(v, v_alone, atol=1e-5)


class _BanAndCount:
    """Bans one token; checks the rows' bookkeeping it is given; counts calls per sample."""

    def __init__(self, banned):
        self.banned = banned
        self.calls = {}
        self.ok = True

    def __call__(self, logits, tokens, lengths, question, sample):
        rows = torch.arange(len(lengths))
        written = tokens >= 0
        self.ok &= bool((written.sum(1) == lengths).all())
        self.ok &= bool((tokens[rows[lengths > 0], lengths[lengths > 0] - 1] >= 0).all())
        for q, s in zip(question.tolist(), sample.tolist(), strict=True):
            self.calls[(q, s)] = self.calls.get((q, s), 0) + 1
        logits[:, self.banned] = float("-inf")
        return logits

    def sample_stats(self, question, sample):
        return {"steps": self.calls[(question, sample)]}


def test_intervention_and_patch_hooks(tiny):
    model, tok = tiny
    ban = _BanAndCount(banned=tok.convert_tokens_to_ids("e"))
    entered = []

    @contextlib.contextmanager
    def patch(m):
        entered.append(m)
        yield

    gens = sample(model, tok, PROMPTS, m=3, temperature=1.0, max_new_tokens=15,
                  question_ids=IDS, intervention=ban, patch=patch, max_batch=4)
    assert ban.ok and entered == [model]
    for q, per_q in enumerate(gens):
        for s, g in enumerate(per_q):
            assert ban.banned not in g.token_ids
            # one hook call per generated token (EOS included)
            assert g.stats == {"steps": len(g.token_ids) + (g.finish == "eos")}
            assert ban.calls[(q, s)] == g.stats["steps"]


def test_bad_arguments_are_refused(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="temperature"):
        sample(model, tok, PROMPTS, m=2, temperature=0.0, max_new_tokens=4, question_ids=IDS)
    with pytest.raises(ValueError, match="question ids"):
        sample(model, tok, PROMPTS, m=2, temperature=0.7, max_new_tokens=4, question_ids=IDS[:1])


def test_the_prefix_is_encoded_once_per_weights_state():
    import helpers

    model, tok = helpers.tiny_model(seed=4), helpers.byte_tokenizer()
    lengths = []  # tokens of each forward call
    model.register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]),
        with_kwargs=True)
    from zerogap.engine.hf import _common_prefix_length

    prefix = _common_prefix_length([tok(p)["input_ids"] for p in PROMPTS])
    own = max(len(tok(p)["input_ids"]) for p in PROMPTS) - prefix
    kw = dict(m=3, temperature=0.9, max_new_tokens=10, question_ids=IDS, seed=1)

    def prefix_encodes():
        return lengths.count(prefix)

    first = sample(model, tok, PROMPTS, **kw)
    assert prefix > own and prefix_encodes() == 1
    assert _ids(sample(model, tok, PROMPTS, **kw)) == _ids(first) and prefix_encodes() == 1
    greedy(model, tok, PROMPTS, max_new_tokens=4)  # same prefix, other kind of call
    assert prefix_encodes() == 1
    # Weights changed in place: encoded again, and the samples are those of a fresh copy.
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(3.0)
    changed = sample(model, tok, PROMPTS, **kw)
    assert prefix_encodes() == 2
    fresh = helpers.tiny_model(seed=4)
    with torch.no_grad():
        fresh.model.layers[0].mlp.down_proj.weight.mul_(3.0)
    assert _ids(changed) == _ids(sample(fresh, tok, PROMPTS, **kw)) != _ids(first)


def test_weights_made_under_inference_mode_are_never_reused():
    import helpers

    with torch.inference_mode():  # parameters without version counters
        model = helpers.tiny_model(seed=4)
        tok = helpers.byte_tokenizer()
        kw = dict(m=2, temperature=0.9, max_new_tokens=6, question_ids=IDS, seed=1)
        first = sample(model, tok, PROMPTS, **kw)
        model.model.layers[0].mlp.down_proj.weight.mul_(3.0)  # leaves no trace
        changed = sample(model, tok, PROMPTS, **kw)
        fresh = helpers.tiny_model(seed=4)
        fresh.model.layers[0].mlp.down_proj.weight.mul_(3.0)
        assert _ids(changed) == _ids(sample(fresh, tok, PROMPTS, **kw)) != _ids(first)
