"""``zerogap task``: list tasks, show a question's full prompt, grade a response."""

from __future__ import annotations

import argparse
import json

from zerogap.cli.flags import add_config_arguments, add_grading, add_markdown
from zerogap.errors import UserError
from zerogap.io.files import read_text
from zerogap.tasks import task_names, task_options
from zerogap.tasks.extract import modes

EXAMPLES = """examples:
  zerogap task list
  zerogap task list --markdown
  zerogap task show arith
  zerogap task show gsm8k --task-option path=data/gsm8k --task-option k=8 --index 0
  zerogap task grade gsm8k --task-option path=data/gsm8k --index 0 \\
      --response "The answer is 18."
  zerogap task grade gsm8k --task-option path=data/gsm8k --index 0 --response-file out.txt \\
      --grading lmeval-flexible
  zerogap task show jsonl --task-option path=my.jsonl --task-option question_field=prompt \\
      --task-option answer_field=target --index 3
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "task",
        help="list tasks, show prompts, grade responses",
        description="Inspect benchmark tasks: their prompts, gold answers and grading.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the registered tasks, each in a line, and the "
                                              "grading modes")
    add_markdown(listing)
    listing.set_defaults(func=_list)
    show = actions.add_parser("show", help="the full prompt and gold answer of one question")
    _add_question_args(show)
    show.set_defaults(func=_show)
    grade = actions.add_parser("grade", help="grade a response to one question")
    _add_question_args(grade)
    given = grade.add_mutually_exclusive_group(required=True)
    given.add_argument("--response", help="the response text")
    given.add_argument("--response-file", help="file holding the response text (UTF-8)")
    grade.set_defaults(func=_grade)


def _add_question_args(parser: argparse.ArgumentParser) -> None:
    from zerogap.study.spec import SettingSpec

    parser.add_argument("name", help="task name (see 'zerogap task list')")
    parser.add_argument("--index", type=int, default=0, metavar="N",
                        help="row index within the split, from 0")
    add_config_arguments(parser, SettingSpec, ("task_split", "task_options"))
    add_grading(parser)


def _task_and_question(args):
    from zerogap.config import parse_pairs
    from zerogap.tasks import task_from_strings

    pairs = parse_pairs("--task-option", args.task_option)
    if "mode" in pairs and pairs["mode"] != args.grading:
        raise UserError(f"--task-option mode={pairs['mode']} and --grading {args.grading} differ; "
                        "give the grading mode once, as --grading")
    task = task_from_strings(args.name, {**pairs, "mode": args.grading})
    questions = task.questions(args.split)
    if not 0 <= args.index < len(questions):
        raise UserError(
            f"--index {args.index} is out of range: split {args.split!r} of {args.name} has "
            f"{len(questions)} questions"
        )
    return task, questions[args.index]


def _list(args) -> int:
    if args.markdown:
        from zerogap.config import markdown_table
        from zerogap.tasks import task_config_class

        print(markdown_table("task", [(n, task_config_class(n), {}) for n in task_names()]),
              end="")
        return 0
    from zerogap.tasks import task_summary

    for name in task_names():
        print(f"{name:12} {task_summary(name)}")
    print(f"grading modes: {', '.join(modes())}")
    return 0


def _show(args) -> int:
    task, question = _task_and_question(args)
    prompt = task.prompt(question)  # an unusable exemplar file fails before anything is printed
    print(f"# task {task.name}, question {question.id}, gold answer {question.answer}")
    print(f"# config {json.dumps(task.config())}")
    print("# options (--task-option KEY=VALUE with zerogap sample):")
    for line in task_options(args.name):
        print(f"#   {line}")
    print(prompt)
    return 0


def _grade(args) -> int:
    task, question = _task_and_question(args)
    response = args.response if args.response is not None else read_text(args.response_file)
    grade = task.grade(question, response)
    print(
        json.dumps(
            {
                "task": task.name,
                "id": question.id,
                "mode": args.grading,
                "gold": question.answer,
                "extracted": grade.extracted,
                "correct": grade.correct,
            }
        )
    )
    return 0
