"""KTO end to end (`trainers.kto`, issue 22 item 5): the first step's loss against TRL 1.16's KTOTrainer run on the
same examples, a tiny run from configs/kto.py that learns and resumes exactly, and bad unpaired data named.

TRL side: TRL's own `_prepare_dataset` tokenizes the batch's examples (and rotates their completions into the KL
pairs), TRL's `DataCollatorForUnpairedPreference` pads them, and TRL's `_compute_loss` runs transformers'
LlamaForCausalLM (with TRL's fused LM head) for the policy, the KL pairs and the reference; the policy is our tiny
model exported to safetensors, the reference another random model (seed 6, given as `kto.ref_model`), so the loss
is not KTO's trivial 0.5 of a reference equal to the policy.

Bound (tests/tolerances.py): each per-token log-prob of one decoder computed by two implementations is within
f EPS32 |logp_t|, f = prob_factor(decoder depth) (as `dpo_first_step_bounds` takes it), so a completion's sum of n
of them is within (f + n) EPS32 sum|logp_t| (the sum's own rounding added). r_i = policy - reference carries both
sums' errors (e_r_i); z0 = a mean over the B KL pairs of such differences (e_z0, the mean's rounding included).
1 - sigmoid has slope <= 1/4, so each example's loss moves by <= w beta / 4 (e_r_i + e_z0), plus a few roundings
of its own; the mean over B adds B EPS32 |L|. Power: the KL pairs rotated the other way miss TRL's kl, and
inverted labels miss its loss, by several times these bounds.
"""

from __future__ import annotations

import json
import random
import types
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tolerances import EPS32, model_depth, prob_factor
from tests.trainers import traces
from tests.trainers.conftest import CONFIGS

SEQ = 192


def write_kto_data(root, *, n_train: int, n_val: int, seed: int = 0):
    """(jsonl dir, tokenizer dir, vocab): A*-style prompts whose completion (one assistant message, TRL's
    conversational format) is the correct trace (label true) or a corrupted one (false), drawn at random."""
    from transformers import AutoTokenizer

    rng = random.Random(seed)
    data, texts = root / "kto_data", []
    data.mkdir(parents=True)
    for split, n in (("train", n_train), ("validation", n_val)):
        with open(data / f"{split}.jsonl", "w") as f:
            for _ in range(n):
                ex = traces.preference_example(rng)
                label = rng.random() < 0.5
                completion = [{"role": "assistant", "content": ex["chosen" if label else "rejected"]}]
                f.write(json.dumps({"prompt": ex["prompt"], "completion": completion, "label": label}) + "\n")
                texts += [ex["prompt"][0]["content"], ex["chosen"], ex["rejected"]]
    tok_dir = traces.word_tokenizer(root / "kto_tokenizer", texts=texts)
    return data, tok_dir, len(AutoTokenizer.from_pretrained(str(tok_dir)))


@pytest.fixture(scope="module")
def kto_data(tmp_path_factory):
    return write_kto_data(tmp_path_factory.mktemp("kto"), n_train=32, n_val=16)


def kto_config(data, *extra: str):
    from reasoner.config import load_config

    data_dir, tok_dir, vocab = data
    overrides = traces.tiny_overrides(data_dir=data_dir, tokenizer_dir=tok_dir, vocab=vocab)
    return load_config(f"{CONFIGS / 'kto.py'}:tiny", [*overrides, f"--config.data.seq_len={SEQ}", *extra])


def _hf(model, path):
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from reasoner.models.export import export_hf

    export_hf(model, str(path))
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    add_fused_lm_head(hf, outputs=("log_probs", "entropy", "mean_logits"))
    return hf


