"""Benchmarks: questions, k-shot prompts and graders, looked up by name."""

from zerogap.tasks.base import Grade, Question, Task, get_task, register_task, task_names

__all__ = ["Grade", "Question", "Task", "get_task", "register_task", "task_names"]
