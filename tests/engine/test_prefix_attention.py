"""Shared-prefix attention and the row cache: exactness of the three-level cascade, agreement
with a plain per-row cache, the shortcut patch's extra layers, supported architectures."""

import pytest
import torch

from helpers import PAIRS, VOCAB
from zerogap.decoding.blocking import entropy
from zerogap.decoding.shortcut import NeuronPatch
from zerogap.engine import attention, greedy, noise, sample
from zerogap.engine.attention import Questions, cascade, check_supported, key_mask
from zerogap.engine.cache import RowCache
from zerogap.engine.stops import stop_tokens

PROMPTS = [f"Q: 1+1=?\nA: 2\n\nQ: 3+4=?\nA: 7\n\nQ: {a}+{b}=?\nA:" for a, b in PAIRS]
IDS = [f"q{i}" for i in range(len(PROMPTS))]


def _plain_attention(q, k, v, scaling):
    """Softmax attention of (R, H, n, D) queries over (R, Hkv, S, D) keys, last n causal."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) * scaling
    n, s = q.shape[2], k.shape[2]
    causal = torch.ones(n, s, dtype=torch.bool).tril(s - n)
    return (scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v).transpose(1, 2)


@pytest.mark.parametrize("kernel", ["cpu-flash", "explicit"])
@pytest.mark.parametrize("with_questions", [False, True])
@pytest.mark.parametrize("prefix_len", [0, 7])
def test_cascade_equals_softmax_over_prefix_question_and_own_keys(prefix_len, with_questions,
                                                                  kernel, monkeypatch):
    # "explicit" is the path a GPU takes (no CPU flash kernel there), checked here on the CPU.
    if kernel == "explicit":
        monkeypatch.setattr(attention, "_attend_with_lse", attention._attend_with_lse_explicit)
    torch.manual_seed(0)
    rows, heads, kv_heads, dim, width = 5, 6, 2, 8, 9
    lengths = torch.tensor([9, 3, 1, 6, 9])  # own tokens per row; the rest of the width is junk
    q = torch.randn(rows, heads, 1, dim)
    pk, pv = torch.randn(1, kv_heads, prefix_len, dim), torch.randn(1, kv_heads, prefix_len, dim)
    ok, ov = torch.randn(rows, kv_heads, width, dim), torch.randn(rows, kv_heads, width, dim)
    # Rows 0, 2, 3 share question slot 1 (4 tokens), rows 1, 4 slot 0 (2 tokens); slot 2 is
    # a free slot whose stale keys no row reads.
    group, member, q_len = torch.tensor([1, 0, 1, 1, 0]), torch.tensor([0, 0, 2, 1, 1]), [2, 4, 3]
    qk, qv = torch.randn(3, kv_heads, 5, dim), torch.randn(3, kv_heads, 5, dim)
    questions = None
    if with_questions:
        questions = Questions(qk, qv, key_mask(torch.tensor(q_len), 5, torch.float32),
                              group * 3 + member, 3)
    got = cascade(q, pk, pv, ok, ov, key_mask(lengths, width, torch.float32), 0.3, questions)
    assert got.shape == (rows, 1, heads, dim)
    for r in range(rows):
        n, g = int(lengths[r]), int(group[r])
        mid = [qk[g, :, : q_len[g]]] if with_questions else []
        mid_v = [qv[g, :, : q_len[g]]] if with_questions else []
        k = torch.cat([pk[0], *mid, ok[r, :, :n]], 1)[None]
        v = torch.cat([pv[0], *mid_v, ov[r, :, :n]], 1)[None]
        want = _plain_attention(q[r : r + 1], k, v, 0.3)
        assert torch.allclose(got[r : r + 1], want, atol=1e-5), r


def test_bfloat16_cascade_matches_float32_on_the_same_values():
    """In bfloat16 the own part's products run in bfloat16 (scores rounded) and the merge in
    float32: the result stays within bfloat16 rounding of plain float32 softmax attention over
    the same values (a dropped part or mask moves outputs by far more)."""
    torch.manual_seed(2)
    rows, kv_heads, dim, width, slots, q_width = 6, 2, 16, 12, 2, 8
    bf = torch.bfloat16
    q = torch.randn(rows, 4, 1, dim, dtype=bf)
    pk, pv = (torch.randn(1, kv_heads, 30, dim, dtype=bf) for _ in range(2))
    ok, ov = (torch.randn(rows, kv_heads, width, dim, dtype=bf) for _ in range(2))
    qk, qv = (torch.randn(slots, kv_heads, q_width, dim, dtype=bf) for _ in range(2))
    lengths, q_len = torch.tensor([12, 1, 5, 8, 2, 12]), torch.tensor([8, 3])
    row_slot = torch.tensor([0, 1, 2, 3, 4, 5])  # rows 0-2 read slot 0, rows 3-5 slot 1
    questions = Questions(qk, qv, key_mask(q_len, q_width, bf), row_slot, 3)
    got = cascade(q, pk, pv, ok, ov, key_mask(lengths, width, bf), dim ** -0.5, questions)
    assert got.dtype == bf
    for r in range(rows):
        n, g = int(lengths[r]), r // 3
        k = torch.cat([pk[0], qk[g, :, : q_len[g]], ok[r, :, :n]], 1)[None].float()
        v = torch.cat([pv[0], qv[g, :, : q_len[g]], ov[r, :, :n]], 1)[None].float()
        want = _plain_attention(q[r : r + 1].float(), k, v, dim ** -0.5)
        assert torch.allclose(got[r : r + 1].float(), want, atol=2e-2), r


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_explicit_attention_matches_the_cpu_flash_kernel(dtype):
    """The GPU's attention path (explicit float32 products) against the CPU's flash kernel, on
    the same bfloat16 or float32 inputs: the same output and log-sum-exp up to rounding."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(3, 2, n, 16, dtype=dtype) for n in (5, 40, 40))
    mask = key_mask(torch.tensor([40, 17, 1]), 40, dtype)
    o_flash, lse_flash = attention._attend_with_lse(q, k, v, 0.25, mask)
    o_explicit, lse_explicit = attention._attend_with_lse_explicit(q, k, v, 0.25, mask)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(lse_explicit, lse_flash.float(), atol=tol)
    assert torch.allclose(o_explicit, o_flash.float(), atol=tol)


