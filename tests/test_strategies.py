"""The strategy registry: configs, --set parsing, hooks and readouts."""

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from zerogap.decoding.blocking import LNEBlockingHook
from zerogap.decoding.railcap import RailCapHook
from zerogap.decoding.shortcut import NeuronPatch
from zerogap.decoding.specs import BlockingEdit, NeuronPatchSpec, RailCapEdit
from zerogap.errors import DataError, StoreError, UserError
from zerogap.io.neurons import save_neurons
from zerogap.readout import check_readout, question_counts, readout_of
from zerogap.store import GreedyRow
from zerogap.strategies import (
    PrepareContext,
    get_strategy,
    parse_overrides,
    setting_names,
    strategy_from_record,
    strategy_names,
)


def word_tokenizer():
    words = ["[UNK]", "a", "b", "c", "d", "e", "f", "g", "h"]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def test_registry_holds_the_papers_strategies():
    assert strategy_names() == [
        "all-zero", "identity", "lne-blocking", "railcap", "railcap-ban", "shortcut", "ted",
        "ted-scaled"
    ]
    assert get_strategy("railcap-ban").config.mode == "ban"
    assert get_strategy("railcap-ban", {"mode": "cap"}).config.mode == "cap"
    assert get_strategy("identity").config.to_dict() == {}  # tau is the run's SamplingSpec
    assert get_strategy("railcap").requires == ("logits",)


def test_parse_overrides_types_and_errors():
    assert parse_overrides("railcap", ["n=2", "mode=ban"]) == {"n": 2, "mode": "ban"}
    assert parse_overrides("ted", ["dedup=No"]) == {"dedup": False}
    with pytest.raises(UserError, match="--set n: must be an integer, got 'four'"):
        parse_overrides("railcap", ["n=four"])
    with pytest.raises(UserError, match="has no option 'tau'; known: mode, n"):
        parse_overrides("railcap", ["tau=1"])
    with pytest.raises(UserError, match="--set mode: must be one of 'cap', 'ban', got 'clip'"):
        parse_overrides("railcap", ["mode=clip"])
    with pytest.raises(ValueError, match="expects KEY=VALUE"):
        parse_overrides("railcap", ["n"])
    with pytest.raises(ValueError, match="given twice"):
        parse_overrides("railcap", ["n=2", "n=3"])
    with pytest.raises(ValueError, match="known: none"):
        parse_overrides("all-zero", ["x=1"])
    with pytest.raises(ValueError, match="unknown strategy 'railcop'"):
        parse_overrides("railcop", [])
    with pytest.raises(UserError, match="RailCapConfig.mode must be one of 'cap', 'ban'"):
        get_strategy("railcap", {"mode": "clip"})


def test_record_round_trips_through_json():
    s = get_strategy("lne-blocking", {"t_task": 4})
    back = strategy_from_record("lne-blocking", json.loads(s.config.to_json()))
    assert back.name == "lne-blocking" and back.config == s.config
    assert setting_names("shortcut") == [
        "base", "neurons", "top_k"
    ]


def context(m, greedy=None, entropies=None, model=None):
    """A PrepareContext over given greedy token ids (and entropies) or a given model."""
    rows = None if greedy is None else [
        GreedyRow(f"q{i}", ids, "", "eos", None, False, None if entropies is None else ent)
        for i, (ids, ent) in enumerate(zip(greedy, entropies or [None] * len(greedy),
                                           strict=True))
    ]
    return PrepareContext(m=m, greedy_source=None if rows is None else (lambda: rows),
                  load_model=None if model is None else (lambda spec: model))


def test_specs_are_built_from_greedy_data_and_become_each_backends_form():
    rail = get_strategy("railcap", {"n": 2}).prepare(context(2, greedy=[[1, 2, 3]]))
    assert rail.logits == RailCapEdit(((1, 2, 3),), get_strategy("railcap", {"n": 2}).config)
    assert rail.patch is None
    assert rail.logits.request_args(0) == {"railcap": {"trajectory": [1, 2, 3], "n": 2,
                                                       "mode": "cap"}}
    hook = rail.logits.torch_hook(samples_per_question=2, device="cpu")
    assert isinstance(hook, RailCapHook)
    logits = torch.zeros(1, 5)
    logits[0, 3] = 1.0
    out = hook(logits, torch.tensor([[1, 2]]), torch.tensor([2]), torch.tensor([0]),
               torch.tensor([1]))
    assert out[0, 3] == 0.0
    lne = get_strategy("lne-blocking").prepare(
        context(1, greedy=[[1], [1]], entropies=[[0.0, 0.2], [2.0]]))
    assert lne.logits == BlockingEdit((6, 0))  # floor(7 * 0.95), floor(7 * 0)
    assert lne.logits.request_args(1) == {"lne_blocking": {"count": 0}}
    blocking = lne.logits.torch_hook(samples_per_question=1, device="cpu")
    assert isinstance(blocking, LNEBlockingHook) and blocking.counts.tolist() == [6, 0]
    nothing = context(1)  # identity asks for nothing: a context without sources serves it
    assert get_strategy("identity").prepare(nothing).logits is None
    with pytest.raises(StoreError, match="needs greedy entropies, but .* of q0 \\(and 0 more"):
        get_strategy("lne-blocking").prepare(context(1, greedy=[[1]], entropies=[None]))


