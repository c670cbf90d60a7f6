"""`reasoner train` as ONE job of two local processes (4 simulated CPU devices each, `launch/local_processes.py`)
against one process with 8 devices and the same global batch: the same losses, one metrics file, one checkpoint
tree written by both processes, and a two-process resume that continues exactly.

The mesh is `fsdp=-1` over all 8 devices in both cases, so every device holds the same parameter and batch shards
and runs the same per-device program; what differs is only how the cross-device sums are carried out (in-process
vs gloo between processes). Tolerance at step k (`_loss_tol`): the loss is a mean of per-token terms that are all
>= 0 (SFT's token NLL, DPO's -log sigmoid), so another order of the cross-device sums (8 device partials, the mean's
division) moves it by at most (8 + 2) EPS32 of its value, both runs carry that, and k - 1 earlier Adam steps carry
their gradients' float32 difference into the weights (`adam_loss_drift`, with the probabilistic factor for the
backward's accumulation depth, as the GRPO test below).
The schedule is constant so that a 1-epoch run resumed into a 2-epoch run follows the 2-epoch run exactly.
"""

import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.tolerances import adam_loss_drift, prob_factor
from tests.trainers import traces

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = {"sft": "sft_astar.py", "dpo": "dpo_smt.py"}
EPS32 = float(np.finfo(np.float32).eps)
REL_TOL = 2 * (8 + 2) * EPS32  # two runs, each a sum of 8 device partials of terms >= 0 and the mean's division
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
    assert proc.returncode == 0, _job_log(proc.stdout + proc.stderr)
    return proc


# what JAX's coordination service, gloo and absl print around a failure: hundreds of lines that hide the error
_NOISE = ("[Gloo]", "coordination", "Barrier", "barrier", "CoordinationServiceError", "RPC:", "    @ ", "client.h",
          "*** Check failure", "This suggests", "# of tasks", "The first task", "Some timed out")


def _job_log(text: str, keep: int = 120) -> str:
    """The last `keep` lines of a job's output that are not the coordination service's noise: where a process's
    own error (or its last progress line) shows."""
    lines = [line for line in text.splitlines() if not any(n in line for n in _NOISE)]
    return "\n".join(lines[-keep:])


def _train_records(workdir: pathlib.Path) -> list[dict]:
    lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in lines if r.get("kind") == "train"]


def _drift_scale(kind: str, data) -> tuple[int, int, float]:
    """(parameters, decoder depth at the run's sequence length, learning rate) of the tiny `kind` run."""
    from flax import nnx

    from reasoner.config import load_config
    from reasoner.models import Decoder
    from tests.tolerances import model_depth
    from trainers.run import model_config_from

    args = _train_args(kind, data, pathlib.Path("unused"), epochs=1)
    spec = args[args.index("--config") + 1]
    config = load_config(spec, [a for a in args if a.startswith("--config.")])
    cfg = model_config_from(config.model)
    abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
    params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
    return params, model_depth(cfg, seq_len=int(config.data.seq_len)), float(config.optim.lr)


def _loss_tol(record: dict, scale: tuple[int, int, float]) -> float:
    """The float32 bound on |loss_two - loss_one| at `record`'s step (module docstring)."""
    num_params, depth, lr = scale
    drift = adam_loss_drift(lr=lr, steps_before=int(record["step"]) - 1, grad_norm=record["grad_norm"],
                            num_params=num_params, factor=prob_factor(2 * depth))
    return REL_TOL * abs(record["loss"]) + drift


def _assert_losses_close(got: dict[int, float], want: dict[int, dict], steps, what: str, scale) -> None:
    for step in steps:
        tol = _loss_tol(want[step], scale)
        assert abs(got[step] - want[step]["loss"]) <= tol, \
            f"{what} step {step}: {got[step]!r} vs {want[step]['loss']!r} (tol {tol:.3g})"


@pytest.mark.timeout(TIMEOUT_S * 3)  # three training runs, each a fresh start-up and compile
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_two_processes_train_as_one_job_and_resume_exactly(kind, run_data, tmp_path):
    """SFT: one job, then a two-process resume. DPO: one job (its reference log-probs are computed across both
    processes before the first step); its resume is the same `run_loop` code as SFT's, so it is not run twice."""
    data = run_data[kind]
    epochs = 2 if kind == "sft" else 1
    _one_process(_train_args(kind, data, tmp_path / "one", epochs=epochs))
    reference = {r["step"]: r for r in _train_records(tmp_path / "one")}
    scale = _drift_scale(kind, data)
    steps_per_epoch = len(reference) // epochs

    first = _two_processes(_train_args(kind, data, tmp_path / "two", epochs=1))
    # every process joined the one job and said so
    assert "[0] [process 0/2] joined" in first.stdout and "[1] [process 1/2] joined" in first.stdout
    records = _train_records(tmp_path / "two")
    # one metrics file, each step written once (by process 0), not once per process
    assert [r["step"] for r in records] == list(range(1, steps_per_epoch + 1))
    assert sorted(p.name for p in (tmp_path / "two").rglob("metrics*.jsonl")) == ["metrics.jsonl"]
    losses = {r["step"]: r["loss"] for r in records}
    _assert_losses_close(losses, reference, [1, 2, 3], f"{kind} two processes vs one", scale)

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
                         f"{kind} resumed two-process run vs one uninterrupted process", scale)


