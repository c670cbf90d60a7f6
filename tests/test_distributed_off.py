"""`REASONER_DISTRIBUTED=off` forces one process over every other variable, the explicit `REASONER_*` cluster
included (`launch/single_host.sh` sets it so that leftover launcher or SLURM variables never make a command wait
for peers). Pure functions and a `jax.distributed.initialize` that fails the test if called: no cluster needed."""

import jax
import pytest

from reasoner import distributed

EXPLICIT = {"REASONER_COORDINATOR": "127.0.0.1:1", "REASONER_NUM_PROCESSES": "2", "REASONER_PROCESS_ID": "1"}


@pytest.fixture
def never_join(monkeypatch):
    """A fresh, unjoined module whose `jax.distributed.initialize` raises: joining is a test failure."""
    def join(**kwargs):
        raise AssertionError(f"jax.distributed.initialize({kwargs}) called under REASONER_DISTRIBUTED=off")

    monkeypatch.setattr(distributed, "_initialized", False)
    monkeypatch.setattr(jax.distributed, "initialize", join)
    for key in (*EXPLICIT, "REASONER_DISTRIBUTED", "SLURM_STEP_NUM_TASKS", "TPU_WORKER_HOSTNAMES"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


@pytest.mark.parametrize("extra", [{}, {"SLURM_STEP_NUM_TASKS": "4", "TPU_WORKER_HOSTNAMES": "w0,w1"}])
def test_off_wins_over_an_explicit_cluster(never_join, extra):
    env = {**EXPLICIT, **extra, "REASONER_DISTRIBUTED": "off"}
    assert distributed.cluster_from_env(env) is None
    for key, value in env.items():
        never_join.setenv(key, value)
    assert distributed.maybe_initialize() == distributed.ClusterSpec(None, 1, 0)
    assert distributed.process_index() == 0 and distributed.is_primary()


def test_off_ignores_malformed_cluster_variables():
    for bad in ({"REASONER_COORDINATOR": "h:1"}, {**EXPLICIT, "REASONER_PROCESS_ID": "7"},
                {**EXPLICIT, "REASONER_COORDINATOR": "nohostport"}):
        assert distributed.cluster_from_env({**bad, "REASONER_DISTRIBUTED": "off"}) is None
        with pytest.raises(ValueError):
            distributed.cluster_from_env(bad)


def test_auto_and_unset_keep_the_explicit_cluster():
    for mode in ("", "auto"):
        spec = distributed.cluster_from_env({**EXPLICIT, "REASONER_DISTRIBUTED": mode})
        assert spec == distributed.ClusterSpec("127.0.0.1:1", 2, 1)


def test_a_bad_mode_is_named_even_beside_an_explicit_cluster():
    with pytest.raises(ValueError, match="REASONER_DISTRIBUTED='of'"):
        distributed.cluster_from_env({**EXPLICIT, "REASONER_DISTRIBUTED": "of"})
