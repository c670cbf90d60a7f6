"""SFT loss vs PyTorch/transformers, DPO with reference == policy, packed vs unpacked logits."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.tolerances import EPS32, dpo_first_step_bounds, logits_atol, logprob_atol, model_depth, prob_factor
from tests.trainers.conftest import tiny_config


@pytest.fixture(scope="module")
def hf_tiny_llama(tmp_path_factory):
    """A random LlamaForCausalLM saved as safetensors (transformers' own init), and its directory."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).float().eval()
    out = tmp_path_factory.mktemp("hf_llama")
    model.save_pretrained(str(out), safe_serialization=True)
    return model, out


def _random_batch(rng, *, accum, rows, seq, vocab):
    tokens = rng.integers(0, vocab, size=(accum, rows, seq)).astype(np.int32)
    lengths = rng.integers(seq // 2, seq + 1, size=(accum, rows))
    idx = np.arange(seq)
    segment_ids = (idx[None, None, :] < lengths[..., None]).astype(np.int32)
    prompt = rng.integers(2, seq // 2, size=(accum, rows))
    loss_mask = ((idx[None, None, :] >= prompt[..., None]) & (segment_ids == 1)).astype(np.int32)
    positions = np.broadcast_to(idx, tokens.shape).astype(np.int32) * segment_ids
    return {"tokens": tokens, "positions": positions, "segment_ids": segment_ids, "loss_mask": loss_mask}


def test_sft_step_loss_equals_transformers_masked_token_mean(hf_tiny_llama):
    import optax
    import torch

    from reasoner.models import load_model
    from trainers.run import Frozen
    from trainers.sft import sft_denominator, sft_loss_fn
    from trainers.state import create_state
    from trainers.step import make_train_step

    torch_model, path = hf_tiny_llama
    ours = load_model(str(path))
    graphdef, params, rest = nnx.split(ours, nnx.Param, ...)
    batch = _random_batch(np.random.default_rng(1), accum=2, rows=3, seq=24, vocab=96)
    optimizer = optax.sgd(0.0)
    step = jax.jit(make_train_step(loss_fn=sft_loss_fn(graphdef), optimizer=optimizer, schedule=lambda s: 0.0,
                                   denominator=sft_denominator))
    _, metrics = step(create_state(nnx.to_pure_dict(params), optimizer), Frozen(base=nnx.to_pure_dict(rest)),
                      jax.tree.map(jnp.asarray, batch))

    flat = {k: torch.from_numpy(v.reshape(-1, v.shape[-1]).astype(np.int64)) for k, v in batch.items()}
    with torch.no_grad():
        logits = torch_model(input_ids=flat["tokens"], attention_mask=flat["segment_ids"]).logits.double()
    labels = flat["tokens"][:, 1:].clone()
    labels[(flat["loss_mask"][:, 1:] == 0)] = -100
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 96), labels.reshape(-1),
                                            ignore_index=-100, reduction="sum")
    expected = float(nll / (labels != -100).sum())
    # a mean of per-token NLLs, each within `logprob_atol` of transformers' (the decoder's float32 error at this
    # depth and logit scale), plus the rounding of the mean over n tokens
    n = float((labels != -100).sum())
    tol = logprob_atol(logits.numpy(), ours.cfg, seq_len=24) + n * EPS32 * abs(expected)
    assert abs(float(metrics["loss"]) - expected) <= tol, (float(metrics["loss"]), expected, tol)
    assert float(metrics["denom"]) == float((labels != -100).sum())


def test_packed_logits_equal_unpacked_per_document():
    from reasoner.data.packing import pack_documents, pad_documents
    from reasoner.models import Decoder, ModelConfig

    cfg = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8)
    model = Decoder(cfg, rngs=nnx.Rngs(3))
    rng = np.random.default_rng(2)
    docs = [(list(rng.integers(1, 64, size=n)), [1] * n) for n in (9, 17, 5, 30, 12, 3, 21)]
    packed = pack_documents(docs, seq_len=32, pad_id=0)
    assert len(packed["tokens"]) < len(docs)  # documents really share rows
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, t, p, s: nnx.merge(graphdef, state)(t, positions_BxT=p, segment_ids_BxT=s)[0])
    logits = np.asarray(forward(state, packed["tokens"], packed["positions"], packed["segment_ids"]))
    alone_rows = pad_documents(docs, seq_len=32)
    alone_logits = np.asarray(forward(state, alone_rows["tokens"], alone_rows["positions"], alone_rows["segment_ids"]))
    found = 0
    for r in range(len(packed["tokens"])):
        for seg in range(1, packed["segment_ids"][r].max() + 1):
            cols = np.flatnonzero(packed["segment_ids"][r] == seg)
            ids = packed["tokens"][r, cols]
            doc = next(i for i, (d, _) in enumerate(docs) if len(d) == len(ids) and list(d) == list(ids))
            # the same document's logits through another layout (packed with segment ids vs alone, padded)
            np.testing.assert_allclose(logits[r, cols], alone_logits[doc, :len(ids)], rtol=0,
                                       atol=logits_atol(alone_logits, cfg, seq_len=32))
            found += 1
    assert found == len(docs)


@pytest.mark.parametrize("precompute", [False, True])
def test_dpo_first_step_loss_is_ln2_when_reference_is_policy(dpo_data, tmp_path, precompute):
    from reasoner.data.pipeline import to_global_batch
    from trainers.dpo import build_dpo, mean_metrics

    config = tiny_config("dpo", dpo_data, f"--config.dpo.precompute_ref={precompute}", "--config.mesh=fsdp=-1")
    s = build_dpo(config, workdir=tmp_path)
    batch = to_global_batch(next(s.iterator), s.run.mesh)
    _, metrics = s.step(s.run.state, s.run.frozen, batch)
    m = mean_metrics({k: float(v) for k, v in metrics.items()})
    # Not bit-exact: the policy forward runs inside `grad` (the blocked attention's custom VJP keeps residuals, so
    # XLA compiles its loop differently) and the reference outside it or in a separate pre-pass, with kernels that
    # differ between CPUs: the bounds of `dpo_first_step_bounds` (per-token error k(n) * EPS32 * |logp_t| at the
    # decoder's depth n; logits are O(0.1) at this random init, so |logsumexp| + |logit| ~ |logp|).
    k = prob_factor(model_depth(s.run.model_cfg, seq_len=batch["chosen_tokens"].shape[-1]))
    chosen_tol, margin_tol, loss_tol = dpo_first_step_bounds(
        factor=k, beta=float(config.dpo.beta), logps_chosen=m["logps/chosen"], logps_rejected=m["logps/rejected"])
    assert abs(m["loss"] - math.log(2)) <= loss_tol, (m["loss"], loss_tol)
    if not precompute:
        assert abs(m["rewards/chosen"]) <= chosen_tol, (m["rewards/chosen"], chosen_tol)
        assert abs(m["rewards/margins"]) <= margin_tol, (m["rewards/margins"], margin_tol)
