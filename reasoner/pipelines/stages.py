"""What every paper pipeline shares: the stage timer it runs its stages through (`reasoner demo`'s "stage X ...
done in N s") and the devices its stages run on (`pipeline_devices`)."""

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


def pipeline_devices(config) -> list | None:
    """The devices every stage of a pipeline runs on: the first device alone when `config.single_device` is set,
    else None (every device).

    The CLI also drops the simulated-device flag before JAX starts (`reasoner.cli.demo.use_single_device`), but a
    Python caller in a process where JAX already started with several devices (a test, a notebook) cannot: the
    pipeline itself must lay its models, trainers and evaluations on one device. A job of several processes has
    no one device every process can use, so `single_device` there is a ValueError.
    """
    if not config.get("single_device"):
        return None
    import jax

    if jax.process_count() > 1:
        raise ValueError(f"single_device=True in a job of {jax.process_count()} processes: one device cannot hold a "
                         "multi-process run; expected --config.single_device=False")
    return jax.devices()[:1]
