"""Fixtures of tiny training runs: synthetic A*-style data and a word-level tokenizer (small LM head)."""

import pathlib
import sys

import pytest


from tests.trainers import traces

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="session")
def sft_data(tmp_path_factory):
    """(jsonl dir, tokenizer dir, vocab) of 64 train / 16 validation A*-style traces."""
    return traces.write_run_data(tmp_path_factory.mktemp("sft"), kind="sft", n_train=64, n_val=16)


@pytest.fixture(scope="session")
def dpo_data(tmp_path_factory):
    """(jsonl dir, tokenizer dir, vocab) of 64 train / 16 validation preference pairs."""
    return traces.write_run_data(tmp_path_factory.mktemp("dpo"), kind="dpo", n_train=64, n_val=16)


def tiny_config(kind: str, data, *extra: str):
    from reasoner.config import load_config

    data_dir, tok_dir, vocab = data
    name = "sft_astar.py" if kind == "sft" else "dpo_smt.py"
    overrides = traces.tiny_overrides(data_dir=data_dir, tokenizer_dir=tok_dir, vocab=vocab)
    return load_config(f"{CONFIGS / name}:tiny", [*overrides, *extra])
