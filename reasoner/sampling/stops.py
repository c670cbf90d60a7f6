"""Host-side text of generated tokens: incremental detokenization and stop-string detection.

Decoding runs on the device in chunks of steps; between chunks the host feeds each row's new
tokens to its `RowText`, which re-decodes the row (byte-level BPE tokens only form valid text in
context) and searches only the tail that could hold a new match. When a stop string appears,
`RowText` names how many tokens to keep: up to and including the token that completed the first
match. The text keeps the stop string and is cut right after it.

Text is decoded with `skip_special_tokens=True` (end-of-turn markers do not show up in results);
a text ending in U+FFFD (an unfinished multi-byte character) is not yet stable, so streaming
holds it back until the next token completes it.
"""

from __future__ import annotations

from typing import Sequence

_REPLACEMENT = "\ufffd"


def decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


class RowText:
    """Text of one row's generated tokens, grown chunk by chunk.

    `stops`: stop strings. `append(ids)` returns None, or the number of tokens to keep when a stop
    string appeared (after which the row is finished and appends are refused).
    """

    def __init__(self, tokenizer, stops: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.ids: list[int] = []
        self.text = ""
        self._checked = 0  # text[:_checked] is stable and holds no stop string
        self._streamed = 0
        self.stopped = False

    def append(self, ids: Sequence[int]) -> int | None:
        if self.stopped:
            raise RuntimeError("RowText.append after a stop string ended the row")
        if not len(ids):
            return None
        before = len(self.ids)
        self.ids.extend(int(t) for t in ids)
        self.text = decode(self.tokenizer, self.ids)
        if not self.stops:
            self._checked = self._stable_len()
            return None
        hit = self._first_match(self.text, start=self._checked)
        if hit is None:
            self._checked = self._stable_len()
            return None
        # The match completed somewhere in the new tokens: find the first prefix that holds it.
        for keep in range(before + 1, len(self.ids) + 1):
            prefix_text = decode(self.tokenizer, self.ids[:keep])
            end = self._first_match(prefix_text, start=self._checked)
            if end is not None:
                self.ids = self.ids[:keep]
                self.text = prefix_text[:end]
                self.stopped = True
                return keep
        raise AssertionError("stop string found in the full text but in no prefix")  # decode is monotone

    def _stable_len(self) -> int:
        n = len(self.text)
        while n and self.text[n - 1] == _REPLACEMENT:
            n -= 1
        return n

    def _first_match(self, text: str, *, start: int) -> int | None:
        """End offset of the earliest-ending stop string that ends after `start`."""
        best = None
        for s in self.stops:
            i = text.find(s, max(0, start - len(s) + 1))
            if i >= 0 and (best is None or i + len(s) < best):
                best = i + len(s)
        return best

    def stream_delta(self) -> str:
        """Stable text produced since the previous call (for streaming to a terminal)."""
        end = len(self.text) if self.stopped else self._stable_len()
        delta = self.text[self._streamed:end]
        self._streamed = max(self._streamed, end)
        return delta

    def truncate(self, keep: int) -> None:
        """Keeps the first `keep` tokens (a row cut short by the device, e.g. at EOS)."""
        self.ids = self.ids[:keep]
        self.text = decode(self.tokenizer, self.ids)
