"""``--model zerogap`` inside lm-evaluation-harness 0.4.13: its requests, its answers against
``--model hf``, repeats as m samples with per-request seeds, and RailCap's processor at work."""

import lm_eval
import pytest
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from zerogap.errors import UserError
from zerogap.harness import ZerogapLM, plan_requests, question_id, request_spec


def evaluate(model, model_args, tasks, *, limit=3, **kwargs) -> dict[int, list[str]]:
    """Run task ``gsm8k_local`` from ``tasks``; each document's raw responses by doc_id."""
    manager = TaskManager(include_path=str(tasks), include_defaults=False)
    out = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=["gsm8k_local"],
                                  task_manager=manager, limit=limit, log_samples=True,
                                  device="cpu", **kwargs)
    return {s["doc_id"]: s["resps"][0] for s in out["samples"]["gsm8k_local"]}


def _instance(doc_id, prompt, gen_kwargs, repeats):
    return Instance("generate_until", {}, (prompt, gen_kwargs), 0,
                    ("gsm8k_local", doc_id, repeats))


def test_repeats_become_one_prompt_with_m_samples_per_engine_call():
    sampled = {"until": ["Question:"], "do_sample": True, "temperature": 0.7}
    a, b = _instance(0, "Q0", sampled, 3), _instance(1, "Q1", sampled, 3)
    c = _instance(2, "Q2", {"until": ["Question:"], "do_sample": False}, 1)
    # The harness lists a request once per repeat, the same object each time.
    groups = plan_requests([a, a, a, b, b, b, c])
    assert [(g.m, [r.doc_id for r in g.requests], g.positions) for g in groups] == [
        (3, [0, 1], [[0, 1, 2], [3, 4, 5]]), (1, [2], [[6]])]
    assert question_id(b) == "gsm8k_local/1/0"


def test_generation_settings_map_onto_the_sampling_spec_or_are_refused():
    greedy, spec = request_spec({"until": "\n\n", "do_sample": True, "temperature": 0.5,
                                 "top_p": 0.9, "max_new_tokens": 12}, m=5, seed=3,
                                default_max_tokens=256)
    assert not greedy and (spec.m, spec.temperature, spec.top_p, spec.max_new_tokens,
                           spec.seed, spec.stop) == (5, 0.5, 0.9, 12, 3, ("\n\n",))
    assert request_spec({"do_sample": True, "temperature": 0.0}, m=1, seed=0,
                        default_max_tokens=8)[0]
    with pytest.raises(UserError, match="'repetition_penalty' is not supported"):
        request_spec({"repetition_penalty": 1.2}, m=1, seed=0, default_max_tokens=8)
    with pytest.raises(UserError, match="temperature"):
        request_spec({"do_sample": True, "temperature": 50.0}, m=1, seed=0,
                     default_max_tokens=8)


@pytest.mark.parametrize(("args", "message"), [
    ({"strategy": "railcap", "n": 0}, "--model_args n: must be at least 1, got 0"),
    ({"strategy": "railcap", "window": 3}, "window"),
    ({"strategy": "ted"}, r"strategy ted \(readout ted-kept\)"),
    ({"strategy": "all-zero"}, "strategy all-zero"),
    ({"strategy": "nope"}, "unknown strategy 'nope'"),
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"max_batch": "auto"}, "max_batch must be an integer >= 1"),
    ({"dtype": "int4"}, "dtype must be"),
])
def test_model_arguments_are_refused_before_the_model_loads(tmp_path, args, message):
    # The model path does not exist: an argument refused first never reaches the loader.
    with pytest.raises(UserError, match=message):
        ZerogapLM(pretrained=str(tmp_path / "missing"), **args)
    with pytest.raises(UserError, match="missing"):
        ZerogapLM(pretrained=str(tmp_path / "missing"))


def test_greedy_answers_equal_the_hf_models(tiny_dir, make_task, one_thread):
    tasks = make_task(repeats=2, max_gen_toks=24)
    hf = evaluate("hf", f"pretrained={tiny_dir}", tasks)
    ours = evaluate("zerogap", f"pretrained={tiny_dir}", tasks)
    assert sorted(ours) == sorted(hf) == [0, 1, 2]
    assert ours == hf
    assert all(len(set(r)) == 1 and len(r) == 2 for r in ours.values())  # one greedy answer


