"""The multistep task: determinism, correct equations, several distinct valid solutions per
question, grading, and the difficulty mix. Every check holds by construction of the generator
(seeded draws), none depends on a model."""

import collections
import random
import re

import pytest

from zerogap.analysis.headroom import preference_headroom
from zerogap.errors import UserError
from zerogap.tasks import get_task
from zerogap.tasks.multistep import (
    OPEN,
    MultistepConfig,
    Story,
    story_blocks,
    write_chosen,
    write_solution,
)
from zerogap.tasks.multistep_varied import Chooser

EQUATION = re.compile(r"\d+(?: [-+*/] \d+)+ = \d+")
RESULT_FIRST = re.compile(r"(\d+) = (\d+(?: [-+*/] \d+)+)(?![\d ]*=)")
IN_WORDS = re.compile(r"\d+(?: (?:plus|minus|times|divided by) \d+)+ is \d+")
WORD_OPS = {"plus": "+", "minus": "-", "times": "*", "divided by": "/"}


def equations(solution: str) -> list[str]:
    """Every equation of a solution as written, sums of several terms included."""
    return EQUATION.findall(solution)


def is_true(equation: str) -> bool:
    left, right = equation.split(" = ")
    tokens = left.split()
    value = int(tokens[0])
    for op, operand in zip(tokens[1::2], tokens[2::2], strict=True):
        b = int(operand)
        if op == "/":
            if value % b:
                return False
            value //= b
        else:
            value = {"+": value + b, "-": value - b, "*": value * b}[op]
    return value == int(right)


def test_same_seed_same_items_and_prompts():
    one, two = get_task("multistep", seed=5), get_task("multistep", seed=5)
    assert one.rows("test") == two.rows("test")
    assert one.prompt(one.questions()[3]) == two.prompt(two.questions()[3])
    assert one.rows("test") != get_task("multistep", seed=6).rows("test")


def test_splits_of_any_size_extend_each_other():
    small = get_task("multistep", n_test=20, n_train=10, k=0)
    large = get_task("multistep", n_test=300, n_train=0, k=0)
    assert large.rows("test")[:20] == small.rows("test")
    assert [q.id for q in small.questions("train")] == [f"train-{i}" for i in range(10)]
    train_texts = {q.text for q in get_task("multistep", n_train=100).questions("train")}
    assert not train_texts & {q.text for q in large.questions("test")}


def test_every_equation_is_true_and_the_answer_is_graded_correct():
    task = get_task("multistep", n_train=500)
    for row, question in zip(task.rows("train"), task.questions("train"), strict=True):
        found = equations(row.answer)
        assert len(found) >= 2, row.answer
        assert all(is_true(e) for e in found), row.answer
        assert row.answer.endswith(f"The answer is {question.answer}.")
        assert int(found[-1].split(" = ")[1]) == int(question.answer)  # the last step's result
        assert int(question.answer) >= 1
        assert task.grade(question, " " + row.answer).correct
        assert not task.grade(question, " The answer is 100000.").correct


def test_a_question_has_several_distinct_valid_solutions():
    task = get_task("multistep", n_test=120, k=0)
    disjoint = 0
    for index, question in enumerate(task.questions("test")):
        problem, _ = task.problem("test", index)
        texts = {write_solution(problem, random.Random(i)) for i in range(40)}
        assert len(texts) >= 5  # phrasings alone give that many
        for text in texts:
            assert all(is_true(e) for e in equations(text)), text
            assert task.grade(question, " " + text).correct
        # the quantities worked out on the way, leaving out the start's product and the split,
        # which every path shares
        middles = [{e for e in equations(t) if "*" not in e and "/" not in e} for t in texts]
        disjoint += any(not a & b for a in middles for b in middles if a and b)
    # orders and intermediate quantities: most questions have two solutions sharing no equation
    assert disjoint / 120 > 0.5