def test_cache_keyword_follows_the_forward_signature():
    """transformers renamed the forward's cache argument within 5.x (5.19: past_key_values,
    5.25: cache); every caller that passes a cache asks the signature, whichever is installed."""
    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None):
            return input_ids

    assert attention.cache_kwarg(Old()) == "past_key_values"
    assert attention.cache_kwarg(New()) == "cache"


def _question(value: float, n: int) -> list:
    return [(torch.full((1, 1, n, 1), value), torch.full((1, 1, n, 1), -value))]


def _step(cache: RowCache, value: float) -> None:
    cache.layers[0].update(torch.full((cache.rows, 1, 1, 1), value),
                           torch.zeros(cache.rows, 1, 1, 1), 0)
    cache.advance()


def test_row_cache_keeps_a_question_once_and_moves_last_rows_into_freed_slots():
    prefix = [(torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))]
    cache = RowCache(prefix, 1, capacity=6, slots=4, question_slots=3)
    for value, n in [(1.0, 1), (2.0, 2), (3.0, 3)]:
        cache.add(_question(value, n), 2)
    assert cache.rows == 6 and cache.width == 0 and cache.question_width == 3
    assert cache.layers[0].question_k[:3, 0, :, 0].tolist() == [[1, 0, 0], [2, 2, 0], [3, 3, 3]]
    _step(cache, 7.0)
    cache.layers[0].keys[:6, 0, 0, 0] = torch.arange(6.0)  # tell the rows' own keys apart
    order = cache.remove([0, 3, 5])
    assert order == [4, 1, 2]
    assert cache.layers[0].keys[:3, 0, 0, 0].tolist() == [4.0, 1.0, 2.0]
    assert cache.group[:3].tolist() == [2, 0, 1] and cache.member[:3].tolist() == [0, 1, 0]
    layout = cache.layout(torch.float32)
    assert (layout.group_slots, layout.question_width, layout.members) == (3, 3, 2)
    assert layout.row_slot.tolist() == [4, 1, 2]  # group * members + member
    assert cache.get_seq_length() == 2 + 3 + 1
    assert cache.remove([0]) == [2, 1] and cache.question_width == 2  # question 3 has left
    cache.add(_question(5.0, 1), 1)  # takes the freed slot 2
    assert cache.group[: cache.rows].tolist() == [1, 0, 2] and cache.group_slots == 3
    _step(cache, 8.0)
    _step(cache, 8.0)
    _step(cache, 8.0)
    with pytest.raises(ValueError, match="outgrew the row cache's 4 slots"):
        cache.layers[0].update(torch.ones(3, 1, 1, 1), torch.ones(3, 1, 1, 1), 0)


