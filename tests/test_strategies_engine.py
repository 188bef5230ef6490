"""Strategies on the real sampling engine: RailCap against Identity on a model that memorised
its items, and the shortcut patch inside the engine's cache handling."""

import pytest
import torch

from zerogap.decoding.blocking import entropy
from zerogap.decoding.shortcut import NeuronPatch
from zerogap.decoding.specs import answer_marker_ids
from zerogap.engine import greedy, sample
from zerogap.engine.base import LogitsEdit, SamplingSpec
from zerogap.engine.hf import HFBackend
from zerogap.io.neurons import save_neurons
from zerogap.models import LoadedModel, weight_fingerprint
from zerogap.pipelines.neurons import locate_neurons
from zerogap.readout import run_counts
from zerogap.runs import run_sample
from zerogap.store import GreedyRow, RunStore
from zerogap.strategies import PrepareContext, get_strategy
from zerogap.tasks.base import Grade, Question, Task
from zerogap.tasks.extract import ANSWER_MARKERS

pytestmark = pytest.mark.usefixtures("one_thread")

ITEMS = [
    ("Tom has 12 pens and gives away 5.", "Tom keeps 12 - 5 = 7 pens. The answer is 7."),
    ("Ann buys 3 bags of 4 apples.", "Ann has 3 * 4 = 12 apples. The answer is 12."),
    ("Sam reads 9 pages a day for 2 days.", "Sam reads 9 * 2 = 18 pages. The answer is 18."),
    ("Lia had 20 coins and lost 8.", "Lia has 20 - 8 = 12 coins left. The answer is 12."),
]
PROMPTS = [f"Question: {q}\nAnswer:" for q, _ in ITEMS]
IDS = [f"q{i}" for i in range(len(ITEMS))]


# The fixture's criterion: at every answer position (EOS included) the item's next token has
# probability >= MIN_TARGET_PROB under the sampling temperature. Then greedy decoding returns every
# answer with a margin that float differences between CPUs cannot flip, and a plain sample follows
# a 20-token answer with probability >= 0.995**20 ~ 0.90: the model memorised its items by
# construction, whatever trajectory training took on this CPU.
MIN_TARGET_PROB = 0.995
SAMPLING_TEMPERATURE = 0.7
MAX_TRAIN_STEPS = 600
CHECK_EVERY = 10


