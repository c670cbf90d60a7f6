"""The stage timer every paper pipeline runs its stages through (`reasoner demo`'s "stage X ... done in N s")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from reasoner import allocator

T = TypeVar("T")


class StageTimer:
    """Runs a pipeline's stages one at a time through `stage(name, fn)`, logging each start and its duration.

    `seconds` maps each finished stage to its wall-clock seconds (rounded to 0.1), in run order: the per-stage
    timings of the pipeline's report. A stage that raises is logged as started and left out of `seconds`. After
    each stage the memory it freed goes back to the kernel (`allocator.release_free_memory`), so between stages a
    pipeline's resident size follows what it holds rather than the highest peak of any earlier stage (the peak
    within a stage is unchanged).
    """

    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.seconds: dict[str, float] = {}

    def stage(self, name: str, fn: Callable[[], T]) -> T:
        self.log(f"stage {name} ...")
        start = time.perf_counter()
        out = fn()
        allocator.release_free_memory()
        self.seconds[name] = round(time.perf_counter() - start, 1)
        self.log(f"stage {name} done in {self.seconds[name]:.1f} s")
        return out
