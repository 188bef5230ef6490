"""How many rows the engine decodes together: chosen from the call's own first decode steps."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

_log = logging.getLogger("zerogap.engine")


class BatchSizer:
    """Chooses rows per batch from the call's own first decode steps.

    The batch grows 16, 32, 64, ... rows up to ``limit`` (what free memory holds, or all the call
    needs); at each size the loop's iterations (forward pass, draw and host work: the real
    throughput) are timed, the best of two after one untimed iteration in which rows joined.
    Growth stops once the rate falls below 80% of the best so far (a shared machine's noise
    should not end it early) or a doubling decodes no faster than the size before it (more
    rows would then only take memory), and the size with the best rate is kept. A doubling
    that gains only a little still goes on: the first steps understate what a larger batch
    gains over a whole call (the demo's study in bfloat16, two workers side by side: 483 s
    growing while a doubling is faster at all, 619 s when each had to gain 10%, for 5% more
    peak memory; bench/bench_memory.py, docs/study.md). The memory budget bounds the rows.
    The timed steps decode real rows, so choosing costs only the few steps run below the final
    size; samples do not depend on batch size. Sizes and rates are logged (logger
    ``zerogap.engine``).

    Below :attr:`FLOOR` rows (or ``limit``, if smaller) neither happens: those sizes are the
    ramp, timed and logged but never kept nor taken as the rate a drop is measured from. A
    slowdown of the machine while they are timed (a study's other job loading its models on
    the same cores) could otherwise end the growth at 16 rows and leave the whole call there:
    in a demo, a job of 1,024 rows beside the neuron location took 218 s, where the same job
    kept 512 rows and took 95 s (docs/engine.md, "Batch size"). In every
    measurement here 64 rows decoded at 1.4-2.1 times the rate of 16, beside another job too.
    ``clock`` returns seconds (a test's own clock).
    """

    FIRST, TIMED, FLOOR = 16, 2, 64
    GAIN = 1.0  # the least speed-up a doubling must bring for the growth to go on

    def __init__(self, limit: int, clock: Callable[[], float] = time.perf_counter):
        self.limit = max(1, limit)
        self.floor = min(self.FLOOR, self.limit)
        self.clock = clock
        self.size = min(self.FIRST, self.limit)
        self.rates: dict[int, float] = {}
        self.done = self.size == self.limit
        self._times: list[float] = []  # rows per second of the timed iterations at this size
        self._last: float | None = None  # when the previous iteration started
        self._last_rows, self._untimed = 0, True  # its rows; whether rows joined in it
        if self.done:
            _log.info("batch of %d rows (all the call needs or memory holds)", self.size,
                      extra={"engine": {"rows": self.size}})

    def step(self, rows: int, *, admitted: bool, can_grow: bool) -> None:
        """Called at the top of each loop iteration with the live ``rows`` about to decode."""
        now = self.clock()
        if self._last is not None and not self._untimed:
            self._times.append(self._last_rows / (now - self._last))
        self._last, self._last_rows, self._untimed = now, rows, admitted
        if len(self._times) < self.TIMED:
            return
        self.rates[self.size] = max(self._times)
        self._times = []
        # Sizes from the floor up are the candidates, and the reference a drop is measured from.
        kept = [size for size in self.rates if size >= self.floor] or list(self.rates)
        slower = self.rates[self.size] < 0.8 * max(self.rates[size] for size in kept)
        half = self.rates.get(self.size // 2)
        flat = half is not None and self.size // 2 >= self.floor \
            and self.rates[self.size] < self.GAIN * half
        if self.size == self.limit or not can_grow or (self.size >= self.floor and slower) \
                or flat:
            self.size = max(kept, key=self.rates.__getitem__)
            self.done = True
            _log.info("batch of %d rows; decode tok/s by rows: %s", self.size,
                      {k: round(v) for k, v in self.rates.items()},
                      extra={"engine": {"rows": self.size, "rates": self.rates}})
        else:
            self.size = min(2 * self.size, self.limit)
            self._untimed = True