def _target_probability(model, ids, mask, labels) -> float:
    """Smallest probability, at ``SAMPLING_TEMPERATURE``, of a labelled next token."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    targets = labels[:, 1:]
    keep = targets != -100
    probs = (logits / SAMPLING_TEMPERATURE).softmax(-1)
    return probs[keep].gather(-1, targets[keep][:, None]).min().item()


@pytest.fixture(scope="module")
def memorised(make_tiny_llama, smol_tokenizer, one_thread):
    """The tiny Llama fine-tuned (a few seconds) until it meets the criterion above.

    Embeddings are scaled up and frozen so that the output distribution is peaked (a model that
    memorised its items samples them back) and each step is cheap. Training stops as soon as the
    criterion holds (checked every ``CHECK_EVERY`` steps) and fails, saying by how much it missed,
    after ``MAX_TRAIN_STEPS``.
    """
    model = make_tiny_llama(0)
    tok = smol_tokenizer
    seqs = [tok(p)["input_ids"] + tok(" " + a)["input_ids"] + [tok.eos_token_id]
            for p, (_, a) in zip(PROMPTS, ITEMS, strict=True)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.eos_token_id)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    labels = torch.full((len(seqs), width), -100)
    for i, (p, s) in enumerate(zip(PROMPTS, seqs, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        answer_start = len(tok(p)["input_ids"])  # only the answer (and EOS) is learnt
        labels[i, answer_start : len(s)] = torch.tensor(s[answer_start:])
    emb = model.model.embed_tokens.weight
    emb.requires_grad_(False)
    emb.mul_(30)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    lowest = 0.0
    for step in range(1, MAX_TRAIN_STEPS + 1):
        model.train()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % CHECK_EVERY == 0:
            model.eval()
            lowest = _target_probability(model, ids, mask, labels)
            if lowest >= MIN_TARGET_PROB:
                break
    model.eval()
    assert lowest >= MIN_TARGET_PROB, (
        f"memorisation criterion missed after {MAX_TRAIN_STEPS} steps: the least likely answer "
        f"token has probability {lowest:.4f} at T={SAMPLING_TEMPERATURE}, needed "
        f">= {MIN_TARGET_PROB} (short by {MIN_TARGET_PROB - lowest:.4f})"
    )
    decodes = greedy(model, tok, PROMPTS, max_new_tokens=24)
    assert [d.text.strip() for d in decodes] == [a for _, a in ITEMS]
    return model, tok, decodes


def share_on_greedy(model, tok, decodes, strategy, m=8):
    hooks = strategy.prepare(PrepareContext(m=m, greedy_source=lambda: decodes))
    out = HFBackend(model, tok).sample(
        PROMPTS, SamplingSpec(m=m, temperature=0.7, max_new_tokens=24, seed=0),
        question_ids=IDS, intervention=hooks.logits)
    same = [s.token_ids == d.token_ids for d, samples in zip(decodes, out, strict=True)
            for s in samples]
    return sum(same) / len(same), out


def test_railcap_pulls_samples_off_the_memorised_trajectory(memorised):
    model, tok, decodes = memorised
    identity, _ = share_on_greedy(model, tok, decodes, get_strategy("identity"))
    railcap, out = share_on_greedy(model, tok, decodes, get_strategy("railcap"))
    ban, _ = share_on_greedy(model, tok, decodes, get_strategy("railcap-ban"))
    assert identity >= 0.5  # the model did memorise: most plain samples are the greedy answer
    assert railcap <= identity - 0.4 and ban <= identity - 0.4
    stats = [s.stats for samples in out for s in samples]
    assert all(set(s) == {"interventions", "steps_on_trajectory"} for s in stats)
    assert sum(s["interventions"] for s in stats) > 0
    assert all(s["interventions"] <= s["steps_on_trajectory"] for s in stats)


class RecordingEdit(LogitsEdit):
    """A logits edit that records every step of the hook it wraps: the rows' generated tokens
    and whether the hook changed their logits."""

    def __init__(self, edit):
        self.edit, self.steps = edit, []

    def torch_hook(self, *, samples_per_question, device):
        hook = self.edit.torch_hook(samples_per_question=samples_per_question, device=device)

        def call(logits, tokens, lengths, question, sample):
            before = logits.clone()
            after = hook(logits, tokens, lengths, question, sample)
            self.steps += [(tokens[r, : lengths[r]].tolist(), bool((after[r] != before[r]).any()))
                           for r in range(logits.shape[0])]
            return after

        call.sample_stats = hook.sample_stats
        return call


def railcap_steps(model, tok, decodes, protect, markers):
    """(tokens so far, whether RailCap (n = 2) changed the logits) for every row and step of an
    engine run at a low temperature, and whether the tokens hold one of ``markers``."""
    strategy = get_strategy("railcap", {"protect": protect, "n": 2})
    hooks = strategy.prepare(PrepareContext(m=8, greedy_source=lambda: decodes,
                                            answer_markers=lambda: markers))
    edit = RecordingEdit(hooks.logits)
    HFBackend(model, tok).sample(PROMPTS, SamplingSpec(m=8, temperature=0.1, max_new_tokens=24,
                                                       seed=0),
                                 question_ids=IDS, intervention=edit)
    return [(any(tokens[i : i + len(m)] == list(m) for m in markers
                 for i in range(len(tokens) - len(m) + 1)), changed)
            for tokens, changed in edit.steps]


def test_railcap_protecting_the_answer_never_caps_after_the_marker(memorised):
    model, tok, decodes = memorised
    # The task's marker: protected samples are still capped before it.
    steps = railcap_steps(model, tok, decodes, "answer", answer_marker_ids(tok, ANSWER_MARKERS))
    assert any(changed for seen, changed in steps if not seen)
    assert not any(changed for seen, changed in steps if seen)
    # A marker every sample writes first (its answer's first two tokens, which the model
    # memorised and RailCap at n = 2 cannot cap yet): Algorithm 1 caps the step right after it
    # on every sample still on its trajectory, the option never caps there.
    first = tuple({tuple(d.token_ids[:2]) for d in decodes})
    plain = railcap_steps(model, tok, decodes, "none", first)
    protected = railcap_steps(model, tok, decodes, "answer", first)
    assert sum(changed for seen, changed in plain if seen) >= len(PROMPTS) * 8 // 2
    assert sum(seen for seen, _ in protected) >= len(PROMPTS) * 8 // 2
    assert not any(changed for _, changed in protected)


@torch.no_grad()
def test_patched_greedy_in_engine_equals_uncached_recompute(memorised, make_tiny_llama):
    """The engine splits the shared prefix, joins rows and rebuilds caches every step; the patch
    source must see exactly the evaluated model's context throughout."""
    target, tok, _ = memorised
    patch = NeuronPatch(make_tiny_llama(1), [(0, i) for i in range(0, 128, 3)] + [(1, 7)])
    decodes = greedy(target, tok, PROMPTS[:3], max_new_tokens=6, patch=patch,
                     return_entropy=True)
    plain = greedy(target, tok, PROMPTS[:3], max_new_tokens=6, return_entropy=True)
    for prompt, d, p in zip(PROMPTS, decodes, plain, strict=False):
        ids = torch.tensor([tok(prompt)["input_ids"] + d.token_ids])
        with patch(target):
            logits = target(input_ids=ids, use_cache=False).logits[0]
        start = ids.shape[1] - len(d.token_ids) - 1
        expected = entropy(logits[start : start + len(d.entropies)])
        assert d.entropies == pytest.approx(expected.tolist(), abs=1e-4)
        assert d.entropies != pytest.approx(p.entropies, abs=1e-2)  # the patch mattered


