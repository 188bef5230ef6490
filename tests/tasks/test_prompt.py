"""k-shot CoT prompts: format, the seeded selection rule, exemplar files."""

import json
import random

import pytest

from zerogap.tasks import get_task
from zerogap.tasks.prompt import (
    Exemplar,
    cot_solution,
    load_exemplars,
    render_prefix,
    select_exemplars,
)


def test_cot_solution_rewrites_gsm8k_answers():
    answer = (
        "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
        "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer’s market.\n#### 18"
    )
    assert cot_solution(answer) == (
        "Janet sells 16 - 3 - 4 = 9 duck eggs a day. She makes 9 * 2 = $18 every day at the "
        "farmer’s market. The answer is 18."
    )
    assert cot_solution("It is 2+2 = <<2+2=4>>4\n#### 4") == "It is 2+2 = 4. The answer is 4."
    assert cot_solution("x\n#### 1,000") == "x. The answer is 1000."
    assert cot_solution("4 + 1 = 5.\nThe answer is 5.") == "4 + 1 = 5. The answer is 5."


@pytest.mark.parametrize("bad", ["no final answer", "#### many", "The answer is 5"])
def test_cot_solution_rejects_answers_without_a_final_number(bad):
    with pytest.raises(ValueError, match="####|The answer is"):
        cot_solution(bad)


def test_selection_rule_is_the_documented_one():
    pool = list(range(100))
    assert select_exemplars(pool, 8, seed=3) == random.Random(3).sample(range(100), 8)
    assert select_exemplars(pool, 8, seed=3) == select_exemplars(pool, 8, seed=3)
    assert select_exemplars(pool, 8, seed=3) != select_exemplars(pool, 8, seed=4)
    assert select_exemplars(pool, 0, seed=3) == []
    with pytest.raises(ValueError, match="k=101 exemplars requested but the train split has 100"):
        select_exemplars(pool, 101, seed=0)


def test_gsm8k_prompt_format(gsm8k_dir):
    task = get_task("gsm8k", path=gsm8k_dir, k=8, seed=0)
    train = [json.loads(line) for line in (gsm8k_dir / "train.jsonl").open(encoding="utf-8")]
    question = task.questions("test")[0]
    prompt = task.prompt(question)
    blocks = prompt.split("\n\n")
    assert len(blocks) == 9
    for block, index in zip(blocks[:8], random.Random(0).sample(range(len(train)), 8), strict=True):
        q, a = block.split("\nA: ")
        assert q == "Q: " + train[index]["question"].strip()
        assert a == cot_solution(train[index]["answer"])
        assert "<<" not in a and "####" not in a and "\n" not in a
        assert a.endswith(
            f"The answer is {train[index]['answer'].split('#### ')[-1].replace(',', '')}."
        )
    assert blocks[8] == f"Q: {question.text}\nA:"
    # every prompt shares the k-shot prefix; only the question part differs
    other = task.prompt(task.questions("test")[5])
    assert other.startswith(task.prefix()) and prompt.startswith(task.prefix())
    assert other != prompt


def test_k_and_seed_change_the_prompt(gsm8k_dir):
    q = get_task("gsm8k", path=gsm8k_dir).questions()[0]
    zero = get_task("gsm8k", path=gsm8k_dir, k=0).prompt(q)
    assert zero == f"Q: {q.text}\nA:"
    two = get_task("gsm8k", path=gsm8k_dir, k=2, seed=1).prompt(q)
    assert two.count("\nA: ") == 2 and two.endswith(zero)
    assert two == get_task("gsm8k", path=gsm8k_dir, k=2, seed=1).prompt(q)
    assert two != get_task("gsm8k", path=gsm8k_dir, k=2, seed=2).prompt(q)


def test_user_exemplar_file(tmp_path, gsm8k_dir):
    path = tmp_path / "shots.jsonl"
    rows = [
        {"question": "Ann has 2 cats and gets 3 more. How many?", "answer": "2 + 3 = 5.\n#### 5"},
        {"question": "Bo has 9 pens, loses 4. How many?", "answer": "9 - 4 = 5. The answer is 5."},
        {"question": "unused", "answer": "#### 1"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    assert load_exemplars(path)[1] == Exemplar(rows[1]["question"], rows[1]["answer"])
    task = get_task("gsm8k", path=gsm8k_dir, k=2, exemplars=str(path))
    q = task.questions()[0]
    assert task.prompt(q) == (
        "Q: Ann has 2 cats and gets 3 more. How many?\nA: 2 + 3 = 5. The answer is 5.\n\n"
        "Q: Bo has 9 pens, loses 4. How many?\nA: 9 - 4 = 5. The answer is 5.\n\n"
        f"Q: {q.text}\nA:"
    )
    assert task.config()["exemplars"] == str(path)
    with pytest.raises(ValueError, match="k=4 but .*shots.jsonl holds 3 exemplars"):
        get_task("gsm8k", path=gsm8k_dir, k=4, exemplars=str(path)).prompt(q)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "shots.jsonl:2: malformed JSON"),
        ('{"question": "q"}', "shots.jsonl:2: bad exemplar \\(missing field 'answer'\\)"),
        ('["a", "b"]', "shots.jsonl:2: expected a JSON object"),
        ('{"question": "q", "answer": "no number"}', "shots.jsonl:2: bad exemplar \\(solution"),
    ],
)
def test_bad_exemplar_file_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "shots.jsonl"
    path.write_text('{"question": "q", "answer": "#### 1"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_exemplars(path)


def test_render_prefix_of_no_exemplars_is_empty():
    assert render_prefix([]) == ""