def trl_first_step(examples, *, tokenizer, policy, reference, kto_cfg, batch_size: int):
    """(loss, metrics, TRL's tokenized rows, TRL's collated batch) of `KTOTrainer._compute_loss` on `examples`."""
    import datasets
    from trl.trainer.kto_trainer import DataCollatorForUnpairedPreference, KTOTrainer

    weights = dict(desirable_weight=float(kto_cfg.desirable_weight),
                   undesirable_weight=float(kto_cfg.undesirable_weight))
    prep = SimpleNamespace(_tokenizer=tokenizer, calculate_KL=True, **weights)
    args = SimpleNamespace(dataset_num_proc=None, max_length=SEQ, per_device_train_batch_size=batch_size)
    rows = [{"prompt": e["prompt"], "completion": e["completion"], "label": e["label"]} for e in examples]
    prepared = KTOTrainer._prepare_dataset(prep, datasets.Dataset.from_list(rows), tokenizer, args, "train")
    collate = DataCollatorForUnpairedPreference(pad_token_id=tokenizer.pad_token_id, max_length=SEQ)
    inputs = collate([{k: r[k] for k in ("prompt_ids", "completion_ids", "KL_completion_ids", "label")}
                      for r in prepared])
    stub = SimpleNamespace(model=policy, ref_model=reference, args=SimpleNamespace(gradient_checkpointing_kwargs=None),
                           precompute_ref_logps=False, calculate_KL=True, loss_type="kto", beta=float(kto_cfg.beta),
                           aux_loss_enabled=False, _tp_size=1, _total_train_tokens=0,
                           _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
                           accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda x: x), **weights)
    stub._compute_kl_logps = types.MethodType(KTOTrainer._compute_kl_logps, stub)
    loss = KTOTrainer._compute_loss(stub, policy, inputs, return_outputs=False)
    mode = "train" if policy.training else "eval"
    return float(loss.detach()), {k: v[-1] for k, v in stub._metrics[mode].items()}, prepared.to_list(), inputs


def _sequence_errors(model, inputs, prefix, factor):
    """Per row: the float32 error bound of a completion log-prob sum under `model`: each token's log-prob within
    `factor` EPS32 |logp_t| (the decoder's depth, as `tolerances.dpo_first_step_bounds` takes it), the sum of n of
    them adds n EPS32 sum|logp_t|."""
    import torch

    ids, mask = inputs[f"{prefix}input_ids"], inputs[f"{prefix}completion_mask"]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=inputs[f"{prefix}attention_mask"]).logits.double()
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    on = mask[:, 1:].double()
    magnitude = (logp.abs() * on).sum(1)
    return ((factor + on.sum(1)) * EPS32 * magnitude).numpy(), magnitude.numpy()


