"""``--chat-template`` and ``--system-instruction``: prompts through the tokenizer's template,
recorded with the run, and a resume with other prompting refused."""

import copy

import pytest

from zerogap import cli
from zerogap.store import RunStore
from zerogap.tasks import get_task
from zerogap.tasks.chat import chat_prompts

pytestmark = pytest.mark.usefixtures("one_thread")

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture
def chat_tokenizer(smol_tokenizer):
    tokenizer = copy.deepcopy(smol_tokenizer)
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def test_the_prompt_is_the_user_turn_of_the_template(chat_tokenizer, smol_tokenizer):
    task = get_task("arith", n_test=3)
    question = task.questions()[0]
    chat = chat_prompts(task, chat_tokenizer, template="tokenizer", system="Be brief.")
    assert chat.prompt(question) == (f"<|system|>Be brief.<|end|><|user|>{task.prompt(question)}"
                                     "<|end|><|assistant|>")
    assert chat.questions() == task.questions() and chat.stop == task.stop
    assert chat.config()["system_instruction"] == "Be brief."
    assert chat.config()["chat_template"] != chat_prompts(
        task, chat_tokenizer, template=TEMPLATE + " ", system=None).config()["chat_template"]
    plain = chat_prompts(task, smol_tokenizer, template=None, system="Be brief.")
    assert plain.prompt(question) == "Be brief.\n\n" + task.prompt(question)
    assert chat_prompts(task, smol_tokenizer, template=None, system=None) is task


def test_a_run_records_its_prompting_and_refuses_other_prompting(
        tmp_path, make_tiny_llama, chat_tokenizer, smol_tokenizer, capsys):
    folder, bare = tmp_path / "instruct", tmp_path / "base"
    make_tiny_llama(0).save_pretrained(folder)
    chat_tokenizer.save_pretrained(folder)
    make_tiny_llama(0).save_pretrained(bare)
    untemplated = copy.deepcopy(smol_tokenizer)
    untemplated.chat_template = None
    untemplated.save_pretrained(bare)
    run = tmp_path / "run"
    argv = ["greedy", "--model", str(folder), "--task", "arith", "--task-option", "n_test=2",
            "--max-new-tokens", "2", "--out", str(run), "--quiet", "--chat-template",
            "--system-instruction", "Be brief."]
    assert cli.main(argv) == 0
    with RunStore(run, create=False) as store:
        config = store.config()["task_config"]
        assert len(store.completed_greedy()) == 2
    assert config["system_instruction"] == "Be brief." and len(config["chat_template"]) == 16
    assert cli.main(argv) == 0  # the same prompting: resumes (nothing left to do)
    capsys.readouterr()

    assert cli.main([*argv[:-1], "Answer in one line."]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "zerogap greedy: error:" in err
    # A template file gives the same prompts as the tokenizer's own: the same run.
    template = tmp_path / "chat.jinja"
    template.write_text(TEMPLATE)
    assert cli.main([*argv[:-3], "--chat-template", str(template), "--system-instruction",
                     "Be brief."]) == 0
    # A tokenizer without a template is refused in one line, before the run is created.
    other = tmp_path / "other"
    assert cli.main(["greedy", "--model", str(bare), "--task", "arith", "--task-option",
                     "n_test=2", "--out", str(other), "--quiet", "--chat-template"]) == 2
    err = capsys.readouterr().err
    assert "tokenizer has no chat template" in err and not other.exists()


def _study_argv(clean, contaminated, out, *extra) -> list[str]:
    return ["evaluate", "--clean", str(clean), "--contaminated", str(contaminated), "--task",
            "arith", "--task-option", "n_test=2", "--strategies", "identity", "-m", "2",
            "--max-new-tokens", "2", "--resamples", "20", "--out", str(out), "--quiet", *extra]


def test_a_study_prompts_both_models_through_the_template(
        tmp_path, make_tiny_llama, chat_tokenizer, smol_tokenizer, capsys):
    clean, contaminated = tmp_path / "clean", tmp_path / "contaminated"
    for seed, folder in enumerate((clean, contaminated)):
        make_tiny_llama(seed).save_pretrained(folder)
        chat_tokenizer.save_pretrained(folder)
    out = tmp_path / "study"
    chat = ("--chat-template", "--system-instruction", "Be brief.")
    assert cli.main(_study_argv(clean, contaminated, out, *chat)) == 0
    runs = sorted((out / "runs").iterdir())
    assert runs
    for run in runs:
        with RunStore(run, create=False) as store:
            config = store.config()["task_config"]
        assert config["system_instruction"] == "Be brief." and len(config["chat_template"]) == 16
    # A study file naming the same template as a file beside it (a relative path) and the
    # same instruction prompts the same way: it resumes those runs, sampling nothing new.
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "chat.jinja").write_text(TEMPLATE)
    study = tmp_path / "files" / "study.toml"
    study.write_text(f"""out = "../study"
strategies = ["identity"]
m = 2
max_new_tokens = 2
resamples = 20

[[setting]]
name = "setting"
clean = "{clean}"
contaminated = "{contaminated}"
task = "arith"
task_options = {{n_test = 2}}
chat_template = "chat.jinja"
system_instruction = "Be brief."
""")
    assert cli.main(["evaluate", str(study), "--quiet"]) == 0
    assert sorted((out / "runs").iterdir()) == runs
    # The same study prompted raw samples into other run directories.
    assert cli.main(_study_argv(clean, contaminated, out)) == 0
    assert len(list((out / "runs").iterdir())) == 2 * len(runs)
    capsys.readouterr()

    # A template file that is not there, and a tokenizer without a template: one line each,
    # before the study folder exists.
    bare = tmp_path / "bare"
    make_tiny_llama(0).save_pretrained(bare)
    untemplated = copy.deepcopy(smol_tokenizer)
    untemplated.chat_template = None
    untemplated.save_pretrained(bare)
    other = tmp_path / "other"
    for extra, message in ((["--chat-template", str(tmp_path / "no.jinja")], "no.jinja"),
                           (["--chat-template"], "tokenizer has no chat template")):
        assert cli.main(_study_argv(bare, bare, other, *extra)) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and message in err, err
        assert not other.exists()
