"""A LoRA run's export names its base model, so PEFT can load the adapter by itself.

The trainers called `export_hf` without `base_model_name_or_path`, so `adapter/adapter_config.json` said
`"base_model_name_or_path": null` and `peft.AutoPeftModelForCausalLM.from_pretrained(adapter_dir)` could not find
the weights the adapters belong to. SFT on a tiny random Llama saved locally (no network) now records the base's
absolute path, and PEFT's base + adapter gives the logits of our merged top-level export. GRPO records it too, but
not when the caller passed the model in (its base is then not what `config.model.name` holds).

Tolerance (tests/models/test_export.py, derived in tests/models/test_lora.py): each of the two PyTorch evaluations,
W x + (alpha/r) B (A x) and the merged (W + (alpha/r) B A) x, is within 15 * (n_in_max + rank + 2) * EPS32 of the
exact logits relative to the largest logit (14 projections and the head, first-order terms adding up under
RMSNorm), so they differ by at most twice that.
"""

import ast
import json
import os
import pathlib

import jax
import numpy as np
import pytest

from tests.models.tiny_checkpoints import make_hf_model, save_hf
from tests.tolerances import EPS32
from tests.trainers.conftest import tiny_config
from tests.trainers.test_grpo import tok_dir  # noqa: F401 - a fixture

RANK, INTERMEDIATE = 4, 48  # tiny_checkpoints.TINY's intermediate size is the largest fan-in
REL_TOL = 2 * 15 * (INTERMEDIATE + RANK + 2) * EPS32
TRAINERS = pathlib.Path(__file__).resolve().parents[2] / "trainers"


def _torch_logits(model, tokens) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


def test_sft_lora_export_loads_with_auto_peft_and_matches_the_merged_export(sft_data, tmp_path, monkeypatch):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    from reasoner.models.export import ADAPTER_DIR
    from trainers import sft

    _, _, vocab = sft_data
    base = save_hf(make_hf_model("llama", seed=4, vocab_size=(vocab + 7) // 8 * 8, max_position_embeddings=256),
                   str(tmp_path / "base"))
    monkeypatch.chdir(tmp_path)  # the config names the base relatively; the adapter must record where it is
    config = tiny_config("sft", sft_data, "--config.model.name=base", "--config.lora.rank=4",
                         "--config.lora.alpha=8.0", "--config.train.num_epochs=1", "--config.optim.lr=0.03",
                         f"--config.data.tfds_dir={tmp_path / 'tfds'}", f"--config.export_dir={tmp_path / 'hf'}",
                         "--config.train.async_checkpoint=False")
    sft.train(config, workdir=tmp_path / "run", progress=False, devices=jax.devices()[:1])
    adapter_dir = tmp_path / "hf" / ADAPTER_DIR
    recorded = json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == os.path.abspath(base)

    monkeypatch.chdir(adapter_dir)  # PEFT must not depend on the working directory either
    adapted = AutoPeftModelForCausalLM.from_pretrained(str(adapter_dir)).eval()
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval()
    plain = AutoModelForCausalLM.from_pretrained(base).eval()
    tokens = np.random.default_rng(0).integers(0, vocab, size=(2, 24))
    want = _torch_logits(merged, tokens)
    tol = REL_TOL * np.abs(want).max()
    assert np.abs(_torch_logits(plain, tokens) - want).max() > 100 * tol  # training moved the adapters
    err = np.abs(_torch_logits(adapted, tokens) - want).max()
    assert err <= tol, f"PEFT base + adapter vs our merged export: max |diff| {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("trainer", ["sft", "dpo", "kto", "grpo"])
def test_every_trainer_exports_through_export_run(trainer):
    """The four trainers export through `trainers.run.export_run`, whose default base is `config.model.name` (SFT's
    and GRPO's run in the other tests; DPO's and KTO's are the same call as SFT's, without `base_model=`)."""
    tree = ast.parse((TRAINERS / f"{trainer}.py").read_text())
    called = {getattr(node.func, "id", getattr(node.func, "attr", None)): node for node in ast.walk(tree)
              if isinstance(node, ast.Call)}
    assert "export_run" in called and "export_hf" not in called, f"trainers/{trainer}.py"
    if trainer != "grpo":
        assert "base_model" not in {k.arg for k in called["export_run"].keywords}


@pytest.mark.parametrize("passed_model", [False, True, "named"], ids=["config-model", "caller-model", "caller-named"])
def test_grpo_lora_export_names_its_base_unless_the_caller_supplied_the_model(tok_dir, tmp_path, passed_model):
    """GRPO's base is `config.model.name` when it builds the model; a model passed in (an SFT export, say) is not
    what that name holds, so the adapter then names the `base_model` the caller gives (the A* pipeline gives its SFT
    export's directory), else no base rather than the wrong one."""
    from reasoner.models import load_model
    from reasoner.models.export import ADAPTER_DIR
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text
    from tests.trainers.test_grpo import one_device_mesh, tiny
    from trainers import grpo

    base = save_hf(make_hf_model("llama", seed=5, vocab_size=32, num_hidden_layers=1), str(tmp_path / "base"))
    cfg = tiny(tok_dir, f"--config.model.name={base}", "--config.grpo.max_new_tokens=4", "--config.train.num_steps=1",
               "--config.train.async_checkpoint=False", file="grpo_cedar.py")
    cfg.export_dir = str(tmp_path / "export")
    assert cfg.lora.rank > 0
    reward = CompositeReward([WeightedReward("len", lambda completions, *, examples: [
        float(len(completion_text(c).split())) for c in completions])])
    examples = [{"prompt": [{"role": "user", "content": "say something"}]},
                {"prompt": [{"role": "user", "content": "one two three"}]}]
    model = load_model(base) if passed_model else None
    named = str(tmp_path / "sft_export") if passed_model == "named" else None
    grpo.train(cfg, workdir=tmp_path / "run", model=model, examples=examples, reward=reward, progress=False,
               mesh=one_device_mesh(), base_model=named)
    reward.close()
    config = json.loads((tmp_path / "export" / ADAPTER_DIR / "adapter_config.json").read_text())
    expected = {False: os.path.abspath(base), True: None, "named": named}[passed_model]
    assert config["base_model_name_or_path"] == expected