def test_stories_are_worked_through_in_different_orders_and_blocks():
    story = Story("Ann", "Bo", "pens", 10, None, (14, 17, -12), None, "")
    written = [write_solution(story, random.Random(i)) for i in range(200)]
    found = [set(equations(t)) for t in written]
    # event by event in another order than the question's, with other running totals
    assert any({"10 + 14 = 24", "24 - 12 = 12", "12 + 17 = 29"} <= e for e in found)
    assert any("14 + 17 = 31" in e or "17 + 14 = 31" in e for e in found)  # gains summed first
    assert any("31 - 12 = 19" in e for e in found)  # then their net change
    assert any("17 - 12 = 5" in e for e in found)  # or a gain and the loss netted first
    assert {t.split(".")[0] for t in written} == {o.format(N="Ann", x=10, o="pens").rstrip(".")
                                                   for o in OPEN}  # three openers


def test_blocks_keep_every_running_total_positive_and_use_every_event_once():
    task = get_task("multistep", n_test=200, k=0)
    for index in range(200):
        story, _ = task.problem("test", index)
        if not isinstance(story, Story):
            continue
        for seed in range(5):
            blocks = story_blocks(random.Random(seed), story)
            assert sorted(b for block in blocks for b in block) == sorted(story.events)
            total = story.start
            for block in blocks:
                assert sum(block) != 0
                total += sum(block)
                assert total >= 1


@pytest.mark.parametrize("steps", [2, 3, 4])
def test_step_weights_choose_the_number_of_steps(steps):
    weights = tuple(1 if s == steps else 0 for s in (2, 3, 4))
    task = get_task("multistep", n_test=80, step_weights=weights, k=0)
    assert {task.problem("test", i)[0].steps for i in range(80)} == {steps}


def test_the_default_mix_and_both_kinds_of_problem():
    task = get_task("multistep", n_test=600, k=0)
    problems = [task.problem("test", i)[0] for i in range(600)]
    counts = collections.Counter(p.steps for p in problems)
    for steps, weight in zip((2, 3, 4), MultistepConfig().step_weights, strict=True):
        share = weight / sum(MultistepConfig().step_weights)
        assert abs(counts[steps] / 600 - share) < 4 * (share * (1 - share) / 600) ** 0.5
    kinds = collections.Counter(type(p).__name__ for p in problems)
    assert kinds["Story"] > kinds["Purchase"] > 60


def test_number_ranges_bound_the_operands():
    task = get_task("multistep", n_test=100, number_ranges=((50, 60),), k=0)
    for index in range(100):
        problem, _ = task.problem("test", index)
        if isinstance(problem, Story):
            assert all(50 <= abs(b) <= 60 for b in problem.events)
            assert problem.packs is None or 50 <= problem.packs[1] <= 60
        else:
            assert all(50 <= price <= 60 for _, _, price in problem.goods)


@pytest.mark.parametrize(("options", "message"), [
    ({"step_weights": (0, 0, 0)}, "step_weights must be three weights"),
    ({"step_weights": (1, 1)}, "step_weights must be three weights"),
    ({"number_ranges": ((1, 5),)}, "2 <= low <= high"),
    ({"number_ranges": ()}, "at least one"),
])
def test_bad_options_are_refused_naming_them(options, message):
    with pytest.raises(UserError, match=message):
        MultistepConfig(**options)


def test_a_missing_split_is_refused():
    with pytest.raises(UserError, match="splits 'train' and 'test'"):
        get_task("multistep", k=0).questions("dev")


def test_exemplars_are_a_short_story_and_a_short_purchase():
    task = get_task("multistep", k=4)
    shots = task.exemplars()
    problems = {row.question: task.problem("train", i)[0]
                for i, row in enumerate(task.rows("train"))}
    kinds = [(type(problems[s.question]).__name__, problems[s.question].steps) for s in shots]
    assert kinds == [("Story", 2), ("Purchase", 3)] * 2
    assert len({s.question for s in shots}) == 4
    with pytest.raises(UserError, match="too few 3-step purchase items"):
        get_task("multistep", n_train=3)