class MemoTask:
    """The memorised items as a task: exact-answer grading (a real implementation of Task)."""

    name = "memo"
    stop = ()

    def questions(self, split="test"):
        return [Question(f"q{i}", q, a) for i, (q, a) in enumerate(ITEMS)]

    def prompt(self, question):
        return f"Question: {question.text}\nAnswer:"

    def grade(self, question, response):
        ok = response.strip() == question.answer
        return Grade(response.strip() if ok else None, ok)

    def config(self):
        return {}


def test_locate_neurons_then_shortcut_strategy_samples(memorised, make_tiny_llama, tmp_path):
    contaminated, tok, _ = memorised
    base, uncontaminated = make_tiny_llama(1), make_tiny_llama(2)
    task = MemoTask()
    qs = task.questions()
    assert isinstance(task, Task)
    ranking, meta = locate_neurons(base, contaminated, uncontaminated, tok, task, qs[:2], qs[2:],
                                   block_size=64, max_new_tokens=24)
    assert sorted(ranking) == [(0, i) for i in range(128)]  # every ranked neuron, once
    assert meta["accuracy"] == {"base": 0.0, "contaminated": 1.0}
    path = tmp_path / "neurons.json"
    save_neurons(path, ranking, meta)
    strategy = get_strategy("shortcut", {"neurons": str(path), "top_k": 64})
    hooks = strategy.prepare(PrepareContext(m=2, load_model=lambda spec: base))
    out = HFBackend(contaminated, tok).sample(
        PROMPTS, SamplingSpec(m=2, temperature=0.7, max_new_tokens=16, seed=0),
        question_ids=IDS, patch=hooks.patch)
    plain = sample(contaminated, tok, PROMPTS, m=2, temperature=0.7, max_new_tokens=16,
                   question_ids=IDS, seed=0)
    assert [s.token_ids for q in out for s in q] != [s.token_ids for q in plain for s in q]


def test_locating_with_candidates_scores_only_the_blocks_of_highest_comparative_score(
        memorised, make_tiny_llama):
    from zerogap.pipelines.neurons import Journal, candidate_blocks, comparative_scores

    contaminated, tok, _ = memorised
    base, uncontaminated = make_tiny_llama(1), make_tiny_llama(2)
    task = MemoTask()
    qs = task.questions()
    journal = Journal(None, {})
    ranking, meta = locate_neurons(base, contaminated, uncontaminated, tok, task, qs[:2], qs[2:],
                                   block_size=32, candidates=1, max_new_tokens=24,
                                   journal=journal)
    assert meta["block_size"] == 32 and meta["blocks_total"] == 4
    answers = [journal.results["leaked"][q.id] for q in qs[:2]]
    items = [(tok(task.prompt(q))["input_ids"], a) for q, a in zip(qs[:2], answers, strict=True)]
    best = candidate_blocks(comparative_scores(contaminated, uncontaminated, items), 32, 1)
    assert meta["blocks_scored"] == [list(b) for b in best]
    layer, start = best[0]
    # one unpatched pass per model, then the candidate block patched into each: nothing else
    assert sorted(journal.results) == sorted(
        ["leaked", "base", "contaminated", f"base+{layer}:{start}-{start + 31}",
         f"contaminated+{layer}:{start}-{start + 31}"])
    assert sorted(ranking) == [(0, i) for i in range(128)]


def run(strategy, loaded, store, greedy_store, m=4, **options):
    task = MemoTask()
    spec = SamplingSpec(m=m, temperature=0.7, max_new_tokens=24, seed=0)
    return run_sample(loaded, task, task.questions(), store, spec, split="test",
                      strategy=strategy, strategy_options=options, greedy_store=greedy_store)


