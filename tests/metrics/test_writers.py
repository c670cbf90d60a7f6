"""Metric writers (reasoner.metrics.writers): what TensorBoard's own EventAccumulator and W&B's own reader
(`wandb leet inspect --json` on the offline `.wandb` log) and trackio's own store read back is exactly what was logged; a failing writer
warns once and the run goes on with metrics.jsonl intact; bad names and missing packages.

Exactness: TensorBoard stores a scalar as float32 (`simple_value`), so the read value must equal the logged value
rounded to float32 (np.float32(v), not "close to"); W&B keeps float64 in its JSON records, so the read value equals
the Python float that was logged.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import types
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from configs import common
from reasoner.config import apply_overrides
from reasoner.metrics.curves import read_metrics
from reasoner.metrics.writers import completion_rows, flatten_config, open_writers, writer_names
from tests.loop_stubs import Steps

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOSSES = {1: 0.75, 2: 0.5, 3: 1 / 3, 4: 0.1}  # 1/3 and 0.1 are not float32-exact: rounding shows


def _accumulator(logdir):
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_mod.EventAccumulator(str(logdir), size_guidance={ea_mod.SCALARS: 0, ea_mod.TENSORS: 0})
    ea.Reload()
    return ea


def _scalars(ea, tag) -> dict[int, float]:
    return {e.step: e.value for e in ea.Scalars(tag)}


def _text(ea, tag) -> dict[int, str]:
    return {e.step: e.tensor_proto.string_val[0].decode() for e in ea.Tensors(f"{tag}/text_summary")}  # tensorboardX


def _hparams(ea) -> dict:
    """The HParams plugin's session-start values, decoded with TensorBoard's own proto."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    out = {}
    for key, value in data.session_start_info.hparams.items():
        out[key] = getattr(value, value.WhichOneof("kind"))
    return out


def test_tensorboard_scalars_hparams_tables_and_resume_purge(tmp_path):
    pytest.importorskip("tensorboardX")
    log = common.log(writers="jsonl,tensorboard")
    writer = open_writers(tmp_path, log=log)
    assert writer.names == ("jsonl", "tensorboard")
    hp = {"optim.lr": 3e-4, "train.batch_size": 8, "model.name": "tiny", "model.remat": False}
    writer.hparams(hp)
    for step, loss in LOSSES.items():
        writer.write(step, "train", loss=loss, skipped=False, note="text stays in JSONL")
    writer.write(4, "eval", **{"eval/reward": 0.25, "accuracy": 0.5})
    rows = [{"prompt": "2+2?", "completion": "4 | four", "reward": 1.0}]
    writer.table(3, "completions", rows)
    writer.close()

    ea = _accumulator(tmp_path / "tensorboard")
    assert _scalars(ea, "train/loss") == {s: np.float32(v) for s, v in LOSSES.items()}
    assert _scalars(ea, "train/skipped") == {s: 0.0 for s in LOSSES}
    assert _scalars(ea, "eval/reward") == {4: np.float32(0.25)}  # "eval/" is not doubled
    assert _scalars(ea, "eval/accuracy") == {4: 0.5}
    assert "train/note" not in ea.Tags()["scalars"]
    assert _hparams(ea) == {"optim.lr": 3e-4, "train.batch_size": 8.0, "model.name": "tiny", "model.remat": False}
    assert "| 2+2? | 4 \\| four | 1 |" in _text(ea, "completions")[3]
    # JSONL: the same records, the config and the table
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "metrics.jsonl", kind="train")] == list(
        LOSSES.items())
    assert json.loads((tmp_path / "hparams.json").read_text()) == hp
    assert read_metrics(tmp_path / "metrics.completions.jsonl") == [{"step": 3, **rows[0]}]

    # Resume from a checkpoint at step 2: steps 3-4 are recomputed (new values). TensorBoard must show the new
    # values only (purge step 3), JSONL likewise (truncated), and the step-3 table row is gone.
    resumed = open_writers(tmp_path, log=log)
    resumed.truncate_after(2)
    assert read_metrics(tmp_path / "metrics.completions.jsonl") == []
    redo = {3: 0.3, 4: 0.2}
    for step, loss in redo.items():
        resumed.write(step, "train", loss=loss)
    resumed.close()
    ea = _accumulator(tmp_path / "tensorboard")
    expected = {1: np.float32(0.75), 2: np.float32(0.5), **{s: np.float32(v) for s, v in redo.items()}}
    assert _scalars(ea, "train/loss") == expected
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "metrics.jsonl", kind="train")] == [
        (1, 0.75), (2, 0.5), (3, 0.3), (4, 0.2)]


