"""Tiny random checkpoints built with transformers (no downloads) and a tiny GGUF writer."""

from __future__ import annotations

import os

import numpy as np

TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=128, rms_norm_eps=1e-5)


def hf_config(family: str, **overrides):
    import transformers

    kw = dict(TINY, **overrides)
    if family == "llama":
        kw.setdefault("rope_parameters", {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 16})
        return transformers.LlamaConfig(**kw)
    if family == "qwen2":
        kw.setdefault("tie_word_embeddings", True)
        kw.setdefault("rope_parameters", {"rope_type": "default", "rope_theta": 1e6})
        return transformers.Qwen2Config(**kw)
    if family == "qwen3":
        kw.setdefault("rope_parameters", {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0})
        return transformers.Qwen3Config(**kw)
    raise ValueError(family)


def make_hf_model(family: str, *, seed: int = 0, **overrides):
    """A random transformers model with non-trivial norms and biases (so mistakes show)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(family, **overrides), dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    return model.eval()


def save_hf(model, path: str, *, max_shard_size=None) -> str:
    kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, safe_serialization=True, **kw)
    return path


def hf_logits(model, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
    import torch

    with torch.no_grad():
        kw = {} if attention_mask is None else {"attention_mask": torch.tensor(attention_mask)}
        return model(torch.tensor(tokens), **kw).logits.float().numpy()


def write_tiny_gguf(path: str, hf_model, *, quantize_linear: bool = True, bad_type_for: str | None = None,
                    context_length: bool = True) -> str:
    """Writes `hf_model` (llama family) as a llama.cpp-style GGUF: Q/K rows (and biases) permuted, linear
    weights quantized to Q8_0; `bad_type_for` stores that GGUF tensor as Q8_1 (gguf cannot
    dequantize it); `context_length=False` leaves out `llama.context_length`."""
    import gguf

    from reasoner.models.gguf import gguf_name, permute_llama_qk

    cfg = hf_model.config
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(cfg.num_hidden_layers)
    if context_length:
        w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.head_dim)
    for name, t in hf_model.state_dict().items():
        a = t.detach().float().numpy()
        if name.endswith(("q_proj.weight", "q_proj.bias")):  # llama.cpp's converter permutes both
            a = permute_llama_qk(a, cfg.num_attention_heads)
        elif name.endswith(("k_proj.weight", "k_proj.bias")):
            a = permute_llama_qk(a, cfg.num_key_value_heads)
        g = gguf_name(name)
        if g == bad_type_for:
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1]
            raw = np.zeros((a.shape[0], a.shape[1] // block * size), np.uint8)
            w.add_tensor(g, raw, raw_dtype=gguf.GGMLQuantizationType.Q8_1)
        elif quantize_linear and a.ndim == 2 and a.shape[-1] % 32 == 0:  # Q8_0 blocks are 32 wide
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(g, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(g, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert os.path.getsize(path) > 0
    return path


CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def save_tiny_tokenizer(path: str, texts: list[str], *, vocab_size: int = 320) -> int:
    """Trains a byte-level BPE tokenizer with a ChatML template on `texts`, saves it in `path`;
    returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token="<|im_start|>")
    fast.chat_template = CHATML
    fast.save_pretrained(path)
    return len(fast)
