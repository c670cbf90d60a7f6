"""Complete HF exports: `from_pretrained(dir)` alone loads model, tokenizer, chat template and generation config;
a LoRA model's adapter loads with `peft.PeftModel.from_pretrained` onto the base model with our logits; the real
SmolLM2 export greedy-decodes the same tokens with transformers as with our sampler.

Tolerance (as derived in tests/models/test_lora.py): each implementation's logits are within
15 * (n_in_max + rank + 2) * eps32 of the exact value, relative to the largest logit (14 projections plus the head,
first-order terms adding up under RMSNorm); two implementations differ by at most twice that.
"""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tests.models.tiny_checkpoints import CHATML, make_hf_model, save_hf, save_tiny_tokenizer

from reasoner.models import load_model
from reasoner.models.export import ADAPTER_DIR, export_hf
from reasoner.models.lora import apply_lora

EPS32 = float(np.finfo(np.float32).eps)
RANK, ALPHA = 4, 16.0
INTERMEDIATE = 48  # tiny_checkpoints.TINY: the largest fan-in
REL_TOL = 2 * 15 * (INTERMEDIATE + RANK + 2) * EPS32
TEXTS = ["all cats are animals", "is bob a cat?", "if x then y", "the answer is yes", "prove that y holds"] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(HF base dir with tokenizer, tokenizer) for a tiny random Llama whose vocabulary is the tokenizer's."""
    base = tmp_path_factory.mktemp("base")
    vocab = save_tiny_tokenizer(str(base), TEXTS, vocab_size=96)
    save_hf(make_hf_model("llama", seed=3, vocab_size=vocab), str(base))
    from transformers import AutoTokenizer

    return base, AutoTokenizer.from_pretrained(str(base))


def _tokens(vocab: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, vocab, size=(2, 12))


def _ours(model, tokens) -> np.ndarray:
    logits, _ = model(jnp.asarray(tokens), positions_BxT=jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape))
    return np.asarray(logits)


def _torch_logits(model, tokens) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


def _assert_close(got, want, what):
    tol = REL_TOL * np.abs(want).max()
    err = np.abs(got - want).max()
    assert err <= tol, f"{what}: max |diff| {err:.3g} > {tol:.3g}"


