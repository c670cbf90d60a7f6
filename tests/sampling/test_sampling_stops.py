"""Host-side text: stop strings found across chunk boundaries, the kept token count, streaming."""

import pytest

from reasoner.sampling.stops import RowText, decode


def ids_of(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_stop_string_across_chunks_keeps_tokens_through_the_match(tokenizer):
    text = 'I will check. <tool_call>{"name": "z3"}</tool_call> and then more text'
    ids = ids_of(tokenizer, text)
    row = RowText(tokenizer, stops=("</tool_call>",))
    kept = None
    for start in range(0, len(ids), 3):  # chunks of 3 tokens: the stop spans several
        kept = row.append(ids[start:start + 3])
        if kept is not None:
            break
    assert kept is not None and row.stopped
    assert row.text == 'I will check. <tool_call>{"name": "z3"}</tool_call>'
    # the kept tokens are the shortest prefix whose text contains the stop string
    assert "</tool_call>" in decode(tokenizer, ids[:kept])
    assert "</tool_call>" not in decode(tokenizer, ids[:kept - 1])
    assert row.ids == ids[:kept]
    with pytest.raises(RuntimeError):
        row.append(ids[kept:])


def test_earliest_of_several_stop_strings_wins(tokenizer):
    ids = ids_of(tokenizer, "alpha STOP beta END gamma")
    row = RowText(tokenizer, stops=("END", "STOP"))
    kept = row.append(ids)
    assert row.text == "alpha STOP" and kept is not None


def test_stop_string_already_split_before_the_chunk(tokenizer):
    ids = ids_of(tokenizer, "x = 1\n\n###\ny")
    row = RowText(tokenizer, stops=("\n\n###",))
    for t in ids:
        if row.append([t]) is not None:
            break
    assert row.text == "x = 1\n\n###"


def test_streaming_deltas_hold_back_unfinished_characters(tokenizer):
    text = "Café ☕ naïve 数学 done"
    ids = ids_of(tokenizer, text)
    row = RowText(tokenizer)
    pieces = []
    for t in ids:
        row.append([t])
        delta = row.stream_delta()
        assert "\ufffd" not in delta
        pieces.append(delta)
    assert "".join(pieces) == text == row.text


def test_no_stop_strings_never_stops(tokenizer):
    row = RowText(tokenizer)
    assert row.append(ids_of(tokenizer, "</tool_call> anything")) is None and not row.stopped