def test_run_sample_stores_stats_reuses_greedy_and_reads_out(memorised, tmp_path, monkeypatch):
    model, tok, _ = memorised
    loaded = LoadedModel(model, tok, "memorised", weight_fingerprint(model))
    qs = MemoTask().questions()
    shared = RunStore(tmp_path / "greedy")
    rail_store = RunStore(tmp_path / "railcap")
    assert run("railcap", loaded, rail_store, shared) == 4
    greedy_rows = shared.greedy()
    assert [greedy_rows[q.id].text.strip() for q in qs] == [a for _, a in ITEMS]
    assert all(r.correct and r.entropies for r in greedy_rows.values())
    samples = list(rail_store.samples())
    assert len(samples) == 16 and all("interventions" in s.stats for s in samples)
    assert rail_store.config()["strategy_config"] == {"n": 4, "mode": "cap"}
    assert rail_store.config()["temperature"] == 0.7 and rail_store.config()["backend"] == "hf"
    assert run("railcap", loaded, rail_store, shared) == 0  # resumed: nothing left

    def no_greedy(*args, **kw):
        raise AssertionError("greedy decodes must come from the store")

    monkeypatch.setattr(HFBackend, "greedy", no_greedy)
    ted_store = RunStore(tmp_path / "ted")
    run("ted", loaded, ted_store, shared)
    kept = [s.stats["ted_kept"] for s in ted_store.samples()]
    # The memorised model mostly repeats its greedy answer: TED drops those samples.
    assert sum(kept) < len(kept)
    counts = run_counts(ted_store)
    assert [c["id"] for c in counts] == [q.id for q in qs]
    by_q = {}
    for s in ted_store.samples():
        by_q.setdefault(s.question_id, []).append(s)
    for c in counts:
        rows = by_q[c["id"]]
        n_kept = sum(r.stats["ted_kept"] for r in rows)
        assert c["samples"] == (n_kept or 4)
        assert c["correct"] == sum(r.correct for r in rows if r.stats["ted_kept"])

    zero_store = RunStore(tmp_path / "zero")
    run("all-zero", loaded, zero_store, shared)
    assert run_counts(zero_store) == [
        {"id": q.id, "correct": 0, "samples": 4, "first": 0, "truncated": 0} for q in qs
    ]
    with pytest.raises(ValueError, match="strategy railcap has no option 'temperature'"):
        run("railcap", loaded, RunStore(tmp_path / "t"), shared, temperature=1.0)


def test_lne_blocking_refuses_greedy_without_entropies(memorised, tmp_path):
    model, tok, decodes = memorised
    loaded = LoadedModel(model, tok, "memorised", weight_fingerprint(model))
    qs = MemoTask().questions()
    shared = RunStore(tmp_path / "greedy")
    shared.add_greedy([GreedyRow(q.id, d.token_ids, d.text, d.finish, None, True, None)
                       for q, d in zip(qs, decodes, strict=True)])
    with pytest.raises(ValueError, match="needs greedy entropies.*q0 \\(and 3 more\\)"):
        run("lne-blocking", loaded, RunStore(tmp_path / "lne"), shared, m=2)


def test_ted_filters_an_identity_run_into_the_run_ted_would_sample(memorised, tmp_path):
    """TED's decoding is identity's: filtering identity's samples gives, sample for sample, the
    run TED samples itself with the same seed (stats included)."""
    from zerogap.errors import UserError
    from zerogap.runs import run_filter

    ted = get_strategy("ted")

    model, tok, _ = memorised
    loaded = LoadedModel(model, tok, "memorised", weight_fingerprint(model))
    greedy_store = RunStore(tmp_path / "greedy")
    plain, own, filtered = (RunStore(tmp_path / n) for n in ("identity", "ted", "filtered"))
    run("identity", loaded, plain, greedy_store)
    run("ted", loaded, own, greedy_store)
    assert run_filter(plain, filtered, greedy_store, tok, strategy=ted) == 4
    assert run_filter(plain, filtered, greedy_store, tok, strategy=ted) == 0  # resumes
    assert list(filtered.samples()) == list(own.samples())
    assert run_counts(filtered) == run_counts(own)
    assert filtered.config()["samples_of"] == "identity"
    with pytest.raises(UserError, match="changes the decoding"):
        run_filter(plain, RunStore(tmp_path / "x"), greedy_store, tok,
                   strategy=get_strategy("railcap"))
    with pytest.raises(UserError, match="not plain"):
        run_filter(own, RunStore(tmp_path / "y"), greedy_store, tok, strategy=ted)


