"""Where `reasoner` commands keep compiled programs (reasoner.compile_cache), and that a second process hits them."""

import os
import subprocess
import sys

from reasoner import compile_cache


def test_where_the_cache_goes(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("REASONER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("REASONER_COMPILE_CACHE", raising=False)
    assert compile_cache.cache_path() == str(tmp_path / "cache" / "xla")
    assert compile_cache.cache_path(multi_process=True) is None  # a job of several processes opts in explicitly
    monkeypatch.setenv("REASONER_COMPILE_CACHE", str(tmp_path / "mine"))
    assert compile_cache.cache_path() == compile_cache.cache_path(multi_process=True) == str(tmp_path / "mine")
    for off in ("off", "0", "none"):
        monkeypatch.setenv("REASONER_COMPILE_CACHE", off)
        assert compile_cache.cache_path() is None
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "gs://bucket/xla")  # JAX's own variable wins
    assert compile_cache.cache_path() == "gs://bucket/xla"


PROBE = """
import os
import jax, jax.numpy as jnp
from reasoner.compile_cache import enable
enable()
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
f(jnp.ones((64, 64))).block_until_ready()
print(len(os.listdir(os.environ["JAX_COMPILATION_CACHE_DIR"])))
"""


def test_a_second_process_reads_what_the_first_compiled(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.update(REASONER_COMPILE_CACHE=str(tmp_path / "xla"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    first = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    entries = int(first.stdout.split()[-1])
    assert entries >= 1, first.stderr[-2000:]
    env["JAX_LOG_COMPILES"] = "1"
    second = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert int(second.stdout.split()[-1]) == entries  # nothing new written: every program came from the cache
    assert "Persistent compilation cache hit" in second.stderr, second.stderr[-3000:]