@pytest.mark.baseline
def test_first_step_loss_equals_trls_kto_trainer(kto_data, tmp_path):
    from reasoner.data.pipeline import to_global_batch
    from reasoner.data.unpaired import with_kl_rows
    from reasoner.models import ModelConfig
    from reasoner.sharding import make_mesh
    from trainers import kto
    from trainers.data import batch_iterator, load_splits
    from trainers.run import build_model, merged_for_export

    ref_cfg = kto_config(kto_data).model.copy_and_resolve_references()
    ref_cfg.seed = 6  # a reference whose KL estimate on the first batch is positive (z0 not clamped to 0)
    ref_dir = tmp_path / "reference"
    reference = _hf(build_model(ref_cfg, mesh=make_mesh("fsdp=-1", devices=jax.devices()[:1])), ref_dir)
    config = kto_config(kto_data, f"--config.kto.ref_model={ref_dir}", "--config.kto.undesirable_weight=1.33")
    s = kto.build_kto(config, workdir=tmp_path / "run", devices=jax.devices()[:1])
    policy = _hf(merged_for_export(s.run, s.run.state.params), tmp_path / "policy")
    host = next(s.iterator)
    B = int(config.train.batch_size)

    def ours(batch):
        state = jax.tree.map(jnp.copy, s.run.state)  # the step donates its state
        _, m = s.step(state, s.run.frozen, to_global_batch(batch, s.run.mesh))
        return kto.host_means({k: float(v) for k, v in jax.device_get(m).items()})

    mine = ours(host)
    examples = load_splits(config.data, kind="kto", workdir=tmp_path)["train"]
    tokenizer = s.run.tokenizer
    trl_loss, trl, prepared, inputs = trl_first_step([examples[int(i)] for i in host["index"][0]], tokenizer=tokenizer,
                                                     policy=policy, reference=reference, kto_cfg=config.kto,
                                                     batch_size=B)
    # the data path: TRL's tokenization, KL rotation and truncation are ours, token for token
    for b, row in enumerate(prepared):
        n, p = int(host["segment_ids"][0, b].sum()), int(s.rows["prompt_len"][host["index"][0, b]])
        assert host["tokens"][0, b, :p].tolist() == row["prompt_ids"]
        assert host["tokens"][0, b, p:n].tolist() == row["completion_ids"]
        kl = (row["prompt_ids"] + row["KL_completion_ids"])[:SEQ]
        assert host["kl_tokens"][0, b, :len(kl)].tolist() == kl and host["kl_segment_ids"][0, b].sum() == len(kl)
        assert bool(host["label"][0, b]) == row["label"]

    factor = prob_factor(model_depth(ModelConfig(**dict(config.model.random)), seq_len=SEQ))
    e, mag = {}, {}
    for m, model in (("pi", policy), ("ref", reference)):
        for p in ("", "KL_"):
            e[(m, p)], mag[(m, p)] = _sequence_errors(model, inputs, p, factor)
    e_r = e[("pi", "")] + e[("ref", "")]
    # z0: a mean over B of differences, each within its two sums' errors, plus the mean's rounding
    e_z0 = float(np.mean(e[("pi", "KL_")] + e[("ref", "KL_")] + B * EPS32 * (mag[("pi", "KL_")] + mag[("ref", "KL_")])))
    beta, w = float(config.kto.beta), max(float(config.kto.desirable_weight), float(config.kto.undesirable_weight))
    bound = float(np.mean(w * beta / 4 * (e_r + e_z0))) + (8 + B) * EPS32 * (1 + abs(trl_loss))
    assert abs(mine["loss"] - trl_loss) <= bound, (mine["loss"], trl_loss, bound)
    assert abs(mine["kl"] - trl["kl"]) <= e_z0 and mine["kl"] > 0, (mine["kl"], trl["kl"], e_z0)
    labels = np.asarray(inputs["label"], bool)
    for side, on in (("chosen", labels), ("rejected", ~labels)):
        assert abs(mine[f"rewards/{side}"] - trl[f"rewards/{side}"]) <= beta * e_r[on].mean()
        assert abs(mine[f"logps/{side}"] - trl[f"logps/{side}"]) <= e[("pi", "")][on].mean()
        assert abs(trl[f"rewards/{side}"]) > 10 * beta * e_r[on].mean()  # the reference is not the policy
    assert abs(mine["rewards/margins"] - trl["rewards/margins"]) <= beta * (e_r[labels].mean() + e_r[~labels].mean())
    # power: the KL pairs rotated the other way (x_i with y_{i+1}: the rows reversed) miss TRL's kl, and the labels
    # inverted miss its loss
    raw = next(batch_iterator(config, s.rows))
    pad = int(tokenizer.pad_token_id)
    assert np.array_equal(with_kl_rows(raw, pad_id=pad)["kl_tokens"], host["kl_tokens"])
    other = ours(with_kl_rows({k: v[:, ::-1] for k, v in raw.items()}, pad_id=pad))
    assert abs(other["kl"] - trl["kl"]) > 4 * e_z0, (other["kl"], trl["kl"], e_z0)
    inverted = ours({**host, "label": 1.0 - host["label"]})  # desirable and undesirable swapped
    assert abs(inverted["loss"] - trl_loss) > 10 * bound, (inverted["loss"], trl_loss, bound)


# ============================================================================================== a tiny run
def _train_losses(path) -> dict[int, float]:
    from reasoner.metrics.curves import read_metrics

    return {r["step"]: r["loss"] for r in read_metrics(path, kind="train")}


def test_tiny_run_learns_and_resumes_exactly_after_preemption(kto_data, tmp_path, monkeypatch):
    """configs/kto.py:tiny for 2 epochs (4 steps each): the validation reward margin grows and the validation loss
    falls; a run preempted (SIGTERM) after step 3 and started again logs the uninterrupted run's losses bit for bit
    (the same program on the restored state and data position, in this process)."""
    import os
    import signal

    from trainers import kto

    config = kto_config(kto_data, "--config.train.num_epochs=2", "--config.train.checkpoint_every=1000")
    one = jax.devices()[:1]
    full = kto.train(config, workdir=tmp_path / "full", progress=False, devices=one)
    expected = _train_losses(tmp_path / "full" / "metrics.jsonl")
    assert sorted(expected) == list(range(1, 9))
    evals = full.eval_history
    assert [e["step"] for e in evals] == [4, 8]
    assert evals[-1]["val_rewards/margins"] > evals[0]["val_rewards/margins"] > 0
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] < 0.5  # 0.5: the untrained policy (reference == policy)
    assert {"kl", "rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected"} <= set(full.last_metrics)

    real_update = kto.make_update

    def preempted_after_3(s):
        update = real_update(s)

        def wrapped(state, batch):
            out = update(state, batch)
            if s.iterator.step == 3:
                os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler's preemption sends; the loop's handler
            return out

        return wrapped

    monkeypatch.setattr(kto, "make_update", preempted_after_3)
    cut = kto.train(config, workdir=tmp_path / "cut", progress=False, devices=one)
    assert cut.preempted and int(cut.state.step) == 3
    monkeypatch.setattr(kto, "make_update", real_update)
    resumed = kto.train(config, workdir=tmp_path / "cut", progress=False, devices=one)
    assert resumed.resumed_from == 3 and [h["step"] for h in resumed.history] == list(range(4, 9))
    got = _train_losses(tmp_path / "cut" / "metrics.jsonl")
    assert got == expected  # every step, bit for bit
    assert resumed.eval_history[-1] == evals[-1]


