"""Resume exactness after SIGKILL (SFT and DPO), tiny runs that learn, and refusal of bad checkpoints.

Each trainer runs once uninterrupted in-process; the same config runs as `reasoner train` in a
subprocess that is SIGKILLed mid-way and then resumed. Every logged loss from the resumed run must
equal the uninterrupted run's at the same step within float32 error: the restored state and data position are
bit-identical, but the in-process run and the `reasoner train` subprocess compile their steps separately (one
unit in the last place has been seen), so each loss is within the forward's bound f EPS32 |loss| of exact
(f = prob_factor of the decoder's depth, all per-token terms of one sign) and the steps since the resume add
`adam_loss_drift` (tests/tolerances.py; the same argument as tests/trainers/test_sharded.py).
"""

import math
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import pytest

from reasoner.metrics.curves import read_metrics
from tests.tolerances import EPS32, adam_loss_drift, model_depth, prob_factor
from tests.trainers.conftest import CONFIGS, tiny_config, traces
from trainers.run import model_config_from

EPOCHS = 6  # 8 steps per epoch: long enough to kill the subprocess mid-way
KILL_AFTER_STEP = 12
# one device in-process and in the subprocesses: the same XLA program, so losses match bit for bit
ONE_DEVICE_ENV = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}


def _train_losses(path: pathlib.Path) -> dict[int, float]:
    from reasoner.metrics.curves import read_metrics

    return {r["step"]: r["loss"] for r in read_metrics(path, kind="train")}


def _cli(kind, data, workdir, *extra):
    data_dir, tok_dir, vocab = data
    name = "sft_astar.py" if kind == "sft" else "dpo_smt.py"
    return [sys.executable, "-m", "reasoner.cli", "train", "--config", f"{CONFIGS / name}:tiny",
            "--workdir", str(workdir), "--no-progress",
            *traces.tiny_overrides(data_dir=data_dir, tokenizer_dir=tok_dir, vocab=vocab), *extra]


def _kill_mid_run(cmd, workdir: pathlib.Path, *, timeout=600) -> int:
    """Starts `cmd`, SIGKILLs it once a step > KILL_AFTER_STEP is logged and a checkpoint is final."""
    log = workdir.parent / f"{workdir.name}.log"  # a file, not a pipe nobody drains
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=ONE_DEVICE_ENV)
    metrics = workdir / "metrics.jsonl"
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"run ended before it could be killed:\n{log.read_text()[-3000:]}")
            steps = list(_train_losses(metrics)) if metrics.exists() else []
            ckpts = [p for p in (workdir / "checkpoints").glob("*") if p.name.isdigit()] \
                if (workdir / "checkpoints").exists() else []
            if steps and max(steps) > KILL_AFTER_STEP and ckpts:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return max(steps)
            time.sleep(0.02)
        pytest.fail("run did not reach the kill point in time")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_resume_after_sigkill_is_exact_and_tiny_run_learns(kind, sft_data, dpo_data, tmp_path):
    from trainers import dpo, sft

    data = sft_data if kind == "sft" else dpo_data
    extra = [f"--config.train.num_epochs={EPOCHS}"]
    reference = tmp_path / "uninterrupted"
    result = (sft if kind == "sft" else dpo).train(tiny_config(kind, data, *extra), workdir=reference,
                                                   progress=False, devices=jax.devices()[:1])
    expected = _train_losses(reference / "metrics.jsonl")
    total = max(expected)
    assert total == 8 * EPOCHS and (reference / "curves.png").stat().st_size > 0

    # a tiny run learns: SFT validation loss falls far below the untrained model's ln(V); DPO ranks pairs right
    evals = result.eval_history
    if kind == "sft":
        vocab = (data[2] + 7) // 8 * 8
        assert evals[-1]["val_loss"] < evals[0]["val_loss"] < math.log(vocab)
        assert evals[-1]["val_loss"] < 0.6 * math.log(vocab)
    else:
        assert evals[-1]["val_rewards/accuracies"] > 0.5 and result.last_metrics["rewards/accuracies"] > 0.5
        assert evals[-1]["val_rewards/margins"] > 0

    killed = tmp_path / "killed"
    last_logged = _kill_mid_run(_cli(kind, data, killed, *extra), killed)
    assert last_logged < total
    out = subprocess.run(_cli(kind, data, killed, *extra), capture_output=True, text=True, timeout=1200,
                         env=ONE_DEVICE_ENV)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "resumed from step" in out.stdout
    resumed_from = int(out.stdout.split("resumed from step")[1].split(")")[0])
    assert 0 < resumed_from <= last_logged
    got = _train_losses(killed / "metrics.jsonl")
    assert sorted(got) == list(range(1, total + 1))  # one record per step: the killed tail was replaced
    config = tiny_config(kind, data, *extra)
    records = {r["step"]: r for r in read_metrics(reference / "metrics.jsonl", kind="train")}
    cfg = model_config_from(config.model)
    depth = model_depth(cfg, seq_len=int(config.data.seq_len))
    num_params = sum(int(x.size) for x in jax.tree.leaves(result.state.params))
    for step in range(resumed_from + 1, total + 1):
        m = records[step]
        if kind == "dpo":  # the margin's error (policy and reference each; per-pair means), slope <= 1
            forward = 2 * float(config.dpo.beta) * prob_factor(depth) * EPS32 * (abs(m["logps/chosen"])
                                                                                + abs(m["logps/rejected"]))
        else:
            forward = prob_factor(depth) * EPS32 * abs(m["loss"])
        tol = 2 * forward + adam_loss_drift(lr=m["lr"], steps_before=step - resumed_from - 1,
                                            grad_norm=m["grad_norm"], num_params=num_params,
                                            factor=prob_factor(2 * depth))
        assert abs(got[step] - expected[step]) <= tol, (step, got[step], expected[step], tol)


