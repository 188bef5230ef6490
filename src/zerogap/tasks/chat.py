"""Prompts for instruct models: a task's prompt through the tokenizer's chat template, with an
optional system instruction (``--chat-template``, ``--system-instruction``).

:class:`ChatPrompts` wraps any task: its prompt becomes the user turn (the k-shot exemplars and
the question, as one message) of ``[system?, user]`` rendered with ``add_generation_prompt``,
so the model answers as the assistant; without a template, the system instruction is put
before the raw prompt, followed by a blank line (as lm-evaluation-harness does). Questions,
grading and stop strings are the task's. Its :meth:`~ChatPrompts.config` adds the template's
digest and the instruction to the task's, so a run records how it was prompted and a resume
with other prompting is refused like any other change of task.
"""

from __future__ import annotations

import hashlib
from typing import Any

from zerogap.errors import UserError
from zerogap.tasks.base import Grade, Question, Task

# The chat template named by this word rather than a file: the tokenizer's own.
TOKENIZER_TEMPLATE = "tokenizer"

class ChatPrompts:
    """``task`` prompted through ``template`` (Jinja text; None: no template) and ``system``.

    ``tokenizer`` renders the template (``apply_chat_template``); a tokenizer that adds its
    beginning-of-sequence token itself gets the rendering without the one the template writes,
    so the model never sees it twice.
    """

    def __init__(self, task: Task, tokenizer: Any, *, template: str | None,
                 system: str | None = None) -> None:
        if template is None and not system:
            raise ValueError("ChatPrompts needs a template or a system instruction")
        self.task, self.tokenizer, self.template, self.system = task, tokenizer, template, system
        self.name, self.stop = task.name, task.stop
        bos = getattr(tokenizer, "bos_token", None)
        self._strip = bos if bos and tokenizer("x")["input_ids"][:1] == [
            tokenizer.bos_token_id] else None

    def __getattr__(self, name: str) -> Any:  # rows, options, ...: the task's own
        return getattr(self.task, name)

    def questions(self, split: str = "test") -> list[Question]:
        return self.task.questions(split)

    def grade(self, question: Question, response: str) -> Grade:
        return self.task.grade(question, response)

    def prompt(self, question: Question) -> str:
        text = self.task.prompt(question)
        if self.template is None:
            return f"{self.system}\n\n{text}"
        messages = [{"role": "user", "content": text}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        rendered = render_chat(self.tokenizer, messages, template=self.template)
        if self._strip and rendered.startswith(self._strip):
            rendered = rendered[len(self._strip):]
        return rendered

    def config(self) -> dict:
        prompting: dict[str, Any] = {}
        if self.template is not None:
            prompting["chat_template"] = template_digest(self.template)
        if self.system:
            prompting["system_instruction"] = self.system
        return {**self.task.config(), **prompting}


def template_digest(template: str) -> str:
    """The digest a run records of the chat template that rendered its prompts."""
    return hashlib.sha256(template.encode()).hexdigest()[:16]


def render_chat(tokenizer: Any, messages: list[dict[str, str]], *,
                template: str | None = None) -> str:
    """``messages`` rendered by ``template`` (None: the tokenizer's own) for generation.

    Whatever the template does wrong is the user's to fix, so it is one line naming it: a Jinja
    error, a role it refuses, or an operation the Jinja sandbox forbids (``SecurityError``, a
    template reaching for Python internals).
    """
    try:
        return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                             add_generation_prompt=True)
    except Exception as err:  # any error of the user's template is theirs, not a bug of ours
        raise UserError(f"the chat template cannot render the prompt: "
                        f"{type(err).__name__}: {err}") from None


def read_template(value: str | None) -> str | None:
    """A ``--chat-template`` value as :func:`chat_prompts` takes it: None, the word
    :data:`TOKENIZER_TEMPLATE`, or a Jinja file's text (read now, before any model loads)."""
    if value in (None, TOKENIZER_TEMPLATE):
        return value
    from zerogap.io.files import read_text

    return read_text(value)


def chat_prompts(task: Task, tokenizer: Any, *, template: str | None,
                 system: str | None) -> Task:
    """``task`` as the flags ask: unchanged without them, else :class:`ChatPrompts`.

    ``template`` is Jinja text or ``"tokenizer"`` for the tokenizer's own template (refused
    with one line when it has none).
    """
    if template is None and not system:
        return task
    if template == TOKENIZER_TEMPLATE:
        template = getattr(tokenizer, "chat_template", None)
        if isinstance(template, dict):  # named templates: the default one
            template = template.get("default")
        if not template:
            raise UserError("--chat-template: this model's tokenizer has no chat template; "
                            "give a Jinja template file: --chat-template FILE")
    return ChatPrompts(task, tokenizer, template=template, system=system)