def _wandb_records(run_file: pathlib.Path) -> list[dict]:
    """Every record of a `.wandb` log as W&B's own reader prints it: `wandb leet inspect --json RUN_FILE`, called
    on the wandb-core binary directly (what the CLI runs) to skip a second Python start."""
    from wandb.util import get_core_path

    out = subprocess.run([get_core_path(), "leet", "inspect", "--no-observability", "--json", "--run-file",
                          str(run_file), str(run_file.parent.parent)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_wandb_offline_run_holds_the_logged_values(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for var in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))  # W&B's staging files stay in the test's folder
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert open_writers(tmp_path, log=common.log(writers="wandb")).optional["wandb"].mode == "disabled"  # env
    monkeypatch.setenv("WANDB_MODE", "offline")
    workdir = tmp_path / "run"
    writer = open_writers(workdir, log=common.log(writers="jsonl,wandb", wandb_project="writers-test"))
    assert writer.optional["wandb"].mode == "offline"
    writer.hparams({"optim.lr": 3e-4, "model.name": "tiny"})
    for step, loss in LOSSES.items():
        writer.write(step, "train", loss=loss, lr=1e-3 * step)
    writer.write(4, "eval", **{"eval/reward": 0.25})
    writer.table(4, "completions", [{"prompt": "p", "completion": "c", "reward": 0.5}])
    writer.close()

    (run_dir,) = (workdir / "wandb").glob("offline-run-*")
    (run_file,) = run_dir.glob("run-*.wandb")
    records = _wandb_records(run_file)
    history = {r["history"]["step"]["num"]: r["history"]["item"] for r in records if r["type"] == "history"}
    assert sorted(history) == [1, 2, 3, 4]
    assert {s: history[s]["train/loss"] for s in LOSSES} == LOSSES
    assert {s: history[s]["train/lr"] for s in LOSSES} == {s: 1e-3 * s for s in LOSSES}
    assert history[4]["eval/reward"] == 0.25 and history[4]["completions.nrows"] == 1
    config = {}
    for r in records:
        if r["type"] in ("run", "config"):
            config.update((r[r["type"]].get("config") or r[r["type"]]).get("update", {}))
    assert config["optim.lr"] == 3e-4 and config["model.name"] == "tiny"
    (table_file,) = (run_dir / "files" / "media" / "table").glob("completions_4_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["prompt", "completion", "reward"] and table["data"] == [["p", "c", 0.5]]


def _tiny_run(config):
    """What `run_loop` reads of a Run: config, a state pytree to checkpoint, the mesh's device count."""
    from trainers.state import TrainState

    state = TrainState(step=jnp.zeros((), jnp.int32), params={"w": jnp.zeros(2)}, opt_state={})
    return types.SimpleNamespace(config=config, state=state, mesh=types.SimpleNamespace(devices=np.zeros(1)))


def test_run_loop_logs_config_scalars_and_tables_and_survives_a_failing_writer(tmp_path, monkeypatch):
    """A real `run_loop` (fake update): hparams once, every step's scalars, the step's `tables`, and a writer that
    raises on its second write (disk full) is warned about once and dropped while the run finishes."""
    pytest.importorskip("tensorboardX")
    from reasoner.metrics import writers as writers_mod
    from trainers.loop import run_loop

    calls = {"n": 0}
    real_write = writers_mod.TensorBoardWriter.write

    def flaky_write(self, step, kind, **scalars):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        real_write(self, step, kind, **scalars)

    monkeypatch.setattr(writers_mod.TensorBoardWriter, "write", flaky_write)
    c = common.run_config("sft")
    c.train = common.train(checkpoint_every=100, async_checkpoint=False)
    apply_overrides(c, ["--config.log.writers=jsonl,tensorboard"])  # the README's command-line form

    def update(state, item):
        host = {"loss": 1.0 / item, "skipped": 0.0}
        if item == 2:
            host["tables"] = {"completions": [{"prompt": "q", "completion": f"a{item}", "reward": 0.5}]}
        return state, host

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_loop(_tiny_run(c), source=Steps(3), update=update, workdir=tmp_path, trainer="sft",
                          meta={"trainer": "test"}, progress=False)
    failures = [w for w in caught if "metrics writer" in str(w.message)]
    assert len(failures) == 1, [str(w.message) for w in caught]
    assert "'tensorboard'" in str(failures[0].message) and "No space left on device" in str(failures[0].message)
    assert [h["step"] for h in result.history] == [1, 2, 3] and "tables" not in result.history[1]
    logged = read_metrics(tmp_path / "metrics.jsonl", kind="train")
    assert [(r["step"], r["loss"]) for r in logged] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    assert read_metrics(tmp_path / "metrics.completions.jsonl") == [
        {"step": 2, "prompt": "q", "completion": "a2", "reward": 0.5}]
    assert json.loads((tmp_path / "hparams.json").read_text()) == flatten_config(c)
    ea = _accumulator(tmp_path / "tensorboard")
    assert _scalars(ea, "train/loss") == {1: 1.0}  # written before the failure; nothing after it
    assert _hparams(ea)["log.writers"] == "jsonl,tensorboard"


def test_unknown_writer_names_fail_listing_the_known_ones(tmp_path):
    c = common.run_config("grpo")
    apply_overrides(c, ["--config.log.writers=jsonl,tensorbord"])
    with pytest.raises(ValueError, match=r"unknown writer\(s\) \['tensorbord'\]; known writers: jsonl, tensorboard, "
                                         r"wandb"):
        open_writers(tmp_path, log=c.log)
    with pytest.raises(ValueError, match="unknown writer"):
        open_writers(tmp_path, log=c.log, enabled=False)  # every process checks, not only the one that writes
    assert writer_names(("JSONL", " wandb", "jsonl")) == ("jsonl", "wandb")
    with pytest.raises(ValueError, match="unknown fields"):
        common.log(writer="jsonl")


def test_missing_package_warns_and_jsonl_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import tensorboardX -> ImportError
    with pytest.warns(RuntimeWarning, match=r"'tensorboard' failed \(open: ImportError.*pip install tensorboardX"):
        writer = open_writers(tmp_path, log=common.log(writers="jsonl,tensorboard"))
    assert writer.names == ("jsonl",) and "tensorboard" in writer.disabled
    writer.write(1, "train", loss=0.5)
    writer.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "kind": "train", "loss": 0.5}]
    assert not (tmp_path / "tensorboard").exists()
    idle = open_writers(tmp_path / "other", log=common.log(writers="jsonl,tensorboard"), enabled=False)
    idle.write(1, "train", loss=0.5)  # process > 0: nothing is written, nothing is opened, no warning
    assert idle.names == ("jsonl",) and not (tmp_path / "other").exists()


