"""CLI input handling of `reasoner generate` (the model runs are covered by the sampler tests)."""

import pytest

from reasoner.cli.generate import _read_prompts
from reasoner.tokenization import chat_ids


def test_reads_prompt_messages_and_ids_lines(tmp_path, tokenizer):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "hi"}\n\n{"messages": [{"role": "user", "content": "hi"}]}\n{"ids": [1, 2, 3]}\n')
    prompts = _read_prompts(str(path), tokenizer)
    expected = chat_ids(tokenizer, [{"role": "user", "content": "hi"}])
    assert prompts == [expected, expected, [1, 2, 3]]


@pytest.mark.parametrize("text, message", [
    ("{not json\n", "in.jsonl:1: not valid JSON"),
    ('{"txt": "x"}\n', "in.jsonl:1: expected a key 'prompt', 'messages', 'text' or 'ids'"),
    ('{"text": ""}\n', "in.jsonl:1: 'text' must be a non-empty string, got ''"),
    ("[1, 2]\n", "in.jsonl:1: expected a JSON object, got list"),
    ("\n", "no prompts"),
])
def test_bad_input_lines_name_the_line(tmp_path, tokenizer, text, message):
    path = tmp_path / "in.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        _read_prompts(str(path), tokenizer)