@pytest.mark.slow
def test_greedy_answers_equal_the_hf_models_on_the_embedded_model(make_task, one_thread):
    from zerogap.models import model_folder

    tasks = make_task(num_fewshot=2, max_gen_toks=32)
    hf = evaluate("hf", f"pretrained={model_folder('embedded')}", tasks, limit=2)
    # In the dtype --model hf loads the folder in (zerogap's auto is bfloat16 where it is native).
    ours = evaluate("zerogap", "pretrained=embedded,dtype=float32", tasks, limit=2)
    assert ours == hf and all(len(r[0]) > 20 for r in ours.values())  # real text, not stubs


def test_repeats_are_m_samples_keyed_by_request(tiny_dir, make_task, one_thread):
    tasks = make_task(repeats=4, do_sample=True, temperature=0.7, max_gen_toks=12)
    three = evaluate("zerogap", f"pretrained={tiny_dir},seed=5", tasks, limit=3)
    assert sorted(three) == [0, 1, 2] and all(len(r) == 4 for r in three.values())
    # Per-request seeds: a document's samples do not depend on the other documents served
    # with it, nor on how many there were.
    two = evaluate("zerogap", f"pretrained={tiny_dir},seed=5", tasks, limit=2)
    assert two == {0: three[0], 1: three[1]}


def test_railcap_caps_the_greedy_successor_inside_the_harness(tiny_dir, make_task, one_thread):
    greedy = evaluate("zerogap", f"pretrained={tiny_dir}", make_task(max_gen_toks=16))
    model = ZerogapLM(pretrained=str(tiny_dir), strategy="railcap", mode="ban", n=4)
    # At T = 0.01 plain sampling returns this model's greedy answer (identity fails the first
    # assertion below); RailCap cannot, whatever the temperature.
    tasks = make_task(repeats=3, do_sample=True, temperature=0.01, max_gen_toks=16)
    sampled = evaluate(model, None, tasks)
    assert all(len(greedy[d][0]) > 4 for d in greedy)  # each trajectory has n-gram successors
    for doc_id, responses in sampled.items():
        stats = model.stats[f"gsm8k_local/{doc_id}/0"]
        assert len(responses) == len(stats) == 3
        g = greedy[doc_id][0]
        for text, counted in zip(responses, stats, strict=True):
            # Byte tokens: a response that began with the trajectory's first n tokens had
            # their successor banned, so no response can be the greedy one.
            assert text != g
            if text[:4] == g[:4]:
                assert counted["interventions"] >= 1


def test_logits_strategies_refuse_greedy_requests(tiny_dir, make_task, one_thread):
    model = ZerogapLM(pretrained=str(tiny_dir), strategy="railcap")
    with pytest.raises(UserError, match="do_sample: true"):
        evaluate(model, None, make_task(), limit=1)


def test_chat_templates_come_from_the_tokenizer(tiny_dir):
    with pytest.raises(UserError, match="has no chat template"):
        ZerogapLM(pretrained=str(tiny_dir)).apply_chat_template([{"role": "user",
                                                                  "content": "2+2?"}])


@pytest.mark.slow
def test_the_embedded_models_chat_template_wraps_the_prompt():
    model = ZerogapLM(pretrained="embedded")
    text = model.apply_chat_template([{"role": "user", "content": "What is 2+2?"}])
    assert text.startswith("<|im_start|>") and text.rstrip().endswith("<|im_start|>assistant")
    assert "What is 2+2?" in text and model.chat_template(True)


def test_a_strategy_label_is_read_as_everywhere_else(tiny_dir):
    """``strategy=railcap:n=3,mode=ban`` (the harness splits at the comma: ``mode=ban`` comes
    as its own key) is the label ``zerogap sample --strategy`` and a study take; the dtype
    defaults to the command line's ``auto``."""
    import inspect

    model = ZerogapLM(pretrained=str(tiny_dir), strategy="railcap:n=3", mode="ban")
    assert (model.strategy.name, model.strategy.config.n, model.strategy.config.mode) == (
        "railcap", 3, "ban")
    assert inspect.signature(ZerogapLM).parameters["dtype"].default == "auto"
    with pytest.raises(UserError, match="given twice"):
        ZerogapLM(pretrained=str(tiny_dir), strategy="railcap:n=3", n=4)
