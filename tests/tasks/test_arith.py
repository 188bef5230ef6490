"""The generated arithmetic task: determinism, whole results, the difficulty mix."""

import collections
import json
import re

import pytest

from zerogap.tasks import get_task
from zerogap.tasks.arith import DEFAULT_STEP_WEIGHTS, ArithConfig

EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")


def equations(solution: str) -> list[tuple[int, str, int, int]]:
    return [(int(a), op, int(b), int(c)) for a, op, b, c in EQUATION.findall(solution)]


def test_same_seed_same_items_and_prompts():
    one, two = get_task("arith", seed=5), get_task("arith", seed=5)
    assert one.questions("test") == two.questions("test")
    assert one.prompt(one.questions()[3]) == two.prompt(two.questions()[3])
    assert one.questions("test") != get_task("arith", seed=6).questions("test")


def test_splits_of_any_size_extend_each_other():
    small = get_task("arith", n_test=20, n_train=10)
    large = get_task("arith", n_test=300, n_train=0, k=0)
    assert len(small.questions("test")) == 20 and len(large.questions("test")) == 300
    assert large.questions("test")[:20] == small.questions("test")
    assert [q.id for q in small.questions("train")] == [f"train-{i}" for i in range(10)]
    assert large.questions("train") == []
    # train and test are different streams
    train_texts = {q.text for q in get_task("arith", n_train=50).questions("train")}
    assert len(train_texts & {q.text for q in small.questions("test")}) < 3


def test_every_step_is_whole_and_the_answer_follows_from_the_steps():
    task = get_task("arith", n_train=600)
    counts = collections.Counter()
    for row, question in zip(task.rows("train"), task.questions("train"), strict=True):
        steps = equations(row.answer)
        assert 1 <= len(steps) <= 3, row.answer
        counts[len(steps)] += 1
        for a, op, b, c in steps:
            if op == "/":
                assert a % b == 0
            assert {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op] == c >= 2
            assert re.search(rf"\b{b}\b", question.text)  # every operand is in the question
        assert re.search(rf"\b{steps[0][0]}\b", question.text)
        # each step starts from the previous result, and the last result is the gold answer
        for (_, _, _, before), (after, _, _, _) in zip(steps, steps[1:], strict=False):
            assert after == before
        assert question.answer == str(steps[-1][3])
        assert row.answer.endswith(f"The answer is {question.answer}.")
        assert task.grade(question, " " + row.answer).correct
    # the default mix, within sampling noise (4 standard deviations) for 600 items
    for steps, weight in zip((1, 2, 3), DEFAULT_STEP_WEIGHTS, strict=True):
        assert abs(counts[steps] / 600 - weight) < 4 * (weight * (1 - weight) / 600) ** 0.5


@pytest.mark.parametrize(("weights", "steps"), [((1, 0, 0), 1), ((0, 1, 0), 2), ((0, 0, 1), 3)])
def test_step_weights_choose_the_number_of_steps(weights, steps):
    # k=0: without one-step train items the default 2-shot prompt cannot be built (refused)
    task = get_task("arith", n_test=60, step_weights=weights, k=0)
    assert {len(equations(r.answer)) for r in task.rows("test")} == {steps}


def test_one_step_items_use_all_four_operations_and_vary_wording():
    task = get_task("arith", n_test=200, step_weights=(1, 0, 0))
    ops = collections.Counter(equations(r.answer)[0][1] for r in task.rows("test"))
    assert set(ops) == {"+", "-", "*", "/"} and min(ops.values()) > 25
    texts = [q.text for q in task.questions()]
    assert len({t.split()[0] for t in texts}) > 10  # names vary
    assert len(set(texts)) > 190


def test_number_ranges_bound_the_operands():
    task = get_task("arith", n_test=100, step_weights=(1, 0, 0), number_ranges=((50, 60),))
    for row in task.rows("test"):
        a, op, b, c = equations(row.answer)[0]
        if op == "+":
            assert 50 <= a <= 60 and 50 <= b <= 60
        elif op == "*":
            assert 2 <= a <= 9 and 50 <= b <= 60


def test_prompt_format_is_the_shared_cot_format():
    task = get_task("arith", n_test=5, k=2)
    q = task.questions()[0]
    prompt = task.prompt(q)
    shots = prompt.split("\n\n")
    assert len(shots) == 3 and shots[-1] == f"Q: {q.text}\nA:"
    for shot in shots[:2]:
        assert shot.startswith("Q: ") and re.search(r"\nA: .* The answer is \d+\.$", shot)
    assert task.stop == ("Q:", "</s>", "<|im_end|>")


def test_config_validates_and_serialises():
    config = get_task("arith", seed=3, n_test=7).config()
    assert json.loads(json.dumps(config))["n_test"] == 7
    assert config["seed"] == 3 and config["task"] == "arith" and config["k"] == 2
    with pytest.raises(ValueError, match="n_test must be at least 0, got -1"):
        ArithConfig(n_test=-1)
    with pytest.raises(ValueError, match="step_weights must be three weights"):
        ArithConfig(step_weights=(0, 0, 0))
    with pytest.raises(ValueError, match="number_ranges must hold at least one"):
        ArithConfig(number_ranges=())
    with pytest.raises(ValueError, match="arith has splits 'train' and 'test', not 'dev'"):
        get_task("arith").questions("dev")


def test_exemplars_are_one_step_train_items_cycling_the_operations():
    task = get_task("arith", k=8, seed=1)
    shots = task.exemplars()
    train = {(r.question, r.answer) for r in task.rows("train")}
    assert all((e.question, e.solution) in train for e in shots)
    assert [equations(e.solution)[0][1] for e in shots] == ["+", "*", "-", "/"] * 2
    assert all(len(equations(e.solution)) == 1 for e in shots)
    assert len({e.question for e in shots}) == 8
    assert shots == get_task("arith", k=8, seed=1).exemplars()
    assert shots != get_task("arith", k=8, seed=2).exemplars()
    with pytest.raises(ValueError, match="too few one-step '\\+' items for the exemplars"):
        get_task("arith", k=2, n_train=0).exemplars()
