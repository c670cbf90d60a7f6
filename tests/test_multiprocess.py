"""`reasoner train` as ONE job of two local processes (4 simulated CPU devices each, `launch/local_processes.py`)
against one process with 8 devices and the same global batch: the same losses, one metrics file, one checkpoint
tree written by both processes, and a two-process resume that continues exactly.

The mesh is `fsdp=-1` over all 8 devices in both cases, so every device holds the same parameter and batch shards
and runs the same per-device program; what differs is only how the cross-device sums are carried out (in-process
vs gloo between processes). Tolerance, per compared loss: a sum of 8 device partials of positive terms is within
8 * eps32 of its value relative to the sum whatever the order; three steps of Adam carry such a difference in the
gradients into the next losses at the same relative order (Adam's update is scale-free in the gradient), so the
first three losses agree within 3 * 8 * eps32 relative, and we allow 4x that (96 eps32) for the softmax/log terms.
The schedule is constant so that a 1-epoch run resumed into a 2-epoch run follows the 2-epoch run exactly.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.trainers import traces

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = {"sft": "sft_astar.py", "dpo": "dpo_smt.py"}
EPS32 = float(np.finfo(np.float32).eps)
REL_TOL = 96 * EPS32
TIMEOUT_S = 1500


@pytest.fixture(scope="module")
def run_data(tmp_path_factory):
    # 32 rows: 4 steps of 8 rows an epoch (three compared losses, then a resume at the epoch's end)
    return {kind: traces.write_run_data(tmp_path_factory.mktemp(kind), kind=kind, n_train=32, n_val=8)
            for kind in CONFIGS}


def _train_args(kind, data, workdir, *, epochs: int) -> list[str]:
    data_dir, tok_dir, vocab = data
    return ["-m", "reasoner.cli", "train", "--config", f"{ROOT / 'configs' / CONFIGS[kind]}:tiny",
            "--workdir", str(workdir), "--no-progress",
            *traces.tiny_overrides(data_dir=data_dir, tokenizer_dir=tok_dir, vocab=vocab, mesh="fsdp=-1"),
            "--config.optim.schedule=constant", "--config.optim.warmup_ratio=0.0",
            f"--config.train.num_epochs={epochs}", "--config.train.checkpoint_every=2"]


def _env(devices: int) -> dict:
    # no persistent compilation cache: a multi-process job does not use one by default (reasoner.compile_cache)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REASONER_", "JAX_COMPILATION_CACHE"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return env


def _one_process(args) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], env=_env(8), cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _two_processes(args) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "launch" / "local_processes.py"), "--processes", "2", "--devices-per-process",
         "4", "--timeout", str(TIMEOUT_S - 60), "--", sys.executable, *args],
        env=_env(4), cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    return proc


def _train_records(workdir: pathlib.Path) -> list[dict]:
    lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in lines if r.get("kind") == "train"]


def _assert_losses_close(got: dict[int, float], want: dict[int, float], steps, what: str) -> None:
    for step in steps:
        tol = REL_TOL * abs(want[step])
        assert abs(got[step] - want[step]) <= tol, f"{what} step {step}: {got[step]!r} vs {want[step]!r} (tol {tol:.3g})"


@pytest.mark.timeout(TIMEOUT_S * 3)  # three training runs, each a fresh start-up and compile
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_two_processes_train_as_one_job_and_resume_exactly(kind, run_data, tmp_path):
    """SFT: one job, then a two-process resume. DPO: one job (its reference log-probs are computed across both
    processes before the first step); its resume is the same `run_loop` code as SFT's, so it is not run twice."""
    data = run_data[kind]
    epochs = 2 if kind == "sft" else 1
    _one_process(_train_args(kind, data, tmp_path / "one", epochs=epochs))
    reference = {r["step"]: r["loss"] for r in _train_records(tmp_path / "one")}
    steps_per_epoch = len(reference) // epochs

    first = _two_processes(_train_args(kind, data, tmp_path / "two", epochs=1))
    # every process joined the one job and said so
    assert "[0] [process 0/2] joined" in first.stdout and "[1] [process 1/2] joined" in first.stdout
    records = _train_records(tmp_path / "two")
    # one metrics file, each step written once (by process 0), not once per process
    assert [r["step"] for r in records] == list(range(1, steps_per_epoch + 1))
    assert sorted(p.name for p in (tmp_path / "two").rglob("metrics*.jsonl")) == ["metrics.jsonl"]
    losses = {r["step"]: r["loss"] for r in records}
    _assert_losses_close(losses, reference, [1, 2, 3], f"{kind} two processes vs one")

    # one checkpoint tree, written collectively: both processes' shards are in each step's state
    ckpts = tmp_path / "two" / "checkpoints"
    steps = sorted(int(p.name) for p in ckpts.iterdir())
    assert steps[-1] == steps_per_epoch and all(p.name.isdigit() for p in ckpts.iterdir())
    state_dir = ckpts / str(steps[-1]) / "state"
    assert {p.name for p in state_dir.iterdir() if p.name.startswith("ocdbt.process_")} == \
        {"ocdbt.process_0", "ocdbt.process_1"}

    if kind != "sft":
        return
    # resume on two processes into the second epoch: continues exactly like the uninterrupted one-process run
    resumed = _two_processes(_train_args(kind, data, tmp_path / "two", epochs=2))
    assert f"resumed from step {steps_per_epoch}" in resumed.stdout
    records = _train_records(tmp_path / "two")
    assert [r["step"] for r in records] == list(range(1, 2 * steps_per_epoch + 1))
    losses = {r["step"]: r["loss"] for r in records}
    _assert_losses_close(losses, reference, range(steps_per_epoch + 1, 2 * steps_per_epoch + 1),
                         f"{kind} resumed two-process run vs one uninterrupted process")