def test_shortcut_checks_inputs_and_builds_the_patch(tmp_path, make_tiny_llama):
    base = make_tiny_llama(3)
    with pytest.raises(ValueError, match="neurons=PATH"):
        get_strategy("shortcut").check_inputs()
    path = tmp_path / "n.json"
    with pytest.raises(ValueError, match="base=MODEL"):
        get_strategy("shortcut", {"neurons": str(path)}).check_inputs()
    with pytest.raises(DataError, match="n.json: no such file"):
        get_strategy("shortcut", {"neurons": str(path), "base": "embedded"}).check_inputs()
    save_neurons(path, [(0, 4), (0, 5), (1, 6)], {})
    s = get_strategy("shortcut", {"neurons": str(path), "base": "embedded"})
    s.check_inputs()
    patch = s.prepare(context(1, model=base)).patch
    # top_k = 0: 4000 scaled to 1 x 128 ranked neurons = 2, the two best of the list.
    assert patch == NeuronPatchSpec(base, ((0, 4), (0, 5)))
    torch_patch = patch.torch_patch()
    assert isinstance(torch_patch, NeuronPatch) and torch_patch.neurons == [(0, 4), (0, 5)]
    s = get_strategy("shortcut", {"neurons": str(path), "top_k": 3})
    assert s.prepare(context(1, model=base)).patch.neurons == ((0, 4), (0, 5), (1, 6))


def test_ted_stats_and_counts_with_a_real_tokenizer():
    ted = get_strategy("ted")
    texts = ["a b c d e f", "a b c d e g", "h h h h", "h h h h", " g g g g g"]
    stats = ted.sample_stats(" a b c d e f ", texts, word_tokenizer())
    assert [s["ted_kept"] for s in stats] == [False, False, True, False, True]
    assert question_counts(ted.readout, [True, True, True, True, False], stats) == (1, 2)


def test_ted_scaled_takes_a_tau_by_solution_length_where_ted_keeps_the_codes():
    from zerogap.decoding.length_scale import GSM8K_SOLUTION_WORDS
    from zerogap.decoding.ted import scaled_tau
    from zerogap.strategies import solution_words, strategy_class
    from zerogap.tasks import get_task

    task = get_task("arith")
    questions = task.questions("test")[:8]
    words = solution_words(task, "test", questions)
    assert words is not None and 0 < words < GSM8K_SOLUTION_WORDS  # one-line solutions
    scaled = strategy_class("ted-scaled").task_settings(task, "test", questions)
    # the rule: the code's 2 edits times the solution length over GSM8K's, rounded, at least 0
    assert scaled == {"tau": max(0, round(2 * words / GSM8K_SOLUTION_WORDS))}
    assert scaled["tau"] < 2 and scaled["tau"] == scaled_tau(words)
    assert scaled_tau(GSM8K_SOLUTION_WORDS) == 2 and scaled_tau(0.0) == 0
    assert strategy_class("ted").task_settings(task, "test", questions) == {}
    assert strategy_class("ted-scaled").task_setting_records == {"tau": "ted_scaled_tau"}
    # the same filter and readout as ted; outside a study its tau is as set (default 2)
    assert get_strategy("ted-scaled").readout == "ted-kept"
    assert get_strategy("ted-scaled").config.tau == 2
    with pytest.raises(ValueError, match="solution length"):
        scaled_tau(-1.0)


def test_every_strategy_declares_a_readout_that_older_stores_imply():
    # ted-scaled came after every store recorded its readout kind: none implies its kind
    for name in strategy_names():
        kind = get_strategy(name).readout
        assert check_readout(kind) == kind
        assert readout_of({"strategy": name, "readout": kind}) == kind
        if name != "ted-scaled":
            assert readout_of({"strategy": name}) == kind


def test_a_strategy_the_backend_cannot_run_is_refused_up_front():
    from zerogap.engine.base import Capabilities
    from zerogap.runs import build_strategy, check_strategy
    from zerogap.strategies import strategy_class

    no_logits = Capabilities(logits=False, patching=True, entropies=True)
    with pytest.raises(UserError, match="strategy lne-blocking needs logits support, which "
                                        "the toy backend lacks"):
        check_strategy(get_strategy("lne-blocking"), no_logits, "toy")
    with pytest.raises(UserError, match="strategy railcap-ban needs logits support"):
        check_strategy(strategy_class("railcap-ban"), no_logits, "toy", "railcap-ban")
    check_strategy(get_strategy("ted"), no_logits, "toy")  # plain sampling: runs anywhere
    with pytest.raises(UserError, match="strategy shortcut needs patching support, which the "
                                        "vllm backend lacks"):
        build_strategy("shortcut", {}, "vllm")  # vLLM's class declares it: nothing starts
    assert build_strategy("ted", {}, "vllm").readout == "ted-kept"