def test_export_loads_with_from_pretrained_alone(tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    base, tokenizer = tiny
    model = load_model(str(base))
    out = export_hf(model, str(tmp_path / "export"), tokenizer=tokenizer)
    names = sorted(p.name for p in pathlib.Path(out).iterdir())
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json"} <= set(names) and ADAPTER_DIR not in names
    hf = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    tokens = _tokens(model.cfg.vocab_size)
    _assert_close(_torch_logits(hf, tokens), _ours(model, tokens), "exported model vs ours")
    messages = [{"role": "user", "content": "is bob a cat?"}]
    assert tok.chat_template == CHATML
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok("all cats are animals")["input_ids"] == tokenizer("all cats are animals")["input_ids"]
    from reasoner.tokenization import stop_token_ids

    gen = GenerationConfig.from_pretrained(out)
    assert gen.eos_token_id == list(stop_token_ids(tokenizer))  # <|endoftext|> and <|im_end|>
    assert gen.pad_token_id == tokenizer.pad_token_id


def _randomize_adapters(model, seed: int) -> None:
    key = jax.random.key(seed)
    for _, module in nnx.iter_modules(model):
        lora = getattr(module, "lora", None)
        if lora is not None:
            key, ka, kb = jax.random.split(key, 3)
            lora.a.set_value(0.3 * jax.random.normal(ka, lora.a[...].shape))
            lora.b.set_value(0.1 * jax.random.normal(kb, lora.b[...].shape))


def test_lora_export_loads_with_peft_and_matches_our_logits(tiny, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, tokenizer = tiny
    model = load_model(str(base))
    tokens = _tokens(model.cfg.vocab_size)
    plain = _ours(model, tokens)
    apply_lora(model, pattern=r"attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj", rank=RANK, alpha=ALPHA,
               rngs=nnx.Rngs(0))
    _randomize_adapters(model, 1)
    ours = _ours(model, tokens)
    assert np.abs(ours - plain).max() > 100 * REL_TOL * np.abs(plain).max()  # the adapters matter
    out = pathlib.Path(export_hf(model, str(tmp_path / "export"), tokenizer=tokenizer,
                                 base_model_name_or_path=str(base)))
    config = json.loads((out / ADAPTER_DIR / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", RANK, ALPHA)
    assert len(config["target_modules"]) == 2 * 7
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(out / ADAPTER_DIR))
    # every adapter tensor was loaded under peft's own name (a misnamed key would leave B at zero: plain logits)
    loaded = {k for k, _ in adapted.named_parameters() if "lora_" in k}
    assert len(loaded) == 2 * 2 * 7
    _assert_close(_torch_logits(adapted.eval(), tokens), ours, "peft adapter on the base vs ours")
    # the top-level export holds the merged weights
    _assert_close(_torch_logits(AutoModelForCausalLM.from_pretrained(str(out)), tokens), ours, "merged export vs ours")


def test_adapter_on_a_gguf_base_loads_with_auto_peft_as_its_readme_says(tmp_path, monkeypatch):
    """A LoRA run on a GGUF checkpoint (the embedded preset is one): the adapter records the GGUF's directory and
    its README gives the `gguf_file=` that transformers needs; PEFT's own loader then rebuilds our logits
    (transformers dequantizes the Q8_0 weights as we do, so the same float32 bound holds)."""
    from peft import AutoPeftModelForCausalLM
    from tests.models.tiny_checkpoints import write_tiny_gguf

    from reasoner.models.export import export_peft_adapter

    (tmp_path / "base").mkdir()
    gguf_path = write_tiny_gguf(str(tmp_path / "base" / "tiny.gguf"), make_hf_model("llama", seed=6))
    model = load_model(gguf_path)
    apply_lora(model, pattern=r"attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj", rank=RANK, alpha=ALPHA,
               rngs=nnx.Rngs(0))
    _randomize_adapters(model, 3)
    tokens = _tokens(model.cfg.vocab_size)
    monkeypatch.chdir(tmp_path)  # a relative base path is recorded absolute
    out = pathlib.Path(export_peft_adapter(model, str(tmp_path / "adapter"), base_model_name_or_path="base/tiny.gguf"))
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tmp_path / "base")
    readme = (out / "README.md").read_text()
    assert "from_pretrained(this_directory, gguf_file='tiny.gguf')" in readme
    monkeypatch.chdir(out)
    adapted = AutoPeftModelForCausalLM.from_pretrained(str(out), gguf_file="tiny.gguf").eval()
    assert sum("lora_" in k for k, _ in adapted.named_parameters()) == 2 * 2 * 7
    _assert_close(_torch_logits(adapted, tokens), _ours(model, tokens), "PEFT on the GGUF base vs ours")


def test_qlora_export_with_adapters_on_some_projections(tiny, tmp_path):
    # the projections without an adapter stay quantized after merge_lora; the export raised KeyError on them
    from transformers import AutoModelForCausalLM

    from reasoner.models.lora import merge_lora
    from reasoner.models.quant import quantize_projections

    base, tokenizer = tiny
    model = load_model(str(base))
    apply_lora(model, pattern=r"attn\.(q|v)_proj", rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(0))
    _randomize_adapters(model, 2)
    quantize_projections(model, kind="nf4")
    tokens = _tokens(model.cfg.vocab_size)
    ours = _ours(model, tokens)  # the quantized model with its adapters
    merge_lora(model)
    out = export_hf(model, str(tmp_path / "export"), tokenizer=tokenizer)
    # merging and dequantizing round the same products in another order: within the model's float32 bound
    _assert_close(_torch_logits(AutoModelForCausalLM.from_pretrained(out), tokens), ours, "QLoRA export vs ours")


def test_export_over_an_earlier_checkpoint_replaces_it(tiny, tmp_path):
    # a sharded save or a LoRA export left in the directory was read instead of (or beside) the new weights
    from transformers import AutoModelForCausalLM

    base, tokenizer = tiny
    out = tmp_path / "export"
    save_hf(make_hf_model("llama", seed=7, vocab_size=tokenizer.vocab_size), str(out), max_shard_size="20KB")
    (out / ADAPTER_DIR).mkdir()
    (out / ADAPTER_DIR / "adapter_config.json").write_text("{}")
    assert list(out.glob("model-*-of-*.safetensors"))
    model = load_model(str(base))
    tokens = _tokens(model.cfg.vocab_size)
    export_hf(model, str(out), tokenizer=tokenizer)
    assert not list(out.glob("model-*-of-*.safetensors")) and not (out / ADAPTER_DIR).exists()
    _assert_close(_ours(load_model(str(out)), tokens), _ours(model, tokens), "our reload")
    _assert_close(_torch_logits(AutoModelForCausalLM.from_pretrained(str(out)), tokens), _ours(model, tokens),
                  "transformers' reload")


@pytest.mark.slow
def test_smollm2_export_greedy_decodes_like_our_sampler(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.tokenization import load_tokenizer

    model = load_model("smollm2-135m-instruct")
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    out = export_hf(model, str(tmp_path / "smollm2"), tokenizer=tokenizer)
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tok = AutoTokenizer.from_pretrained(out)
    questions = ["What is 2 + 3?", "Is every cat an animal if every cat is a mammal?", "Name a prime number."]
    new = 12
    prompts = [hf_tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in questions]
    prompts = [p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p for p in prompts]
    ours = Sampler(model, tokenizer).generate(prompts, SamplingParams(max_new_tokens=new, temperature=0.0,
                                                                       eos_ids=()))
    for prompt, completion in zip(prompts, ours):
        with torch.no_grad():
            # an explicit mask: inferred from pad_token_id it would hide the prompt's <|im_end|> (pad == eos here)
            ids = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                              max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=None,
                              pad_token_id=hf_tok.pad_token_id)
        assert ids[0, len(prompt):].tolist() == list(completion.tokens), hf_tok.decode(ids[0, len(prompt):])
