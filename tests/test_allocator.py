"""`reasoner.allocator`: the malloc settings the `reasoner` command re-executes itself with, and what they change."""

import json
import os
import subprocess
import sys

import pytest

from reasoner import allocator

glibc_only = pytest.mark.skipif(not allocator.supported(), reason="glibc tunables need Linux with glibc")


def test_tuned_environ_adds_ours_and_keeps_the_users_values():
    env = allocator.tuned_environ({"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.arena_max=4:glibc.pthread.x=1"})
    got = dict(item.split("=", 1) for item in env["GLIBC_TUNABLES"].split(":"))
    assert got["glibc.malloc.arena_max"] == "4"  # the user's value wins
    assert got["glibc.pthread.x"] == "1"
    assert got["glibc.malloc.mmap_max"] == "0" and got["glibc.malloc.hugetlb"] == "1"
    assert env["REASONER_MALLOC"] == "tuned" and env["PATH"] == "/bin"
    assert allocator.active(allocator.tuned_environ({})) == allocator.supported()
    assert not allocator.active(env)  # arena_max is not ours


def test_default_environ_removes_exactly_ours():
    tuned = allocator.tuned_environ({"GLIBC_TUNABLES": "glibc.pthread.x=1"})
    back = allocator.default_environ(tuned)
    assert back["GLIBC_TUNABLES"] == "glibc.pthread.x=1" and back["REASONER_MALLOC"] == "default"
    assert "GLIBC_TUNABLES" not in allocator.default_environ(allocator.tuned_environ({}))


def _run_cli(env_updates: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "REASONER_MALLOC")}
    env.update(env_updates)
    out = subprocess.run([sys.executable, "-m", "reasoner.cli", "info", "--json"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_the_command_reexecs_itself_tuned_unless_told_not_to():
    assert _run_cli({})["malloc"].startswith("glibc tuned (arena_max=1,mmap_max=0,")
    assert _run_cli({"REASONER_MALLOC": "default"})["malloc"] == "glibc defaults"


def test_a_bad_mode_is_a_clear_error():
    env = dict(os.environ, REASONER_MALLOC="fast")
    out = subprocess.run([sys.executable, "-m", "reasoner.cli", "info"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode != 0 and "REASONER_MALLOC='fast': expected 'tuned' or 'default'" in out.stderr


_FAULTS = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 256 << 20
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):  # what XLA:CPU does with a step's temporaries: allocate, touch, free
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@glibc_only
def test_tuned_malloc_reuses_large_blocks_instead_of_faulting_them_in_again():
    """Five 256 MB malloc-touch-free rounds: glibc's defaults mmap and unmap each one (5 x 65,536 faults of 4 KB
    pages); tuned, the heap keeps the block after the first round (in 2 MB pages where THP is available)."""

    def faults(env):
        out = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip())

    default = faults(allocator.default_environ(os.environ))
    tuned = faults(allocator.tuned_environ(allocator.default_environ(os.environ)))
    assert default >= 5 * 60_000, default
    assert tuned <= 70_000, tuned  # at most the first round's pages