# ============================================================================================== data and settings
BAD_ROWS = [
    ({"prompt": "Say yes.", "completion": "Yes."}, r"missing \['label'\]"),
    ({"prompt": "Say yes.", "completion": "Yes.", "label": None}, r"missing \['label'\]"),
    ({"prompt": "Say yes.", "completion": "Yes.", "label": "yes"}, r"label must be true or false .*got 'yes' \(str\)"),
    ({"prompt": "Say yes.", "completion": "Yes.", "label": 1}, r"label must be true or false .*got 1 \(int\)"),
    ({"prompt": "Say yes.", "label": True}, r"missing \['completion'\]"),
]
GOOD = {"prompt": [{"role": "user", "content": "Say no."}], "completion": "No.", "label": False}


@pytest.mark.parametrize("bad,message", BAD_ROWS)
def test_bad_rows_name_the_file_and_row(bad, message, tmp_path):
    import datasets

    from reasoner.data.hf_datasets import examples_of, load_chat_splits
    from reasoner.data.unpaired import read_jsonl_splits

    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(bad) + "\n")  # a blank line: line 3 is the bad row
    with pytest.raises(ValueError, match=rf"{path}:3: {message}"):
        read_jsonl_splits(tmp_path)
    hf = tmp_path / "hf.jsonl"  # the same rows through `datasets` (whose JSON reader refuses blank lines)
    hf.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=rf"{hf} \[train\], row 1: {message}"):
        load_chat_splits(hf, kind="kto", cache_dir=tmp_path / "cache")
    if bad.get("label") == 1:  # a uniform column of integers (Arrow stores int64) is refused as well
        ints = [{**GOOD, "label": 0}, {**GOOD, "label": 1}]
        with pytest.raises(ValueError, match=r"kto.parquet, row 0: label must be true or false .*got 0 \(int\)"):
            examples_of(datasets.Dataset.from_list(ints), kind="kto", name="kto.parquet")