GRPO_CONFIG = '''
from configs import grpo_cedar


def get_config(variant=None):
    # the tiny GRPO recipe with a reward a random model earns by chance: a one-word completion equal to "yes"
    c = grpo_cedar.get_config("tiny")
    c.rewards = [{"name": "exact_match", "as": "correctness", "weight": 1.0, "timeout_s": 30.0,
                  "options": {"answer_key": "answer", "normalize": "lower_ws", "span_tag": None}}]
    return c
'''


def _grpo_args(root: pathlib.Path, workdir, *, steps: int) -> list[str]:
    return ["-m", "reasoner.cli", "train", "--config", str(root / "grpo_mp.py"), "--workdir", str(workdir),
            "--no-progress", f"--config.data.path={root / 'data'}", f"--config.model.tokenizer={root / 'tok'}",
            f"--config.model.random.vocab_size={(root / 'vocab').read_text()}", "--config.mesh=fsdp=-1",
            "--config.grpo.max_new_tokens=1", "--config.grpo.num_generations=4", "--config.grpo.prompts_per_step=4",
            "--config.grpo.beta=0.04", "--config.lora.rank=0", f"--config.optim.lr={GRPO_LR}",
            "--config.optim.schedule=constant", "--config.optim.warmup_ratio=0.0",
            f"--config.train.num_steps={steps}", "--config.train.checkpoint_every=1",
            "--config.train.async_checkpoint=False"]


GRPO_LR = 1e-3


def _grpo_drift_scale(root: pathlib.Path) -> tuple[int, int]:
    """(parameters, decoder depth at the rollout's length) of the tiny GRPO model, for `adam_loss_drift`."""
    from flax import nnx

    from reasoner.config import load_config
    from reasoner.models import Decoder
    from tests.tolerances import model_depth
    from trainers.run import model_config_from

    config = load_config(str(root / "grpo_mp.py"), _grpo_args(root, root / "unused", steps=1)[8:])
    cfg = model_config_from(config.model)
    abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
    params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
    return params, model_depth(cfg, seq_len=32)


@pytest.mark.timeout(TIMEOUT_S * 3)
def test_grpo_two_processes_train_as_one_job_and_resume_exactly(tmp_path):
    """GRPO as one job of two processes: rollouts decode on a mesh spanning both (the decode state is all-gathered
    to the host loop, `reasoner.distributed.host_get`), rewards and the update follow; the first three losses equal
    a one-process 8-device run's and a two-process resume continues it.

    Tolerance at step k: the loss is a weighted mean of per-token terms -A r + beta kl with weights summing to 1
    and |A| <= (G - 1) / sqrt(G) = 1.5 (a z-score within a group of G = 4, ddof 1), so the sum of the terms'
    magnitudes is at most ~1.5: REL_TOL of that scale (same per-device programs, another order of the cross-device
    sums). Unlike SFT's, GRPO's gradient has components that cancel analytically (advantages sum to 0 in a group;
    the KL's gradient is 0 while policy = reference) and are left as rounding noise, which Adam normalises into
    updates of up to lr: the k - 1 earlier updates add `adam_loss_drift` (first order, at a small lr)."""
    import json as _json

    from tests.trainers.traces import word_tokenizer

    (tmp_path / "grpo_mp.py").write_text(GRPO_CONFIG)
    (tmp_path / "data").mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"say yes {w}"}], "answer": "yes"}
            for w in ("one", "two", "three", "four", "five", "six", "seven", "eight")]
    for split in ("train", "validation"):
        (tmp_path / "data" / f"{split}.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in rows))
    tok = word_tokenizer(tmp_path / "tok", texts=["say yes no maybe one two three four five six seven eight"])
    from transformers import AutoTokenizer

    (tmp_path / "vocab").write_text(str((len(AutoTokenizer.from_pretrained(str(tok))) + 7) // 8 * 8))

    _one_process(_grpo_args(tmp_path, tmp_path / "one", steps=4))
    reference = {r["step"]: r for r in _train_records(tmp_path / "one")}
    assert any(reference[s]["loss"] != 0.0 for s in (1, 2, 3)), reference  # the groups' rewards really differed

    first = _two_processes(_grpo_args(tmp_path, tmp_path / "two", steps=3))
    assert "[0] [process 0/2] joined" in first.stdout and "[1] [process 1/2] joined" in first.stdout
    records = {r["step"]: r for r in _train_records(tmp_path / "two")}
    assert sorted(records) == [1, 2, 3]
    num_params, depth = _grpo_drift_scale(tmp_path)

    def tol(step):
        drift = adam_loss_drift(lr=GRPO_LR, steps_before=step - 1, grad_norm=reference[step]["grad_norm"],
                                num_params=num_params, factor=prob_factor(2 * depth + 16 * 32))
        return REL_TOL * 1.5 + drift  # |terms| sum to at most ~1.5 (docstring)

    for step in (1, 2, 3):
        # the same completions drawn, so the same rewards; the losses within float32 error
        assert records[step]["reward"] == reference[step]["reward"], (step, records[step], reference[step])
        assert abs(records[step]["loss"] - reference[step]["loss"]) <= tol(step), (step, records[step], tol(step))

    resumed = _two_processes(_grpo_args(tmp_path, tmp_path / "two", steps=4))
    assert "resumed from step 3" in resumed.stdout
    records = {r["step"]: r for r in _train_records(tmp_path / "two")}
    assert sorted(records) == [1, 2, 3, 4] and records[4]["reward"] == reference[4]["reward"]
    assert abs(records[4]["loss"] - reference[4]["loss"]) <= tol(4), (records[4], reference[4], tol(4))
