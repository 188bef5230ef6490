"""``gsm8k``: GSM8K (Cobbe et al., 2021) from a local copy or the hub.

Local: ``path`` is a folder with the release's ``train.jsonl`` and ``test.jsonl`` (fields
``question`` and ``answer``), or one such file (the test split). Without ``path`` the splits come
from the hub (``openai/gsm8k``, config ``main``) through the optional ``datasets`` package.
Gold answers are the number after ``####``. The default prompt is 8-shot: exemplars drawn from
the train split by the seeded rule of :func:`zerogap.tasks.prompt.select_exemplars`, their
answers rewritten (calculator annotations removed, ``#### N`` -> "The answer is N.").
"""

from __future__ import annotations

from zerogap.errors import DataError, UserError
from zerogap.tasks.base import register_task
from zerogap.tasks.jsonl import JsonlSource
from zerogap.tasks.qa import NumericQATask, PromptConfig, Row

HUB_ID, HUB_CONFIG = "openai/gsm8k", "main"


def load_from_hub(split: str) -> list[Row]:
    """The rows of ``split`` from the hub; a one-line error without ``datasets`` or the hub."""
    hint = "pass a local copy instead: --path DIR (a folder with train.jsonl and test.jsonl)"
    try:
        import datasets  # optional, heavy: only imported when no local path is given
    except ImportError:
        raise UserError(f"loading {HUB_ID} needs the 'datasets' package; {hint}") from None
    try:
        data = datasets.load_dataset(HUB_ID, HUB_CONFIG, split=split)
    except Exception as err:  # the hub's failures have many types (network, auth, cache)
        reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise DataError(f"could not load {HUB_ID} from the hub ({reason}); {hint}") from None
    return [
        Row(str(r["question"]).strip(), str(r["answer"]), f"{HUB_ID} {split} row {i}")
        for i, r in enumerate(data)
    ]


@register_task("gsm8k")
class GSM8KTask(NumericQATask):
    """GSM8K with the paper's k-shot CoT prompt; see the module docstring.

    Examples
    --------
    >>> GSM8KTask(path="data/gsm8k", k=8).config()["k"]
    8
    """

    name = "gsm8k"

    def __init__(
        self,
        *,
        path: str | None = None,
        k: int = 8,
        seed: int = 0,
        exemplars: str | None = None,
        mode: str = "anchor",
    ):
        super().__init__(PromptConfig(k=k, seed=seed, exemplars=exemplars, mode=mode))
        self.source = None if path is None else JsonlSource(str(path))

    def _load(self, split: str) -> list[Row]:
        if self.source is None:
            return load_from_hub(split)
        return self.source.read(split)

    def _options(self) -> dict:
        return {"path": None if self.source is None else self.source.path}
