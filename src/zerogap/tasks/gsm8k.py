"""``gsm8k``: GSM8K (Cobbe et al., 2021) from a local copy or the hub.

Local: ``path`` is a folder with the release's ``train.jsonl`` and ``test.jsonl`` (fields
``question`` and ``answer``), or one such file (the test split). Without ``path`` the splits come
from the hub (``openai/gsm8k``, config ``main``) through the optional ``datasets`` package (the
``datasets`` extra).
Gold answers are the number after ``####``. The default prompt is 8-shot: exemplars drawn from
the train split by the seeded rule of :func:`zerogap.tasks.prompt.select_exemplars`, their
answers rewritten (calculator annotations removed, ``#### N`` -> "The answer is N.").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zerogap.errors import DataError, UserError
from zerogap.tasks.base import register_task
from zerogap.tasks.jsonl import read_rows
from zerogap.tasks.qa import NumericQATask, PromptConfig, Row, paths_as_text

HUB_ID, HUB_CONFIG = "openai/gsm8k", "main"


def load_from_hub(split: str) -> list[Row]:
    """The rows of ``split`` from the hub; a one-line error without ``datasets`` or the hub."""
    # The task option, as zerogap sample/greedy/neurons take it; zerogap task show/grade spell
    # it --path.
    hint = ("or pass a local copy: --task-option path=DIR (a folder with train.jsonl and "
            "test.jsonl)")
    try:
        import datasets  # optional, heavy: only imported when no local path is given
    except ImportError:
        raise UserError(f"loading {HUB_ID} needs the 'datasets' package (pip install -e "
                        f"'.[datasets]' from a checkout), {hint}") from None
    try:
        data = datasets.load_dataset(HUB_ID, HUB_CONFIG, split=split)
    except Exception as err:  # the hub's failures have many types (network, auth, cache)
        reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise DataError(f"could not load {HUB_ID} from the hub ({reason}); {hint}") from None
    return [
        Row(str(r["question"]).strip(), str(r["answer"]), f"{HUB_ID} {split} row {i}")
        for i, r in enumerate(data)
    ]


@dataclass(frozen=True, kw_only=True)
class GSM8KConfig(PromptConfig):
    """Options of the gsm8k task: the prompt's, and where the data is."""

    path: str | None = field(default=None, metadata={
        "help": "folder with train.jsonl and test.jsonl, or the test file alone (none: the "
                "hub's openai/gsm8k)"})

    def __post_init__(self) -> None:
        paths_as_text(self, "path")
        super().__post_init__()


@register_task("gsm8k")
class GSM8KTask(NumericQATask):
    """GSM8K from a local copy or the hub, with the paper's k-shot chain-of-thought prompt.

    Where the data comes from: the module docstring.

    Examples
    --------
    >>> GSM8KTask(k=8).config()["k"]
    8
    """

    name = "gsm8k"
    config_class = GSM8KConfig
    options: GSM8KConfig

    def _check(self) -> None:
        if self.options.path is not None:  # the hub is reached on first use, not when built
            super()._check()

    def _load(self, split: str) -> list[Row]:
        if self.options.path is None:
            return load_from_hub(split)
        return read_rows(self.options.path, split)
