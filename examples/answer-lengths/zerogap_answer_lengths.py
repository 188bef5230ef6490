"""A job kind a package adds to zerogap's study: per setting, the mean length (in tokens) of
each scored run's responses, question by question, written to
``OUT/answer-lengths/SETTING.json`` as ``{label: {question id: mean tokens}}``.

A study runs it when its file says ``jobs = ["answer-lengths"]``. The class is the whole kind:
what it writes and reads, what it has left, and how it runs; it loads no model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from zerogap.store import RunStore
from zerogap.study.job import Job, JobContext, Left, Planning, SettingRuns
from zerogap.study.kinds import register_job_kind


@register_job_kind("answer-lengths")
@dataclass
class AnswerLengths(Job):
    label: str
    output: Path
    timed = False  # cheap, and no sampling: not the study's time

    @classmethod
    def plan(cls, planning: Planning) -> list[AnswerLengths]:
        name = planning.setting.spec.name
        return [cls(f"{name} answer lengths", planning.out / "answer-lengths" / f"{name}.json")]

    def reads(self, runs: SettingRuns) -> tuple[Path, ...]:
        return tuple(runs.scored().values())

    def left(self, planning: Planning) -> Left:
        return Left(1)  # the runs it reads may have grown: always recomputed

    def gpus(self, engine: float) -> float:
        return 0.0

    def run(self, context: JobContext) -> None:
        context.progress.stage(f"{self.label}")
        lengths = {}
        for label, run_dir in context.runs.scored().items():
            tokens: dict[str, list[int]] = {}
            with RunStore(run_dir, create=False) as store:
                for row in store.samples():
                    tokens.setdefault(row.question_id, []).append(row.n_tokens)
            lengths[label] = {q: sum(n) / len(n) for q, n in tokens.items()}
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.output.write_text(json.dumps(lengths, indent=1) + "\n")
