"""Every EOS id of a checkpoint survives `export_hf`.

A config.json may list several EOS ids (Llama 3.x: end_of_text, eom, eot); transformers' `GenerationConfig` keeps
the list and generation stops on any of them. `ModelConfig.from_hf_dict` kept only the first, so an export made
without a tokenizer wrote one id to generation_config.json (and config.json): transformers then generated past
the others. The reference is transformers' own `GenerationConfig.from_model_config` of the source checkpoint.
"""

import json
import pathlib

import pytest
from tests.models.tiny_checkpoints import make_hf_model, save_hf, save_tiny_tokenizer

from reasoner.models import ModelConfig, load_model
from reasoner.models.export import export_hf

EOS_IDS = [2, 5, 7]  # 2 is the tiny tokenizer's <|im_end|>; 5 and 7 are EOS ids only the config names


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = tmp_path_factory.mktemp("base")
    save_hf(make_hf_model("llama", seed=1, eos_token_id=EOS_IDS), str(path))
    return path


def _reference_eos(path) -> list[int]:
    from transformers import AutoConfig, GenerationConfig

    return list(GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(path))).eos_token_id)


def test_config_keeps_every_eos_id_and_writes_them_back(base):
    cfg = ModelConfig.from_hf_dict(json.loads((base / "config.json").read_text()))
    assert (cfg.eos_token_id, cfg.eos_token_ids) == (2, (2, 5, 7))
    assert cfg.to_hf_dict()["eos_token_id"] == EOS_IDS
    single = cfg.replace(eos_token_ids=(), eos_token_id=9)
    assert (single.eos_token_ids, single.to_hf_dict()["eos_token_id"]) == ((9,), 9)


def test_export_without_tokenizer_keeps_every_eos_id(base, tmp_path):
    from transformers import AutoConfig, GenerationConfig

    want = _reference_eos(base)
    assert want == EOS_IDS
    out = export_hf(load_model(str(base)), str(tmp_path / "export"))
    assert GenerationConfig.from_pretrained(out).eos_token_id == want
    assert AutoConfig.from_pretrained(out).eos_token_id == want
    assert load_model(out).cfg.eos_token_ids == tuple(want)  # our own reload round-trips too


def test_export_with_tokenizer_adds_the_configs_eos_ids_to_the_end_of_turn_ids(base, tmp_path):
    from transformers import AutoTokenizer, GenerationConfig

    from reasoner.tokenization import stop_token_ids

    tok_dir = tmp_path / "tok"
    save_tiny_tokenizer(str(tok_dir), ["all cats are animals", "is bob a cat?"] * 20, vocab_size=96)
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    turn_ends = list(stop_token_ids(tokenizer))
    assert set(turn_ends) == {0, 2}  # <|endoftext|> and <|im_end|>
    out = pathlib.Path(export_hf(load_model(str(base)), str(tmp_path / "export"), tokenizer=tokenizer))
    got = GenerationConfig.from_pretrained(str(out)).eos_token_id
    assert got == turn_ends + [i for i in _reference_eos(base) if i not in turn_ends]  # [0, 2, 5, 7]