def test_row_cache_grows_keeping_its_live_rows():
    prefix = [(torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))]
    cache = RowCache(prefix, 1, capacity=2, slots=3, question_slots=2)
    cache.add(_question(5.0, 2), 2)
    _step(cache, 6.0)
    with pytest.raises(ValueError, match="row cache full"):
        cache.add(_question(1.0, 1), 1)
    cache.grow(4)
    cache.grow(3)  # never shrinks
    assert cache.capacity == 4 and cache.layers[0].keys.shape[0] == 4
    assert cache.lengths.tolist() == [1, 1, 0, 0] and cache.rows == 2
    assert cache.layers[0].question_k[:1, 0, :, 0].tolist() == [[5.0, 5.0]]
    assert cache.layers[0].question_v[:1, 0, :, 0].tolist() == [[-5.0, -5.0]]
    cache.add(_question(1.0, 1), 2)
    assert cache.rows == 4 and cache.host_lengths == [1, 1, 0, 0]
    # the next step writes each row's key at its own length, in the grown buffers
    _step(cache, 9.0)
    assert cache.layers[0].keys[:, 0, :, 0].tolist() == [[6, 9, 0], [6, 9, 0], [9, 0, 0],
                                                          [9, 0, 0]]


def test_row_cache_question_slots_follow_the_groups_not_the_rows():
    """Question keys are held once a group: a cache for 8 rows keeps 2 question slots at
    first and doubles them when a third group arrives, the first two groups' keys kept."""
    prefix = [(torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))]
    cache = RowCache(prefix, 1, capacity=8, slots=3, question_slots=2, groups=2)
    assert cache.layers[0].question_k.shape[0] == 2 and cache.layers[0].keys.shape[0] == 8
    cache.add(_question(1.0, 1), 3)
    cache.add(_question(2.0, 2), 3)
    _step(cache, 6.0)
    cache.add(_question(3.0, 2), 2)
    assert cache.layers[0].question_k.shape[0] == 4 and len(cache.group_lengths) == 4
    assert cache.layers[0].question_k[:3, 0, :, 0].tolist() == [[1, 0], [2, 2], [3, 3]]
    assert cache.layers[0].question_v[:3, 0, :, 0].tolist() == [[-1, 0], [-2, -2], [-3, -3]]
    assert cache.group_lengths.tolist()[:3] == [1, 2, 2] and cache.group_slots == 3
    layout = cache.layout(torch.float32)
    assert layout.group_mask.shape[0] == 3 and layout.members == 3