def test_completion_rows_carry_the_reward_registry_values():
    """GRPO's table rows from a real `CompositeReward` batch: total = sum of weight x value over the functions
    that applied (written out by hand below), per-function values as scored, NaN where one did not apply (None)."""
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text

    def length(completions, *, examples):
        return [float(len(completion_text(c))) for c in completions]

    def has_yes(completions, *, examples):
        return [1.0 if "yes" in completion_text(c) else None for c in completions]  # None: does not apply

    reward = CompositeReward([WeightedReward("length", length, weight=0.5), WeightedReward("yes", has_yes)])
    completions = ["yes", "no!", "yes sir"]
    examples = [{"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 300}]},
                {"prompt": "short prompt"}, {"prompt": "third"}]
    try:
        batch = reward(completions, examples=examples)
    finally:
        reward.close()
    rows = completion_rows(prompts=[e["prompt"] for e in examples], completions=completions, total_B=batch.total_B,
                           per_function_BxF=batch.per_function_BxF, names=batch.names, max_rows=2)
    assert len(rows) == 2
    assert rows[0] == {"prompt": "x" * 200 + "...", "completion": "yes", "reward": 0.5 * 3 + 1.0,
                       "reward/length": 3.0, "reward/yes": 1.0}
    assert rows[1]["prompt"] == "short prompt" and rows[1]["reward"] == 0.5 * 3
    assert rows[1]["reward/length"] == 3.0 and np.isnan(rows[1]["reward/yes"])


def test_every_trainer_config_has_the_log_section():
    from reasoner.config import load_config

    configs = pathlib.Path(__file__).resolve().parents[2] / "configs"
    for spec in ("sft_astar.py:tiny", "sft_smt.py", "dpo_smt.py", "grpo_astar.py:tiny", "grpo_cedar.py",
                 "rlot.py:tiny"):
        c = load_config(str(configs / spec))
        assert c.log.writers == "jsonl" and c.log.completions_every == 0, spec
        assert writer_names(c.log.writers) == ("jsonl",)


def test_grpo_logs_its_sample_completions_table(tmp_path):
    """The full tier's twin of test_completion_rows_carry_the_reward_registry_values and the run_loop test (a
    real tiny GRPO run compiles the sampler and step: ~30 s on 2 cores). One prompt x G=4 samples, table every 2nd
    step with 4 rows = every sample: each row's reward is the reward function on its own completion (recomputed
    here), and their mean is the step's logged `reward`; TensorBoard holds the same table and rewards."""
    pytest.importorskip("tensorboardX")
    from reasoner.config import load_config
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text
    from reasoner.sharding import make_mesh
    from tests.trainers import traces
    from trainers import grpo

    import jax

    words = "yes no maybe apple banana cherry dog cat red blue green one two three say something".split()
    tok_dir = traces.word_tokenizer(tmp_path / "tok", texts=[" ".join(words)])

    def yes_share(completions, *, examples):
        split = [completion_text(c).split() for c in completions]
        return [w.count("yes") / max(len(w), 1) for w in split]

    configs = pathlib.Path(__file__).resolve().parents[2] / "configs"
    cfg = load_config(f"{configs / 'grpo_astar.py'}:tiny", [
        f"--config.model.tokenizer={tok_dir}", "--config.model.random.vocab_size=32",
        "--config.model.random.num_layers=1", "--config.model.random.hidden_size=32",
        "--config.model.random.intermediate_size=64", "--config.data.task=chat", "--config.grpo.num_generations=4",
        "--config.grpo.prompts_per_step=1", "--config.grpo.max_new_tokens=4", "--config.train.num_steps=2",
        "--config.train.checkpoint_every=100", "--config.train.async_checkpoint=False",
        "--config.log.writers=jsonl,tensorboard", "--config.log.completions_every=2",
        "--config.log.completions_rows=4"])
    reward = CompositeReward([WeightedReward("yes", yes_share)])
    workdir = tmp_path / "run"
    try:
        result = grpo.train(cfg, workdir=workdir, examples=[{"prompt": [{"role": "user", "content": "say something"}]}],
                            reward=reward, progress=False, mesh=make_mesh("fsdp=1", devices=jax.devices()[:1]))
    finally:
        reward.close()
    rows = read_metrics(workdir / "metrics.completions.jsonl")
    assert [r["step"] for r in rows] == [2] * 4 and {r["prompt"] for r in rows} == {"say something"}
    by_hand = yes_share([r["completion"] for r in rows], examples=None)
    assert [r["reward"] for r in rows] == by_hand == [r["reward/yes"] for r in rows]
    assert np.mean(by_hand) == result.history[1]["reward"]  # every sample of the step is in the table
    ea = _accumulator(workdir / "tensorboard")
    assert set(_text(ea, "completions")) == {2}
    assert _scalars(ea, "train/reward") == {h["step"]: np.float32(h["reward"]) for h in result.history}


_TRACKIO_SCRIPT = r"""
import json, sys
from configs import common
from reasoner.metrics.writers import open_writers
from trackio.sqlite_storage import SQLiteStorage

losses = json.loads(sys.argv[2])
writer = open_writers(sys.argv[1], log=common.log(writers="jsonl,trackio", trackio_project="writers-test"))
writer.hparams({"optim.lr": 3e-4, "model.name": "tiny"})
for step, loss in losses.items():
    writer.write(int(step), "train", loss=loss, lr=1e-3 * int(step))
writer.write(4, "eval", **{"eval/reward": 0.25})
writer.table(4, "completions", [{"prompt": "p", "completion": "c", "reward": 0.5}])
writer.close()
print(json.dumps({"logs": SQLiteStorage.get_logs("writers-test", "run"),
                  "config": SQLiteStorage.get_run_config("writers-test", "run")}, default=str))
"""


def test_trackio_run_holds_the_logged_values(tmp_path):
    """trackio reads its store's location ($TRACKIO_DIR) when imported, so the run is written and read back by a
    fresh process with the store in this test's folder."""
    pytest.importorskip("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _TRACKIO_SCRIPT, str(tmp_path / "run"),
                           json.dumps({str(k): v for k, v in LOSSES.items()})],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith('{"logs"')))
    history: dict[int, dict] = {}
    for record in out["logs"]:
        history.setdefault(record["step"], {}).update(record)
    assert sorted(history) == [1, 2, 3, 4]
    assert {s: history[s]["train/loss"] for s in LOSSES} == LOSSES
    assert {s: history[s]["train/lr"] for s in LOSSES} == {s: 1e-3 * s for s in LOSSES}
    assert history[4]["eval/reward"] == 0.25
    assert history[4]["completions"]["_value"] == [{"prompt": "p", "completion": "c", "reward": 0.5}]
    assert out["config"]["optim.lr"] == 3e-4 and out["config"]["model.name"] == "tiny"
