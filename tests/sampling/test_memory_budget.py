"""The generation memory budget counts what this process's malloc heap holds free.

Under the `reasoner` command's malloc settings (`reasoner.allocator`: no mmap, no trim) freed memory stays in the
process's heap, so the host's MemAvailable stays low after a large batch although the next batch can reuse it;
`free_memory_bytes` must count it, or a demo stops with a MemoryError that is not real (the Sequent-Prover demo's
student stage did, after its evaluations)."""

import os
import subprocess
import sys
import textwrap

from reasoner import allocator

CHILD = textwrap.dedent("""
    import json
    import numpy as np
    from reasoner.allocator import heap_free_bytes
    from reasoner.sampling.memory import free_memory_bytes

    before = heap_free_bytes()
    block = np.ones(1 << 26)  # 512 MiB, every page touched
    del block
    print(json.dumps({"before": before, "after": heap_free_bytes(), "budget": free_memory_bytes()}))
""")


def _run(env):
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def test_freed_heap_memory_counts_in_the_budget_under_the_tuned_allocator():
    if not allocator.supported():
        import pytest

        pytest.skip("glibc malloc tunables only exist on glibc Linux")
    tuned = _run(allocator.tuned_environ(os.environ))
    half_gib = 1 << 29
    # the freed 512 MiB stays in the heap (which held little free before) and the budget counts it
    assert tuned["before"] < half_gib // 8 and tuned["after"] >= half_gib
    assert tuned["budget"] >= tuned["after"]
    # under glibc's defaults a block that large is mmapped and unmapped on free: nothing extra is counted
    plain = _run(allocator.default_environ(os.environ))
    assert plain["after"] - plain["before"] < half_gib // 8


RELEASE = textwrap.dedent("""
    import json
    import os
    import numpy as np
    from reasoner import allocator

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    base = rss()
    block = np.ones(1 << 26)  # 512 MiB, every page touched
    del block
    kept = rss() - base
    released = allocator.release_free_memory()
    print(json.dumps({"kept": kept, "released": released, "after": rss() - base}))
""")


def test_a_pipeline_stage_hands_freed_memory_back_to_the_kernel():
    """The tuned allocator keeps a freed 512 MiB resident; `release_free_memory` (run after every pipeline stage
    by `StageTimer`) gives it back."""
    if not allocator.supported():
        import pytest

        pytest.skip("glibc malloc tunables only exist on glibc Linux")
    done = subprocess.run([sys.executable, "-c", RELEASE], env=allocator.tuned_environ(os.environ),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    out = json.loads(done.stdout.strip().splitlines()[-1])
    half_gib = 1 << 29
    assert out["kept"] >= half_gib * 0.9  # freed, but still resident under the tuned settings
    assert out["released"] >= half_gib * 0.9 and out["after"] < half_gib // 8
