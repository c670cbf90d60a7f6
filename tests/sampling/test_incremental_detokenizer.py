"""`RowText` decodes incrementally (a window of recent tokens, vLLM's prefix / read offsets) and its text is the
tokenizer's own full decode after every chunk: on SmolLM2's real byte-level tokenizer with multi-byte characters,
emoji, special tokens, stop strings across chunk boundaries and random byte soup; on a SentencePiece-style
tokenizer (Metaspace, byte fallback) whose decode of a suffix drops its leading space; with linear decoding work."""

import random

import pytest

from reasoner.sampling.stops import RowText

TEXT = ("Café ☕ naïve 数学 — the proof: ∀x ∃y (x < y) 🧠🔬 👩\u200d🔬 🇫🇷 e\u0301 done. "
        '<tool_call>{"name": "z3"}</tool_call> 你好世界 END 😀 Ωμέγα ßtraße')


def reference(tokenizer, ids) -> str:
    """The tokenizer's full decode, with the flags RowText documents."""
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def chunks(ids, sizes):
    start, i = 0, 0
    while start < len(ids):
        size = sizes[i % len(sizes)]
        yield start + size, ids[start:start + size]
        start, i = start + size, i + 1


def ids_of(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def assert_text_is_the_full_decode_at_every_chunk(tokenizer, ids, sizes, *, stream_is_prefix=True):
    """Feeds `ids` in chunks of `sizes` (cycled); the text is the full decode after each, and (byte-level BPE, whose
    decode never rewrites a finished character) the streamed text is always a prefix of it."""
    row = RowText(tokenizer)
    streamed = ""
    for end, chunk in chunks(ids, sizes):
        row.append(chunk)
        want = reference(tokenizer, ids[:end])
        assert row.text == want, (sizes, end)
        delta = row.stream_delta()
        assert "\ufffd" not in delta or "\ufffd" in want.rstrip("\ufffd")
        streamed += delta
        assert want.startswith(streamed) or not stream_is_prefix
    return row


@pytest.mark.parametrize("sizes", [[1], [2], [3], [5], [8], [1, 4, 2, 7]])
def test_multibyte_text_equals_the_full_decode_at_every_chunk(tokenizer, sizes):
    ids = ids_of(tokenizer, TEXT)
    # the text does split characters across tokens (a prefix decodes to an unfinished character)
    assert any(reference(tokenizer, ids[:k]).endswith("\ufffd") for k in range(1, len(ids)))
    row = assert_text_is_the_full_decode_at_every_chunk(tokenizer, ids, sizes)
    assert row.text == TEXT == tokenizer.decode(ids)
    for keep in (len(ids) - 1, len(ids) // 2, 3):  # a row cut short by the device: inside and before the window
        row.truncate(keep)
        assert row.text == reference(tokenizer, ids[:keep])


def test_special_tokens_between_the_text_are_skipped_as_the_full_decode_skips_them(tokenizer):
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pieces = [ids_of(tokenizer, part) for part in ("数学 ☕", " 🧠 naïve", "\nok")]
    ids = pieces[0] + [end] + pieces[1][:1] + [end] + pieces[1][1:] + [end, end] + pieces[2]
    for sizes in ([1], [2], [3]):
        row = assert_text_is_the_full_decode_at_every_chunk(tokenizer, ids, sizes)
        assert row.text == "数学 ☕ 🧠 naïve\nok"


def test_random_byte_soup_equals_the_full_decode(tokenizer):
    """Random single-byte tokens (invalid and unfinished UTF-8, replaced by U+FFFD) mixed with random vocabulary."""
    rng = random.Random(0)
    byte_ids = [i for i, t in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))) if len(t) == 1]
    assert len(byte_ids) >= 200
    for trial in range(6):
        ids = [rng.choice(byte_ids) if rng.random() < 0.7 else rng.randrange(len(tokenizer)) for _ in range(150)]
        assert_text_is_the_full_decode_at_every_chunk(tokenizer, ids, [rng.randint(1, 9) for _ in range(40)])


@pytest.mark.parametrize("sizes", [[1], [2], [3], [4], [7]])
def test_stop_strings_across_chunks_keep_the_shortest_prefix_holding_the_first_match(tokenizer, sizes):
    stops = ("🧠🔬 👩", "</tool_call> 你好", "ßtraße")
    ids = ids_of(tokenizer, TEXT)
    # independent answer: the first prefix whose full decode holds a stop string, cut after the earliest-ending one
    want_keep = next(k for k in range(1, len(ids) + 1) if any(s in reference(tokenizer, ids[:k]) for s in stops))
    full = reference(tokenizer, ids[:want_keep])
    want_end = min(full.find(s) + len(s) for s in stops if s in full)
    row = RowText(tokenizer, stops=stops)
    kept = None
    for end, chunk in chunks(ids, sizes):
        kept = row.append(chunk)
        if kept is not None:
            break
        assert row.text == reference(tokenizer, ids[:end])
    assert kept == want_keep and row.ids == ids[:want_keep]
    assert row.text == full[:want_end] == TEXT[:TEXT.index("🧠🔬 👩") + len("🧠🔬 👩")]