def _plain_sample(model, tok, prompt, key_of, m, temperature, max_new, eos=VOCAB - 1):
    """The pre-cascade scheme, spelled out: m rows, each with its own copy of the whole prompt
    in a DynamicCache, the same hashed Gumbel noise; stops at EOS or the token limit."""
    enc = tok(prompt, return_tensors="pt")
    out = model(**enc, use_cache=True, logits_to_keep=1)
    cache = out[attention.cache_kwarg(model)]
    cache.batch_repeat_interleave(m)
    logits = out.logits[:, -1].float().expand(m, -1)
    keys = torch.tensor([key_of(s) for s in range(m)], dtype=torch.int32)
    hashes = noise.token_hashes(logits.shape[-1], "cpu")
    tokens, done = [[] for _ in range(m)], [False] * m
    for step in range(max_new):
        chosen = noise.gumbel_argmax(logits / temperature, keys, torch.full((m,), step), hashes)
        for r, t in enumerate(chosen.tolist()):
            if not done[r]:
                done[r] = t == eos
                if not done[r]:
                    tokens[r].append(t)
        if all(done) or step == max_new - 1:
            return tokens
        out = model(input_ids=chosen[:, None], use_cache=True,
                    **{attention.cache_kwarg(model): cache})
        logits = out.logits[:, -1].float()


@torch.inference_mode()
def test_samples_agree_with_a_plain_per_row_cache(tiny):
    """Measured on this machine: 160 of 160 samples identical (10 questions x 16, 40 tokens).

    Only float rounding separates the two paths (logits within ~1e-6), so a draw can differ
    only where its two best perturbed scores are closer than that: the bound asserted leaves
    room for such near-ties on other CPUs.
    """
    model, tok = tiny
    m, kw = 16, dict(temperature=0.7, max_new_tokens=40)
    gens = sample(model, tok, PROMPTS, m=m, question_ids=IDS, seed=3, **kw)
    same = total = 0
    for q, prompt in enumerate(PROMPTS):
        ref = _plain_sample(model, tok, prompt, lambda s, q=q: noise.row_key(3, IDS[q], s), m,
                            kw["temperature"], kw["max_new_tokens"])
        same += sum(g.token_ids == r for g, r in zip(gens[q], ref, strict=True))
        total += m
    assert same >= 0.95 * total, f"{same}/{total}"


@pytest.mark.slow
@torch.inference_mode()
def test_embedded_model_samples_agree_with_a_plain_per_row_cache():
    """SmolLM2-135M, float32, 4 arith questions x 16 samples x 32 tokens. Measured on this
    machine: 64 of 64 identical. A differing sample is a near-tie: its two best perturbed
    scores closer than the paths' rounding difference in the logits."""
    from zerogap.models import load_model
    from zerogap.tasks import get_task

    loaded = load_model("embedded", device="cpu")
    model, tok = loaded.model, loaded.tokenizer
    task = get_task("arith")
    questions = task.questions("test")[:4]
    prompts, ids = [task.prompt(q) for q in questions], [q.id for q in questions]
    m = 16
    gens = sample(model, tok, prompts, m=m, temperature=0.7, max_new_tokens=32,
                  question_ids=ids, seed=5)
    same = 0
    for q, prompt in enumerate(prompts):
        ref = _plain_sample(model, tok, prompt, lambda s, q=q: noise.row_key(5, ids[q], s), m,
                            0.7, 32, eos=tok.eos_token_id)
        same += sum(g.token_ids == r for g, r in zip(gens[q], ref, strict=True))
    assert same >= 0.9 * m * len(prompts), f"{same}/{m * len(prompts)}"


def test_automatic_batch_size_gives_the_same_samples(tiny):
    model, tok = tiny
    kw = dict(m=6, temperature=0.9, max_new_tokens=8, question_ids=IDS, seed=1, stop=("\n",))
    auto = sample(model, tok, PROMPTS, **kw)  # 60 rows: batch size chosen by timing
    fixed = sample(model, tok, PROMPTS, max_batch=7, **kw)
    assert [[g.token_ids for g in q] for q in auto] == [[g.token_ids for g in q] for q in fixed]


@pytest.mark.parametrize("reads_rows", [True, False], ids=["cascade-source", "dense-source"])
@pytest.mark.parametrize("prompts", [PROMPTS[:3], ["xyz " + PROMPTS[0], "abc " + PROMPTS[1]]],
                         ids=["shared-prefix", "no-shared-prefix"])
