"""Benchmarks: questions, k-shot prompts and graders, looked up by name.

Importing this package registers the built-in tasks: ``arith`` (generated word problems),
``multistep`` (generated multi-step problems with several solution paths, the embedded
default), ``gsm8k`` and ``jsonl`` (any JSONL file with named question/answer fields).
"""

from zerogap.tasks import arith, gsm8k, jsonl, multistep  # noqa: F401  (importing registers them)
from zerogap.tasks.base import (
    Grade,
    Question,
    Task,
    get_task,
    register_task,
    task_config_class,
    task_from_strings,
    task_names,
    task_option_values,
    task_options,
    task_summary,
)

__all__ = ["Grade", "Question", "Task", "get_task", "register_task", "task_config_class",
           "task_from_strings", "task_names", "task_option_values", "task_options",
           "task_summary"]