def varied_equations(solution: str) -> list[str]:
    """Every equation of a second-writer solution in the symbolic form, whichever form it was
    written in (symbolic, result first, in words)."""
    found = [f"{left} = {result}" for result, left in RESULT_FIRST.findall(solution)]
    rest = RESULT_FIRST.sub("", solution)
    for words in IN_WORDS.findall(rest):
        left, result = words.rsplit(" is ", 1)
        for word, op in WORD_OPS.items():
            left = left.replace(f" {word} ", f" {op} ")
        found.append(f"{left} = {result}")
    return found + EQUATION.findall(IN_WORDS.sub("", rest))


def test_the_second_writer_is_seeded_and_every_draw_is_true_and_graded_correct():
    task = get_task("multistep", n_train=300, solutions=2)
    assert task.rows("train") == get_task("multistep", n_train=300, solutions=2).rows("train")
    assert task.rows("train") != get_task("multistep", n_train=300).rows("train")
    for index, (row, question) in enumerate(zip(task.rows("train"), task.questions("train"),
                                                strict=True)):
        draws = [row.answer, task.redraw("train", index, "a"), task.redraw("train", index, "b")]
        assert task.redraw("train", index, "a") == draws[1]  # seeded by (item, draw)
        for text in draws:
            found = varied_equations(text)
            assert found, text
            assert all(is_true(e) for e in found), text
            assert text.endswith(f"The answer is {question.answer}.")
            assert task.grade(question, " " + text).correct


def test_fresh_draws_of_the_second_writer_differ():
    task = get_task("multistep", n_train=100, solutions=2, k=0)
    distinct = [len({task.redraw("train", i, str(d)) for d in range(10)}) for i in range(100)]
    assert min(distinct) >= 8


def test_the_first_writer_stays_the_default_text():
    task = get_task("multistep", n_test=50, k=0)
    for index, row in enumerate(task.rows("test")):
        problem, rng = task.problem("test", index)
        assert row.answer == write_solution(problem, rng)
    with pytest.raises(UserError, match="solutions must be 1 or 2"):
        MultistepConfig(solutions=3)


def test_a_chooser_at_temperature_zero_takes_the_first_option_everywhere():
    task = get_task("multistep", n_test=30, k=0, solutions=2)
    for index in range(30):
        problem, _ = task.problem("test", index)
        modal = {write_chosen(problem, Chooser(random.Random(s), 1.0, 0.0), 2) for s in range(3)}
        assert len(modal) == 1
    sharp = Chooser(random.Random(0), exponent=1.0, temperature=0.7)
    counts = collections.Counter(sharp.index(4) for _ in range(4000))
    assert counts[0] > counts[1] > counts[2] > counts[3]
    flat = collections.Counter(Chooser(random.Random(0)).index(4) for _ in range(4000))
    assert max(flat.values()) - min(flat.values()) < 200


def words_and_marks(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text)


def test_the_second_writer_leaves_room_to_disperse_from_a_greedy_decode():
    """The variety check of bench/regime_search.py --task-only on the writer itself, mild
    preferences over every choice (exponent 0.5), T = 0.7 draws against the modal path: the
    second writer is within issue 58's bound (ROUGE-L <= 0.50), the first is not."""
    varied = get_task("multistep", n_test=64, k=0, solutions=2)
    first = get_task("multistep", n_test=64, k=0)
    found = preference_headroom(varied, "test", 64, 8, 0.5, words_and_marks)
    assert found.rouge_l_median <= 0.50 and found.trigger <= 0.40
    assert preference_headroom(first, "test", 64, 8, 0.5, words_and_marks).rouge_l_median > 0.55


@pytest.mark.slow
def test_the_second_writer_meets_the_variety_bound_in_the_embedded_models_tokens():
    from zerogap.models import EMBEDDED, load_tokenizer

    tokenizer = load_tokenizer(EMBEDDED)
    found = preference_headroom(get_task("multistep", n_test=64, k=0, solutions=2), "test", 64,
                                8, 0.5, lambda text: tokenizer(text, add_special_tokens=False)[
                                    "input_ids"])
    assert found.rouge_l_median <= 0.50 and found.trigger <= 0.40
