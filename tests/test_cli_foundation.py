"""`reasoner info`, `reasoner parity` and the bench commands, run in-process on tiny checkpoints."""

import json
import pathlib
import sys
from types import SimpleNamespace

import pytest

from tests.tolerances import logits_atol  # noqa: E402
from tests.models.tiny_checkpoints import make_hf_model, save_hf, save_tiny_tokenizer  # noqa: E402

from reasoner.cli import build_parser, main  # noqa: E402


def test_info_json_reports_devices_mesh_and_versions(capsys):
    assert main(["info", "--json", "--mesh", "fsdp=4,tensor=2"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["device_count"] == 8 and info["backend"] == "cpu"
    assert info["mesh"] == {"data": 1, "fsdp": 4, "tensor": 2}
    assert info["versions"]["jax"] and info["versions"]["flax"].startswith("0.12")


def test_info_bad_mesh_is_an_error(capsys):
    from reasoner.sharding import MeshError

    assert main(["info", "--mesh", "fsdp=3,tensor=2"]) == 1  # one line on stderr, no traceback
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("reasoner info: error: mesh") and "needs 6 devices but 8" in err
    with pytest.raises(MeshError, match="needs 6 devices but 8"):  # --traceback lets the exception through
        main(["info", "--mesh", "fsdp=3,tensor=2", "--traceback"])


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory):
    from reasoner.models.parity import PARITY_CHATS

    path = tmp_path_factory.mktemp("tiny_chat")
    texts = [m["content"] for chat in PARITY_CHATS for m in chat]
    vocab = save_tiny_tokenizer(str(path), texts)
    save_hf(make_hf_model("qwen3", seed=4, vocab_size=vocab, hidden_size=16, intermediate_size=32, head_dim=4), str(path))
    return str(path)


@pytest.mark.parametrize("mesh", [None, "fsdp=4,tensor=2"])
def test_parity_json_on_a_tiny_chat_model(tiny_chat_model, mesh, capsys):
    argv = ["parity", "--model", tiny_chat_model, "--json"] + (["--mesh", mesh] if mesh else [])
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) >= {"max_abs_logit_diff", "top1_agreement", "tokens", "reference"}
    assert result["reference"].startswith("transformers ")
    assert result["tokens"] >= 512 and result["prompts"] >= 8
    # Ours and transformers compute the same float32 decoder with other kernels (and, on the mesh, other reduction
    # splits): the logits may differ by the decoder's float32 error, `logits_atol` (its reduction depth at the
    # longest prompt, from the checkpoint's own config.json, times the largest reference logit). The command's
    # default tolerance is the same bound, derived in the library (`reasoner.models.parity.logit_bound`).
    config = json.loads((pathlib.Path(tiny_chat_model) / "config.json").read_text())
    cfg = SimpleNamespace(num_layers=config["num_hidden_layers"], hidden_size=config["hidden_size"],
                          intermediate_size=config["intermediate_size"], num_heads=config["num_attention_heads"],
                          head_dim=config["head_dim"], vocab_size=config["vocab_size"])
    bound = logits_atol([result["max_abs_logit"]], cfg, seq_len=result["seq_len"])
    assert result["max_abs_logit_diff"] <= bound, (result["max_abs_logit_diff"], bound)
    assert result["tolerance"] == result["float32_bound"] == pytest.approx(bound, rel=1e-12)
    assert result["top1_agreement"] == 1.0 and result["pass"]


def test_parity_fails_loudly_when_tolerance_is_impossible(tiny_chat_model, capsys):
    assert main(["parity", "--model", tiny_chat_model, "--json", "--tolerance", "0"]) == 1
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["pass"] is False


def test_bench_commands_are_registered():
    parser = build_parser()
    for name in ("load", "forward"):
        args = parser.parse_args(["bench", name, "--json", "--repeats", "3"])
        assert args.func.__module__ == f"reasoner.benchmarks.{name}"
