"""`single_device` in the A* and Sequent-Prover pipelines called from Python, where JAX already started with 8
simulated devices (the CLI drops that flag before JAX starts; a Python caller cannot): every stage (the models it
evaluates, SFT, GRPO, DPO) runs on the first device alone. Without it set, the trainers' meshes span every device.

The trainers' `run_loop` and the evaluations are wrapped to record the devices each stage's model or mesh is on.
"""

from __future__ import annotations

import jax
import pytest
from flax import nnx

from reasoner.config import load_config
from reasoner.pipelines.stages import pipeline_devices


def _model_devices(model) -> set:
    return {d for leaf in jax.tree.leaves(nnx.state(model)) for d in getattr(leaf, "devices", lambda: set())()}


def _spy_trainers(monkeypatch, seen: dict) -> None:
    """Records the device count of every trainer's mesh (`run_loop` receives its run)."""
    from trainers import dpo, grpo, sft

    for module in (sft, dpo, grpo):
        original = module.run_loop

        def spied(run, *args, _original=original, _name=module.__name__.rsplit(".", 1)[-1], **kwargs):
            seen.setdefault(_name, []).append(int(run.mesh.devices.size))
            return _original(run, *args, **kwargs)

        monkeypatch.setattr(module, "run_loop", spied)


def test_pipeline_devices_follow_single_device():
    config = load_config("configs/astar_demo.py:tiny")
    assert jax.device_count() == 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"
    assert pipeline_devices(config) == jax.devices()[:1]
    config.single_device = False
    assert pipeline_devices(config) is None


def test_single_device_in_a_multi_process_job_is_named(monkeypatch):
    """One device of process 0 cannot hold a job of several processes (the others would hold no part of it)."""
    config = load_config("configs/smt_demo.py:tiny")
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ValueError, match=r"single_device=True in a job of 2 processes: .*single_device=False"):
        pipeline_devices(config)
    config.single_device = False
    assert pipeline_devices(config) is None


@pytest.mark.slow
def test_astar_pipeline_runs_every_stage_on_one_device(tmp_path, monkeypatch, capsys):
    from reasoner import evaluation
    from reasoner.pipelines import astar

    assert jax.device_count() == 8
    seen: dict = {}
    _spy_trainers(monkeypatch, seen)
    evaluate = evaluation.evaluate

    def spied_evaluate(model, *args, **kwargs):
        seen.setdefault("eval", []).append(len(_model_devices(model)))
        return evaluate(model, *args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", spied_evaluate)
    config = load_config("configs/astar_demo.py:tiny", [
        "--config.data.train=2", "--config.data.validation=1", "--config.data.test=1", "--config.sft.train.batch_size=2",
        "--config.eval.max_new_tokens=4", "--config.eval.batch_size=1", "--config.grpo.grpo.max_new_tokens=4",
        "--config.grpo.grpo.prompts_per_step=1", "--config.grpo.train.num_steps=1", "--config.grpo.data.limit=1"])
    assert config.single_device
    summary = astar.run(config, workdir=tmp_path, progress=False)
    assert [r["label"] for r in summary["reports"]] == ["base", "SFT (dependency)", "SFT+GRPO (astar_dependency)"]
    assert seen == {"eval": [1, 1, 1], "sft": [1], "grpo": [1]}
    assert "[astar] devices: 1 x cpu" in capsys.readouterr().out


@pytest.mark.slow
def test_smt_pipeline_runs_every_stage_on_one_device(shared_data, tmp_path, monkeypatch):
    from reasoner.agents import sampler_policy
    from reasoner.pipelines import smt

    assert jax.device_count() == 8
    seen: dict = {}
    _spy_trainers(monkeypatch, seen)

    class SpiedPolicy(sampler_policy.SamplerPolicy):
        def __init__(self, model, *args, **kwargs):
            seen.setdefault("policy", []).append(len(_model_devices(model)))
            super().__init__(model, *args, **kwargs)

    monkeypatch.setattr(sampler_policy, "SamplerPolicy", SpiedPolicy)
    config = load_config("configs/smt_demo.py:tiny", [f"--config.data.data_root={shared_data}"])
    config.data.datasets = ("proofwriter",)
    assert config.single_device
    summary = smt.run(config, workdir=tmp_path, progress=False)
    assert [r["label"] for r in summary["reports"]] == ["base", "SFT", "SFT+DPO"]
    # base, SFT, student rollouts, SFT+DPO: every policy's model on one device; both trainers' meshes too
    assert seen == {"policy": [1, 1, 1, 1], "sft": [1], "dpo": [1]}
