"""A hand-written config.json that leaves keys out reads as transformers 5 reads it, family by family: the
reference is transformers' own config class (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig) and the
attention projections of the model it builds from that config (on the meta device, no weights)."""

import pytest
import torch
import transformers

from reasoner.models.config import FAMILIES, ModelConfig, UnsupportedModelError

SIZES = {"vocab_size": 64, "hidden_size": 256, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 32}


def reference(d):
    """(transformers config, (q heads, kv heads, head_dim) of the model transformers builds from it)."""
    t = transformers.AutoConfig.for_model(**d)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(t)
    attn = model.model.layers[0].self_attn
    return t, (attn.q_proj.out_features // attn.head_dim, attn.k_proj.out_features // attn.head_dim, attn.head_dim)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("extra", [{}, {"num_key_value_heads": None}, {"num_key_value_heads": 4}, {"head_dim": None},
                                   {"head_dim": 16}, {"use_sliding_window": True}, {"sliding_window": None},
                                   {"eos_token_id": None, "bos_token_id": None}])
def test_absent_and_null_keys_read_as_transformers_reads_them(family, extra):
    # we defaulted num_key_value_heads to num_attention_heads and head_dim to hidden_size // num_attention_heads
    # for every family: transformers gives Qwen2/Qwen3 32 and Mistral 8 KV heads, Qwen3 a head_dim of 128, and
    # each family its own max_position_embeddings (ours 8192), Llama/Mistral bos 1 and eos 2, Qwen a 4096 window
    d = {"model_type": family, **SIZES, **extra}
    null = next((k for k, v in extra.items() if v is None), None)
    if (family, null) in {("mistral", "num_key_value_heads"), ("qwen2", "head_dim"), ("qwen3", "head_dim")}:
        # transformers refuses the null (MistralConfig, Qwen3Config) or builds no model from it (Qwen2's
        # attention takes head_dim None): we derive it, as transformers does for the other families
        with pytest.raises(Exception, match=null if family != "qwen2" else "NoneType"):  # noqa: B017, PT011
            reference(d)
        ours = ModelConfig.from_hf_dict(d)
        assert (ours.num_kv_heads if null == "num_key_value_heads" else ours.head_dim) == (32 if null != "head_dim"
                                                                                           else 256 // 32)
        return
    if family == "llama" and extra.get("use_sliding_window"):
        # LlamaConfig keeps the unknown key and builds full attention: we refuse to drop a window it asks for
        with pytest.raises(UnsupportedModelError, match="sliding-window attention in a llama config"):
            ModelConfig.from_hf_dict(d)
        return
    t, (q_heads, kv_heads, head_dim) = reference(d)
    ours = ModelConfig.from_hf_dict(d)
    assert (ours.num_heads, ours.num_kv_heads, ours.head_dim) == (q_heads, kv_heads, head_dim)
    assert (ours.num_kv_heads, ours.max_position_embeddings) == (t.num_key_value_heads, t.max_position_embeddings)
    assert (ours.bos_token_id, ours.eos_token_id) == (t.bos_token_id, t.eos_token_id)
    assert (ours.rms_norm_eps, ours.rope_theta, ours.tie_embeddings) == (
        t.rms_norm_eps, t.rope_parameters["rope_theta"], t.tie_word_embeddings)
    window = getattr(t, "sliding_window", None) or 0
    layers = tuple(i for i, kind in enumerate(getattr(t, "layer_types", None) or ["sliding_attention"] * 2)
                   if kind == "sliding_attention") if window else ()
    assert (ours.sliding_window, ours.sliding_layers) == (window, layers)


def test_an_absent_kv_head_count_that_does_not_divide_the_heads_names_the_default():
    # Qwen2 with 4 heads and no num_key_value_heads: transformers takes 32 KV heads (a model it cannot run)
    d = {"model_type": "qwen2", **SIZES, "num_attention_heads": 4}
    assert transformers.AutoConfig.for_model(**d).num_key_value_heads == 32
    with pytest.raises(UnsupportedModelError, match=r"^x/config\.json: num_attention_heads=4 is not a multiple of "
                                                    r"num_key_value_heads=32 \(the key is absent: transformers' qwen2 "
                                                    r"default\); expected num_key_value_heads in config\.json$"):
        ModelConfig.from_hf_dict(d, source="x/config.json")
    assert ModelConfig.from_hf_dict({**d, "num_key_value_heads": 2}).num_kv_heads == 2


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("extra", [{"attention_bias": True}, {"mlp_bias": True}, {"hidden_act": "swish"}])
def test_biases_and_activation_read_as_each_familys_model_builds_them(family, extra):
    # Mistral's attention has no bias whatever attention_bias says (we built q/k/v/o biases), Qwen2/Qwen3/Mistral
    # MLPs have none whatever mlp_bias says (we refused the config), and ACT2FN's "swish" is SiLU (we refused it)
    d = {"model_type": family, **SIZES, "num_key_value_heads": 8, **extra}
    if family == "llama" and extra.get("mlp_bias"):
        with pytest.raises(UnsupportedModelError, match="mlp_bias=true is not supported"):  # Llama's MLP has one
            ModelConfig.from_hf_dict(d)
        return
    t = transformers.AutoConfig.for_model(**d)
    with torch.device("meta"):
        layer = transformers.AutoModelForCausalLM.from_config(t).model.layers[0]
    ours = ModelConfig.from_hf_dict(d)
    attn = layer.self_attn
    assert (ours.qkv_bias, ours.o_bias) == (attn.q_proj.bias is not None, attn.o_proj.bias is not None)
    x = torch.linspace(-4, 4, 9)
    act = transformers.activations.ACT2FN[t.hidden_act]
    assert layer.mlp.gate_proj.bias is None and torch.equal(act(x), torch.nn.functional.silu(x))