def test_a_run_with_its_own_m_per_question_draws_a_uniform_runs_first_samples(memorised,
                                                                              tmp_path):
    """An allocated run (RunRequest.samples) holds each question's first m_q samples of a
    uniform run of the same seed, a larger m_q adds only the indices it lacks, and TED,
    filtering it, reads the kept samples a filter of the uniform run reads there."""
    from zerogap.engine import base
    from zerogap.engine.hf import HFBackend
    from zerogap.errors import UserError
    from zerogap.runs import LoadedEngine, RunRequest, prepare, run_filter, run_greedy
    from zerogap.store import PER_QUESTION

    model, tok, _ = memorised
    loaded = LoadedModel(model, tok, "memorised", weight_fingerprint(model))
    task, ted = MemoTask(), get_strategy("ted")
    greedy_store = RunStore(tmp_path / "greedy")
    run_greedy(loaded, task, task.questions(), greedy_store, split="test", max_new_tokens=24)
    whole = RunStore(tmp_path / "whole")
    run("identity", loaded, whole, greedy_store, m=6)
    engine = LoadedEngine(loaded, HFBackend(model, tok, max_batch=16))

    def allocated(store, samples):
        request = RunRequest("memorised", task, "test", tuple(task.questions()),
                             get_strategy("identity"),
                             SamplingSpec(m=4, temperature=0.7, max_new_tokens=24, seed=0),
                             samples=samples)
        return prepare(request, engine).into(store, greedy_store=greedy_store)

    def first(store, plan):
        return [r for r in store.samples() if r.sample < plan[r.question_id]]

    small, large = {"q0": 2, "q1": 5, "q2": 1, "q3": 3}, {"q0": 2, "q1": 6, "q2": 4, "q3": 3}
    mine, filtered, reference = (RunStore(tmp_path / n) for n in ("mine", "ted", "reference"))
    assert allocated(mine, small) == 4
    assert mine.config()["m"] == PER_QUESTION and mine.sample_counts() == small
    assert list(mine.samples()) == first(whole, small)
    run_filter(mine, filtered, greedy_store, tok, strategy=ted)
    assert allocated(mine, large) == 2  # q1 and q2 grow; q0 and q3 hold enough
    assert allocated(mine, small) == 0  # a smaller plan draws nothing and keeps every sample
    assert list(mine.samples()) == first(whole, large)
    assert run_filter(mine, filtered, greedy_store, tok, strategy=ted) == 2
    run_filter(whole, reference, greedy_store, tok, strategy=ted)
    assert list(filtered.samples()) == first(reference, large)
    # TED's readout of the first m_q samples is the uniform filter's there
    assert run_counts(filtered, small) == run_counts(_prefix_store(reference, small, tmp_path))

    class Lookahead(type(ted)):
        """A statistic that reads later samples: the first m_q would read otherwise."""

        def sample_stats(self, greedy_text, texts, tokenizer):
            return [{"ted_kept": len(texts) > 3} for _ in texts]

    again, looked = RunStore(tmp_path / "again"), RunStore(tmp_path / "looked")
    allocated(again, small)
    run_filter(again, looked, greedy_store, tok, strategy=Lookahead("ted", ted.config))
    allocated(again, large)
    with pytest.raises(RuntimeError, match="changed when later samples were added"):
        run_filter(again, looked, greedy_store, tok, strategy=Lookahead("ted", ted.config))

    class NoRanges:
        capabilities = base.Capabilities(logits=True, patching=True, entropies=True)

    with base._BACKENDS.registered("no-ranges", NoRanges), \
            pytest.raises(UserError, match="no-ranges backend cannot draw a different m"):
        RunRequest("memorised", task, "test", tuple(task.questions()), get_strategy("identity"),
                   SamplingSpec(m=4), backend="no-ranges", samples=small)
    with pytest.raises(UserError, match="question q3: samples per question must be"):
        RunRequest("memorised", task, "test", tuple(task.questions()), get_strategy("identity"),
                   SamplingSpec(m=4), samples={**small, "q3": 0})


def _prefix_store(source: RunStore, plan: dict, tmp_path) -> RunStore:
    """A copy of ``source`` (config and samples) holding each question's first ``plan[q]``."""
    from zerogap.store import PER_QUESTION

    copy = RunStore(tmp_path / f"prefix-{source.run_dir.name}")
    copy.check_config({**source.config(), "m": PER_QUESTION})
    copy.add_samples(r for r in source.samples() if r.sample < plan[r.question_id])
    return copy
