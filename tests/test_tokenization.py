"""Tokenization against transformers' own chat-template tokenization on the real SmolLM2 tokenizer."""

import os
import pathlib
import subprocess
import sys

import pytest

from reasoner import tokenization
from tests.models_shared import smollm2_path


@pytest.fixture(scope="module")
def gguf_path() -> pathlib.Path:
    return smollm2_path()


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def tok(gguf_path, fresh_cache):
    """Converted from the GGUF afresh (an empty cache); the worker's other tests keep their own cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REASONER_CACHE", str(fresh_cache))
        return tokenization.load_tokenizer(gguf_path)


MESSAGES = [{"role": "user", "content": "If Anne is red, is she kind?"}]


# The prompt as SmolLM2's chat template writes it (its default system turn, the user turn, the generation prompt),
# written out by hand from the template text.
RENDERED = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nIf Anne is red, is she kind?<|im_end|>\n<|im_start|>assistant\n")
# SmolLM2's token ids of RENDERED (1 = <|im_start|>, 2 = <|im_end|>, 198 = "\n"); each id is checked against the
# vocabulary stored in the GGUF file by `test_chat_ids_decode_through_the_gguf_vocabulary`.
CHAT_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182,
            2, 198, 1, 4093, 198, 1937, 14285, 314, 2382, 28, 314, 1041, 1942, 47, 2, 198, 1, 520, 9531, 198]


def test_chat_rendering_equals_jinja2_and_the_hand_written_prompt(tok):
    """Independent of transformers' apply_chat_template: the template rendered by jinja2 itself, with the
    environment transformers documents for chat templates (trim_blocks, lstrip_blocks)."""
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    by_jinja = env.from_string(tok.chat_template).render(messages=MESSAGES, add_generation_prompt=True)
    assert by_jinja == RENDERED
    assert tokenization.render_chat(tok, MESSAGES) == RENDERED


def test_chat_ids_are_smollm2s_ids(tok):
    assert tokenization.chat_ids(tok, MESSAGES) == CHAT_IDS


@pytest.mark.slow
def test_chat_ids_decode_through_the_gguf_vocabulary(gguf_path):
    """CHAT_IDS against a source that shares no code with transformers' tokenizers: the token strings stored in the
    GGUF file (read by the gguf package), byte-decoded, concatenate to exactly RENDERED."""
    import gguf

    field = gguf.GGUFReader(str(gguf_path)).fields["tokenizer.ggml.tokens"]
    vocab = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    assert (vocab[1], vocab[2]) == ("<|im_start|>", "<|im_end|>")
    decoder = tokenization._BYTE_LEVEL  # bytes <-> GPT-2's byte-level alphabet (checked below on SmolLM2)
    pieces = [vocab[i].encode() if vocab[i].startswith("<|") else bytes(decoder[c] for c in vocab[i])
              for i in CHAT_IDS]
    assert b"".join(pieces).decode("utf-8") == RENDERED


def test_cached_tokenizer_is_identical(gguf_path, tok, fresh_cache, monkeypatch):
    """The second load reads the on-disk cache through the generic fast class without importing PyTorch; it
    encodes, renders the chat template and resolves special tokens exactly as transformers' AutoTokenizer does on
    the same directory."""
    from transformers import AutoTokenizer

    monkeypatch.setenv("REASONER_CACHE", str(fresh_cache))
    again = tokenization.load_tokenizer(gguf_path)
    (cached,) = (fresh_cache / "tokenizers").iterdir()
    auto = AutoTokenizer.from_pretrained(str(cached))
    text = "Anne is red.\n\nIf someone is red, they are kind. <|im_end|>"
    for other in (tok, auto):
        assert tokenization.encode(again, text) == tokenization.encode(other, text)
        assert again.chat_template == other.chat_template
        assert tokenization.chat_ids(again, MESSAGES) == tokenization.chat_ids(other, MESSAGES)
        assert (again.pad_token_id, again.eos_token_id) == (other.pad_token_id, other.eos_token_id)
    probe = ("import sys; from reasoner.tokenization import load_tokenizer; "
             f"load_tokenizer({str(gguf_path)!r}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "REASONER_CACHE": str(fresh_cache)})
    assert out.stdout.strip() == "False", out.stderr[-2000:]


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


def test_token_bytes_rebuild_the_text_even_where_a_token_splits_a_character():
    """OpenAI's logprob `bytes`: each token's raw bytes, so the pieces of a multi-byte character concatenate back
    (decoding such a token alone gives U+FFFD); byte-level alphabet: a bijection onto the 256 bytes."""
    from reasoner.tokenization import _BYTE_LEVEL, load_tokenizer, token_bytes

    assert sorted(_BYTE_LEVEL.values()) == list(range(256)) and len(_BYTE_LEVEL) == 256
    tok = load_tokenizer(smollm2_path())
    for text in ["café ©", "naïve — 日本語 🙂 ∀x∃y", "plain ascii, 123"]:
        ids = tok.encode(text, add_special_tokens=False)
        pieces = [token_bytes(tok, i) for i in ids]
        assert b"".join(bytes(p) for p in pieces) == text.encode("utf-8")
    split = [i for i in tok.encode("日本語 🙂", add_special_tokens=False) if "\ufffd" in tok.decode([i])]
    assert split  # the tokenizer does split characters across tokens here
    assert bytes(token_bytes(tok, tok.convert_tokens_to_ids("<|im_end|>"))) == b"<|im_end|>"
