"""Host-side text of generated tokens: incremental detokenization and stop-string detection.

Decoding runs on the device in chunks of steps; between chunks the host feeds each row's new
tokens to its `RowText`, which decodes them in a window of recent tokens (as vLLM's incremental
detokenizer, with a prefix offset and a read offset) and searches only the tail that could hold a
new match. When a stop string appears, `RowText` names how many tokens to keep: up to and
including the token that completed the first match. The text keeps the stop string and is cut
right after it.

Incremental decoding: tokens only form valid text in context (byte-level BPE splits a multi-byte
character across tokens; SentencePiece decoders drop the leading space of the first token they
decode). `ids[:read]` decode to a text that ends on a complete character; the new tokens are
decoded together with `ids[prefix:read]` (the tokens before them) and the text of that context is
cut off the front, so its leading-space rule applies to the context, not to the new text. The
text equals `decode(ids)` at every step, and each token is decoded a bounded number of times
(re-decoding the whole row every chunk was quadratic in its length).

Text is decoded with `skip_special_tokens=True` (end-of-turn markers do not show up in results); the special ids
that decode to nothing are left out of the window (the decode would skip them anyway), so a long run of them costs
no more than ordinary text (the window moves only when the text grows: a run of skipped tokens kept it in place and
made every chunk decode the whole run again). A text ending in U+FFFD (an unfinished multi-byte character) is not
yet stable, so streaming holds it back until the next token completes it.
"""

from __future__ import annotations

from typing import Sequence

_REPLACEMENT = "\ufffd"


def decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


class RowText:
    """Text of one row's generated tokens, grown chunk by chunk.

    `stops`: stop strings. `append(ids)` returns None, or the number of tokens to keep when a stop
    string appeared (after which the row is finished and appends are refused). `decoded_tokens`
    counts the ids passed to the tokenizer (linear in the row's length; see module docstring).
    """

    def __init__(self, tokenizer, stops: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.ids: list[int] = []
        self.text = ""
        self._context: list[int] = []  # ids[prefix:_read] less skipped ids: the new tokens are decoded after them
        self._read = 0  # ids[:_read] decode to _head, a text that ends on a complete character
        self._skipped: frozenset[int] | None = None  # special ids that decode to nothing (`_kept`)
        self._head = ""
        self._checked = 0  # text[:_checked] is stable and holds no stop string
        self._streamed = 0
        self.stopped = False
        self.decoded_tokens = 0

    def append(self, ids: Sequence[int]) -> int | None:
        if self.stopped:
            raise RuntimeError("RowText.append after a stop string ended the row")
        if not len(ids):
            return None
        before = len(self.ids)
        self.ids.extend(int(t) for t in ids)
        context = self._decode(self._context)
        self.text = self._text_of(len(self.ids), context)
        hit = self._first_match(self.text, start=self._checked) if self.stops else None
        if hit is None:
            self._checked = self._stable_len()
            self._advance()
            return None
        # The match completed somewhere in the new tokens: find the first prefix that holds it.
        for keep in range(before + 1, len(self.ids) + 1):
            prefix_text = self._text_of(keep, context)
            end = self._first_match(prefix_text, start=self._checked)
            if end is not None:
                self.ids = self.ids[:keep]
                self.text = prefix_text[:end]
                self.stopped = True
                return keep
        raise AssertionError("stop string found in the full text but in no prefix")  # decode is monotone

    def _decode(self, ids: Sequence[int]) -> str:
        self.decoded_tokens += len(ids)
        return decode(self.tokenizer, ids)

    def _text_of(self, n: int, context: str) -> str:
        """`decode(ids[:n])` for n >= _read: the stable head, then ids[_read:n] decoded in their window
        (`context` is the text of `_context`)."""
        window = self._decode(self._context + self._kept(self.ids[self._read:n]))
        if not window.startswith(context):  # the decoder rewrote the context (SentencePiece byte fallback turns a
            # run of byte tokens that the new ones leave unfinished into U+FFFD, context included): decode all
            return self._decode(self.ids[:n])
        return self._head + window[len(context):]

    def _kept(self, ids: Sequence[int]) -> list[int]:
        """`ids` without the special ids that decode to nothing (found once per row, checked by decoding each)."""
        if self._skipped is None:
            special = getattr(self.tokenizer, "all_special_ids", None) or ()
            self._skipped = frozenset(i for i in special if self._decode([i]) == "")
        return [t for t in ids if t not in self._skipped] if self._skipped else list(ids)

    def _advance(self) -> None:
        """Moves the window past the new tokens once their text ends on a complete character (vLLM's rule), or
        past them at once when they are all skipped ids (the text is the head's: nothing of theirs to decode)."""
        if len(self.text) > len(self._head) and not self.text.endswith(_REPLACEMENT):
            self._context, self._read, self._head = self._kept(self.ids[self._read:]), len(self.ids), self.text
        elif self.text == self._head and not self._kept(self.ids[self._read:]):
            self._read = len(self.ids)

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
        if keep < self._read:  # the window starts again from the first token
            self._context, self._read, self._head = [], 0, ""
        self.text = self._text_of(keep, self._decode(self._context))