@torch.no_grad()
def test_patch_source_layers_in_the_row_cache(tiny, prompts, reads_rows, monkeypatch):
    """A NeuronPatch keeps its source's keys as extra cache layers: greedy with the patch
    equals recomputing the patched model on the whole sequence without a cache, whether the
    source reads them with the cascade attention (a NeuronPatch does) or densely, with a
    padding mask (what a patch gets that does not say it reads the row cache)."""
    from helpers import tiny_model
    from zerogap.engine.cache import RowCache

    masks = []
    padding_mask = RowCache.padding_mask

    def counted(self):
        masks.append(1)
        return padding_mask(self)

    monkeypatch.setattr(RowCache, "padding_mask", counted)
    model, tok = tiny
    patch = NeuronPatch(tiny_model(1), [(0, i) for i in range(0, 128, 3)] + [(1, 7)])
    decodes = greedy(model, tok, prompts, max_new_tokens=8, return_entropy=True, max_batch=2,
                     patch=patch if reads_rows else lambda m: patch(m))
    assert bool(masks) != reads_rows  # the dense layers, and only they, needed a mask
    plain = greedy(model, tok, prompts, max_new_tokens=8, return_entropy=True)
    for prompt, d, p in zip(prompts, decodes, plain, strict=True):
        ids = torch.tensor([tok(prompt)["input_ids"] + d.token_ids])
        with patch(model):
            logits = model(input_ids=ids, use_cache=False).logits[0]
        start = ids.shape[1] - len(d.token_ids) - 1
        expected = entropy(logits[start : start + len(d.entropies)]).tolist()
        assert d.entropies == pytest.approx(expected, abs=1e-5)
        assert d.entropies != pytest.approx(p.entropies, abs=1e-5)  # the patch mattered


def _tiny(config_cls, model_cls, **extra):
    torch.manual_seed(0)
    config = config_cls(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                        num_hidden_layers=2, num_attention_heads=4, eos_token_id=VOCAB - 1,
                        pad_token_id=VOCAB - 1, bos_token_id=None, **extra)
    return model_cls(config).eval()


def test_other_full_attention_families_match_generate(tiny):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = tiny[1]
    for model in (_tiny(Qwen2Config, Qwen2ForCausalLM, num_key_value_heads=2),
                  _tiny(GPTNeoXConfig, GPTNeoXForCausalLM)):
        out = greedy(model, tok, PROMPTS[:3], max_new_tokens=6)
        for prompt, g in zip(PROMPTS, out, strict=False):
            enc = tok(prompt, return_tensors="pt")
            ref = model.generate(**enc, max_new_tokens=6, do_sample=False,
                                 pad_token_id=VOCAB - 1)[0, enc.input_ids.shape[1]:].tolist()
            assert g.token_ids == ref[: ref.index(VOCAB - 1)] if VOCAB - 1 in ref else ref


def test_sliding_window_models_are_refused_in_one_line(tiny):
    from transformers import MistralConfig, MistralForCausalLM

    model = _tiny(MistralConfig, MistralForCausalLM, num_key_value_heads=2, sliding_window=16)
    with pytest.raises(ValueError, match=r"MistralForCausalLM uses a sliding window") as err:
        check_supported(model)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="MistralForCausalLM"):
        greedy(model, tiny[1], PROMPTS[:1], max_new_tokens=2)


def test_stop_candidates_are_the_tokens_that_can_end_a_stop_string(tiny):
    tok = tiny[1]
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("e", "a", "Ċ")}  # "Ċ" is the newline
    assert ids["e"] in stop_tokens(tok, ("e",)) and ids["a"] not in stop_tokens(tok, ("e",))
    found = stop_tokens(tok, ("Answer:",))
    assert tok.convert_tokens_to_ids(":") in found and ids["a"] not in found
    assert ids["Ċ"] in stop_tokens(tok, ("\n\n",)) and stop_tokens(tok, ()) == frozenset()
