"""Preemption: SIGTERM mid-run makes `reasoner train` finish its step, checkpoint it, flush metrics and exit 0; the
next start resumes and logs exactly the losses of an uninterrupted run. SIGINT likewise once; a second one stops.

The uninterrupted run and the preempted one run in the same kind of subprocess on one device (the same XLA
program), so every loss after the resume equals the uninterrupted one bit for bit; 1e-6 leaves room for nothing
but printing. The SIGINT handler is tested in-process (signals sent to this process), where delivery is immediate.
"""

import os
import signal
import subprocess
import time

import pytest

from tests.trainers.test_resume import ONE_DEVICE_ENV, _cli, _train_losses

EPOCHS = 2  # 8 steps an epoch: 16 steps
TERM_AFTER_STEP = 5
EXIT_WITHIN_S = 120  # the step in flight, a checkpoint save and the shutdown of one tiny run on 2 shared cores


def _latest_checkpoint(workdir) -> int | None:
    steps = [int(p.name) for p in (workdir / "checkpoints").glob("*") if p.name.isdigit()]
    return max(steps) if steps else None


def test_sigterm_checkpoints_the_last_step_exits_0_and_resumes_exactly(sft_data, tmp_path):
    extra = [f"--config.train.num_epochs={EPOCHS}", "--config.train.checkpoint_every=1000"]
    reference = tmp_path / "uninterrupted"
    out = subprocess.run(_cli("sft", sft_data, reference, *extra), capture_output=True, text=True, timeout=1200,
                         env=ONE_DEVICE_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = _train_losses(reference / "metrics.jsonl")
    assert sorted(expected) == list(range(1, 8 * EPOCHS + 1))

    workdir = tmp_path / "preempted"
    log = tmp_path / "preempted.log"
    proc = subprocess.Popen(_cli("sft", sft_data, workdir, *extra), stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env=ONE_DEVICE_ENV)
    metrics = workdir / "metrics.jsonl"
    deadline = time.time() + 900
    while not (metrics.exists() and max(_train_losses(metrics), default=0) >= TERM_AFTER_STEP):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.time() < deadline, "the run did not reach the preemption point"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    sent = time.time()
    try:
        rc = proc.wait(timeout=EXIT_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert time.time() - sent < EXIT_WITHIN_S
    logged = _train_losses(metrics)
    last = max(logged)
    # checkpoint_every=1000 and no epoch ended yet: the only checkpoint is the one the preemption wrote
    assert last < 8 and _latest_checkpoint(workdir) == last, (last, _latest_checkpoint(workdir))
    assert "SIGTERM received" in text and f"preempted (SIGTERM) at step {last}" in text
    assert not (workdir / "curves.png").exists()  # the run is not over

    out = subprocess.run(_cli("sft", sft_data, workdir, *extra), capture_output=True, text=True, timeout=1200,
                         env=ONE_DEVICE_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"resumed from step {last})" in out.stdout
    got = _train_losses(metrics)
    assert sorted(got) == sorted(expected)
    for step in sorted(expected):
        # the same compiled program on bit-identical restored state and data position: the same bits
        assert got[step] == expected[step], (step, got[step], expected[step])


def test_first_sigint_requests_a_stop_second_interrupts_and_handlers_are_restored():
    from trainers.loop import Preemption

    messages = []
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with Preemption(messages.append) as preemption:
        os.kill(os.getpid(), signal.SIGINT)
        assert preemption.requested == "SIGINT" and "SIGINT received" in messages[0]
        with pytest.raises(KeyboardInterrupt, match="second SIGINT"):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)  # the handler runs at the next bytecode boundary, well within this
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
