"""An executor a package adds to zerogap's study: every job in this thread, one after another
in the order given (always a valid one: a job comes after those whose output it reads), each
job's label and seconds appended to the file its ``log`` option names.

``zerogap evaluate study.toml --executor serial:log=jobs.log``. The class is the whole
executor: its options, how it opens for a study, and the contract's members
(:mod:`zerogap.study.executor`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from zerogap.study.executor import Node, Opening, Slot, register_executor


@dataclass(frozen=True)
class SerialOptions:
    log: str | None = field(default=None, metadata={
        "help": "a file each job's label and seconds are appended to"})


class _Slot:
    """The one slot: events go straight to the caller; Ctrl-C reaches this thread itself."""

    index = 0

    def __init__(self, item: int, report: Callable[[int, tuple], None]) -> None:
        self.item, self._report = item, report

    def event(self) -> None:
        pass

    def report(self, *event: Any) -> None:
        self._report(self.item, event)


@register_executor("serial")
class Serial:
    name = "serial"
    options = SerialOptions
    width = 1

    def __init__(self, log: str | None) -> None:
        self.log = log

    @classmethod
    @contextmanager
    def opened(cls, opening: Opening, options: SerialOptions) -> Iterator[Serial]:
        yield cls(options.log)

    def check_engine(self, backend, options):
        from zerogap.runs import check_engine

        return check_engine(backend, options)

    def run(self, nodes: Sequence[Node], job: Callable[[int, Slot], None], *,
            report: Callable[[int, tuple], None] = lambda item, event: None,
            interrupted: Callable[[], None] = lambda: None) -> None:
        for item, node in enumerate(nodes):
            started = time.monotonic()
            try:
                job(item, _Slot(item, report))
            except KeyboardInterrupt:
                interrupted()
                raise
            if self.log is not None:
                with open(self.log, "a", encoding="utf-8") as handle:
                    handle.write(f"{node.label}\t{time.monotonic() - started:.1f}\n")