@pytest.mark.baseline
def test_paired_rows_are_unpaired_as_trl_unpairs_them(tmp_path):
    """prompt/chosen/rejected rows (and implicit-prompt ones) give TRL's `unpair_preference_dataset` rows, in its
    order, from a `datasets` file and from our JSONL alike."""
    import datasets
    from trl.data_utils import extract_prompt, unpair_preference_dataset

    from reasoner.data.hf_datasets import load_chat_splits
    from reasoner.data.unpaired import read_jsonl_splits

    user = lambda text: [{"role": "user", "content": text}]  # noqa: E731
    said = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    pairs = [{"prompt": user(f"Is {n} even?"), "chosen": said(a), "rejected": said(b)}
             for n, a, b in ((2, "Yes.", "No."), (3, "No.", "Yes."), (4, "Yes.", "Maybe."))]
    implicit = [{"chosen": user("Hi.") + said("Hello."), "rejected": user("Hi.") + said("Go away.")}]
    for rows in (pairs, implicit):
        ds = datasets.Dataset.from_list(rows)
        if "prompt" not in rows[0]:
            ds = ds.map(extract_prompt)
        want = [{"prompt": r["prompt"], "completion": r["completion"], "label": r["label"]}
                for r in unpair_preference_dataset(ds).to_list()]
        root = tmp_path / f"n{len(rows)}"
        root.mkdir()
        (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        for got in (read_jsonl_splits(root)["train"].rows,
                    load_chat_splits(root / "train.jsonl", kind="kto", cache_dir=tmp_path / "cache")["train"].rows):
            assert [{k: r[k] for k in ("prompt", "completion", "label")} for r in got] == want


@pytest.mark.baseline
def test_weight_advice_is_trls_and_settings_are_checked(kto_data, caplog):
    """The unbalanced-data warning names TRL's ranges (run TRL's `_prepare_dataset` on 3 desirable and 1
    undesirable rows); a micro-batch of one row, a non-positive weight and DPO's loss_type "kto" are one-line
    errors."""
    import re

    import datasets
    from transformers import AutoTokenizer
    from trl.trainer.kto_trainer import KTOTrainer

    from trainers import dpo, kto

    labels = [True, True, True, False]
    rows = [{"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": "b"}],
             "label": x} for x in labels]
    tokenizer = AutoTokenizer.from_pretrained(str(kto_data[1]))
    stub = SimpleNamespace(_tokenizer=tokenizer, calculate_KL=True, desirable_weight=1.0, undesirable_weight=1.0)
    args = SimpleNamespace(dataset_num_proc=None, max_length=SEQ, per_device_train_batch_size=2)
    with caplog.at_level("WARNING"):
        KTOTrainer._prepare_dataset(stub, datasets.Dataset.from_list(rows), tokenizer, args, "train")
    numbers = lambda text: [float(x) for x in re.findall(r"\[([\d.]+), ([\d.]+)\]", text) for x in x]  # noqa: E731
    ours = kto.weight_advice(np.array(labels, np.float32), SimpleNamespace(desirable_weight=1.0,
                                                                           undesirable_weight=1.0))
    assert numbers(caplog.text) == numbers(ours) == [0.33, 0.44, 2.26, 3.0]
    assert kto.weight_advice(np.array(labels, np.float32), SimpleNamespace(desirable_weight=0.4,
                                                                           undesirable_weight=1.0)) is None
    for override, message in (("train.batch_size=1", "at least 2 rows"), ("kto.beta=0", "kto.beta=0")):
        with pytest.raises(ValueError, match=message):
            kto.check_config(kto_config(kto_data, f"--config.{override}"))
    with pytest.raises(ValueError, match="trainer='kto'"):
        dpo.reference_free(SimpleNamespace(loss_type="kto"))


def test_reasoner_train_starts_the_kto_config():
    import importlib

    from reasoner.cli.train import TRAINERS, target_of
    from reasoner.config import load_config
    from trainers import kto

    for variant in ("", ":tiny", ":large"):
        spec = f"{CONFIGS / 'kto.py'}{variant}"
        assert target_of(load_config(spec), spec) == ("trainer", "kto")
    assert importlib.import_module(TRAINERS["kto"]).train is kto.train