class CountingTokenizer:
    """The real tokenizer, counting the token ids passed to `decode`."""

    def __init__(self, tokenizer):
        self.tokenizer, self.decoded = tokenizer, 0

    def decode(self, ids, **kwargs):
        self.decoded += len(ids)
        return self.tokenizer.decode(ids, **kwargs)

    def __getattr__(self, name):  # all_special_ids and the rest: the real tokenizer's
        return getattr(self.tokenizer, name)


def test_decoding_work_is_linear_in_the_output_length(tokenizer):
    """Tokens passed to the tokenizer per generated token stay bounded as the output grows (the whole-row re-decode
    of every chunk passed about n / 16 per token in chunks of 8: 24 at 370 tokens, 4x more at 4x the length)."""
    per_token = {}
    for copies in (4, 16):
        ids = ids_of(tokenizer, TEXT * copies)
        counting = CountingTokenizer(tokenizer)
        row = RowText(counting, stops=("never appears",))
        for _, chunk in chunks(ids, [8]):
            row.append(chunk)
        assert row.text == reference(tokenizer, ids) and row.decoded_tokens == counting.decoded
        per_token[copies] = counting.decoded / len(ids)
        assert per_token[copies] < 6, per_token
    assert per_token[16] < 1.25 * per_token[4], per_token


def test_a_long_run_of_special_tokens_costs_what_text_costs(tokenizer):
    """A model that emits 1,000 `<|im_start|>` between two texts (skipped by the decode): the text is the full decode
    at every chunk and the tokens passed to the tokenizer stay a few per generated token (the window stayed put
    while the text did not grow, so each chunk of the run decoded the whole run again: about 60 per token here)."""
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    ids = ids_of(tokenizer, "数学 ☕ naïve") + [start] * 1000 + ids_of(tokenizer, " the proof 🧠 done")
    counting = CountingTokenizer(tokenizer)
    row = RowText(counting)
    for end, chunk in chunks(ids, [8]):
        row.append(chunk)
        assert row.text == reference(tokenizer, ids[:end])
    assert row.text == "数学 ☕ naïve the proof 🧠 done" and row.decoded_tokens == counting.decoded
    assert counting.decoded / len(ids) < 6, counting.decoded / len(ids)
    row.truncate(500)  # a cut inside the run
    assert row.text == reference(tokenizer, ids[:500]) == "数学 ☕ naïve"


@pytest.fixture(scope="module")
def sentencepiece_tokenizer():
    """A Llama-style tokenizer built with `tokenizers`: BPE over '▁'-joined words with byte fallback, decoded by
    Replace('▁', ' '), ByteFallback, Fuse, Strip(one leading space): decoding a suffix drops its leading space."""
    import json

    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = ["Hello world, the cat sat on the mat.", "naïve café and the world of cats", "the quick brown fox"] * 20
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"])
    base.train_from_iterator(texts, trainer=trainer)
    model = json.loads(base.to_str())["model"]
    vocab = dict(model["vocab"])
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tok.normalizer = base.normalizer
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def test_a_sentencepiece_suffix_loses_its_leading_space_but_the_text_does_not(sentencepiece_tokenizer):
    tok = sentencepiece_tokenizer
    text = "Hello world 数学 the cat 🧠 sat on the mat"
    ids = ids_of(tok, text)
    full = reference(tok, ids)
    assert full == text
    # the case: the suffix's decode is not the full decode's suffix (its leading space is stripped)
    split = [k for k in range(1, len(ids)) if reference(tok, ids[:k]) + reference(tok, ids[k:]) != full]
    assert any(reference(tok, ids[k:]) == full[len(reference(tok, ids[:k])):].removeprefix(" ") for k in split)
    for sizes in ([1], [2], [3], [5]):
        row = assert_text_is_the_full_decode_at_every_chunk(tok, ids, sizes, stream_is_prefix=False)
        assert row.text == text


def test_sentencepiece_byte_fallback_soup_equals_the_full_decode(sentencepiece_tokenizer):
    """Byte-fallback runs that turn invalid (the full decode then rewrites earlier characters as U+FFFD)."""
    tok = sentencepiece_tokenizer
    rng = random.Random(1)
    byte_ids = tok.convert_tokens_to_ids([f"<0x{b:02X}>" for b in range(256)])
    words = ids_of(tok, "Hello world the cat sat 数学 🧠")
    for trial in range(6):
        ids = [rng.choice(byte_ids) if rng.random() < 0.5 else rng.choice(words) for _ in range(80)]
        assert_text_is_the_full_decode_at_every_chunk(tok, ids, [rng.randint(1, 6) for _ in range(30)],
                                                      stream_is_prefix=False)