@pytest.mark.timeout(1800)  # five tiny runs, one of them resumed past a damaged checkpoint
def test_incompatible_checkpoint_is_refused_and_a_damaged_one_falls_back(sft_data, tmp_path):
    from reasoner.checkpoint import CheckpointError
    from trainers import dpo, sft

    workdir = tmp_path / "run"
    one = jax.devices()[:1]
    config = tiny_config("sft", sft_data, "--config.train.num_epochs=1", "--config.train.checkpoint_every=4")
    sft.train(config, workdir=workdir, progress=False, devices=one)
    before = sorted(p.name for p in (workdir / "checkpoints").iterdir())

    wider = tiny_config("sft", sft_data, "--config.train.num_epochs=1", "--config.model.random.hidden_size=96")
    with pytest.raises(CheckpointError, match="incompatible: fingerprint"):
        sft.train(wider, workdir=workdir, progress=False, devices=one)
    with pytest.raises(CheckpointError, match="incompatible: trainer='sft'"):
        dpo.train(tiny_config("dpo", _dpo_like(sft_data, tmp_path)), workdir=workdir, progress=False,
                  devices=one)

    # a damaged newest checkpoint: the run falls back to the older intact one and finishes from there
    steps = sorted(int(n) for n in before)
    assert len(steps) >= 2, before

    def damage(step_dir):
        for f in (step_dir / "state").rglob("*"):
            if f.is_file() and f.stat().st_size > 0:
                f.write_bytes(b"garbage" * 3)

    damage(workdir / "checkpoints" / str(steps[-1]))
    result = sft.train(config, workdir=workdir, progress=False, devices=one)
    assert result.resumed_from == steps[-2] and int(result.state.step) == steps[-1]
    assert (workdir / "corrupt" / f"checkpoints-{steps[-1]}").is_dir()  # moved aside, not deleted
    # every checkpoint damaged: a clear error, never a silent fresh start over the old run
    for step_dir in (workdir / "checkpoints").iterdir():
        damage(step_dir)
    with pytest.raises(CheckpointError, match="no intact checkpoint .*refusing to start afresh"):
        sft.train(config, workdir=workdir, progress=False, devices=one)

    stray = tmp_path / "stray"
    (stray / "checkpoints").mkdir(parents=True)
    (stray / "checkpoints" / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not checkpoints"):
        sft.train(config, workdir=stray, progress=False, devices=one)
    assert (stray / "checkpoints" / "notes.txt").read_text() == "mine"


def _dpo_like(sft_data, tmp_path):
    """DPO data with the SFT run's tokenizer, so only the trainer differs."""
    _, tok_dir, vocab = sft_data
    return traces.write_jsonl(tmp_path / "pairs", kind="dpo", n_train=16, n_val=4), tok_dir, vocab