# ============================================================================================== golden one step
def kto_golden_run(mesh, perturb: str | None = None):
    """tests/trainers/test_golden.py's pattern for the KTO step (its module docstring: what is stored, the bounds):
    configs/kto.py:tiny at the golden DIMS, two steps on fixed random rows of two micro-batches, the reference
    another random model (seed 1, in the step). Loss magnitude M: per example the slope w beta s (1 - s) of its
    loss (s the sigmoid) times what its two log-prob sums sum (policy and reference, |logsumexp| + |target| per
    token), plus the same slope times the mean over the micro-batch of the KL pairs' sums (z0's error)."""
    from reasoner.data.pipeline import batch_sharding, to_global_batch
    from reasoner.data.unpaired import KL_FIELDS, ROW_FIELDS, with_kl_rows
    from tests.trainers import test_golden as g
    from trainers import kto
    from trainers.losses import target_mask
    from trainers.run import build_model, split_trainable, with_reference
    from trainers.step import jit_train_step, make_train_step

    config = g._config("kto.py", "--config.kto.beta=2.0")  # beta r of random models is far from 0 only at a large beta
    with g._perturbed(config, kto, "example_denominator", perturb):
        run = g._setup(config, mesh, total_steps=10)
        ref_cfg = config.model.copy_and_resolve_references()
        ref_cfg.seed = 1
        _, ref_params, _, _, _ = split_trainable(build_model(ref_cfg, mesh=mesh), lora=False)
        run = with_reference(run, ref_params)
        rng = np.random.default_rng(4)
        n = 2 * g.A * g.ROWS
        rows, prompt = g._random_rows(rng, n=n, seq=g.SEQ, vocab=g.DIMS["vocab_size"])
        lengths = rows["segment_ids"].sum(1)
        rows["completion_tokens"] = np.zeros_like(rows["tokens"])
        rows["completion_mask"] = np.zeros_like(rows["tokens"])
        for i, (p, m) in enumerate(zip(prompt, lengths)):
            rows["completion_tokens"][i, :m - p] = rows["tokens"][i, p:m]
            rows["completion_mask"][i, :m - p] = rows["loss_mask"][i, p:m]
        rows.update(prompt_len=prompt.astype(np.int32), completion_len=(lengths - prompt).astype(np.int32),
                    label=(rng.random(n) < 0.5).astype(np.float32), index=np.arange(n, dtype=np.int32))
        half = n // 2
        host = [with_kl_rows({k: v[i * half:(i + 1) * half].reshape(g.A, g.ROWS, *v.shape[1:])
                              for k, v in rows.items()}) for i in range(2)]
        batch_sh = {k: batch_sharding(mesh, ndim=3) for k in (*ROW_FIELDS, *KL_FIELDS)}
        batch_sh.update({k: batch_sharding(mesh, ndim=2) for k in ("label", "index")})
        step = jit_train_step(  # as trainers.kto.build_kto builds it
            make_train_step(loss_fn=kto.kto_loss_fn(run.graphdef, config.kto), optimizer=run.optimizer,
                            schedule=run.schedule, denominator=kto.example_denominator),
            state_sharding=run.shardings.state, frozen_sharding=run.shardings.frozen, batch_sharding=batch_sh,
            metrics_sharding=run.shardings.replicated)
    k = config.kto
    beta = float(k.beta)
    frozen = run.frozen

    @jax.jit
    def magnitude(params, batch):
        pol, ref = run.model(params), run.model(reference=True)
        per_mag, logps = {}, {}
        for prefix in ("", "kl_"):
            flat = {f: batch[f"{prefix}{f}"].reshape(-1, g.SEQ) for f in ROW_FIELDS}
            mask = target_mask(flat["loss_mask"], flat["segment_ids"])
            per_mag[prefix] = sum(jnp.sum(g._token_magnitudes(m, flat["tokens"], flat["positions"],
                                                              flat["segment_ids"]) * mask, axis=-1) for m in (pol, ref))
            logps[prefix] = [kto.completion_logps(m, flat) for m in (pol, ref)]
        labels = batch["label"].reshape(-1)
        r = logps[""][0] - logps[""][1]
        z0 = jnp.maximum(jnp.mean((logps["kl_"][0] - logps["kl_"][1]).reshape(g.A, g.ROWS), axis=1), 0.0)
        x = beta * jnp.where(labels > 0, r - jnp.repeat(z0, g.ROWS), jnp.repeat(z0, g.ROWS) - r)
        w = jnp.where(labels > 0, float(k.desirable_weight), float(k.undesirable_weight))
        slope = w * beta * jax.nn.sigmoid(x) * (1 - jax.nn.sigmoid(x))
        kl_mean = jnp.repeat(jnp.mean(per_mag["kl_"].reshape(g.A, g.ROWS), axis=1), g.ROWS)
        return jnp.sum(slope * (per_mag[""] + kl_mean)) / labels.shape[0]

    return g.GoldenRun(step=step, state=run.state, frozen=frozen, batches=[to_global_batch(b, mesh) for b in host],
                       schedule=run.schedule, optim=config.optim, loss_magnitude=magnitude, depth=g._depth(g.SEQ),
                       n_tokens=4 * g.A * g.ROWS * g.SEQ)


@pytest.mark.parametrize("perturb", [None, "denominator+1%"])
def test_golden_one_step_kto(perturb):
    """Two KTO steps against tests/assets/golden_kto.json; a 1 % change of the loss normalisation must fail.
    Regenerate (only for an intended change of KTO's math): REASONER_REGEN_GOLDEN=1 .venv/bin/python -m pytest
    tests/trainers/test_kto.py -k golden"""
    from reasoner.sharding import make_mesh
    from tests.trainers import test_golden as g

    values, tols = g.measure(kto_golden_run(make_mesh("fsdp=-1", devices=jax.devices()[:1]), perturb))
    path = g.ASSETS / "golden_kto.json"
    if g.REGEN:
        if perturb is None:
            path.write_text(json.dumps({"values": values, "tolerances_when_written": tols, "cpu": g._cpu(),
                                        "jax": jax.__version__}, indent=1) + "\n")
        return
    assert path.exists(), f"{path} missing; generate it with `REASONER_REGEN_GOLDEN=1 ... -k golden`"
    bad = g.mismatches(values, json.loads(path.read_text())["values"], tols)
    assert bool(bad) == (perturb is not None), bad
