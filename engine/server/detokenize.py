"""Streaming detokenization: token ids in, text deltas out, never half a character, never a stop string.

The byte tokenizer emits one UTF-8 byte per token, so a character can span up to four tokens;
an incremental UTF-8 decoder holds the partial bytes back. Other tokenizers decode a sliding
window of ids (vLLM's prefix/read offsets) and hold back text that ends in U+FFFD.

With stop strings, text that could be the start of one is held back until it is clear
that it is not; at the end the text is cut before the first stop string, as the engine does.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence

from engine.tokenizer import ByteTokenizer, Tokenizer

REPLACEMENT = "\ufffd"


class TextStream:
    """The text of one request's output, handed out piece by piece as tokens arrive."""

    def __init__(self, tokenizer: Tokenizer, stop_ids: Iterable[int] = (), stop: Sequence[str] = ()) -> None:
        self._decoder = _ByteDecoder() if isinstance(tokenizer, ByteTokenizer) else _WindowDecoder(tokenizer)
        self._skip = frozenset(stop_ids)
        self._stop = tuple(stop)
        self._max_stop = max((len(s) for s in self._stop), default=0)
        self.text = ""  # decoded so far (past a stop string too, until `finish`)
        self.num_sent = 0  # chars of `text` handed out

    def push(self, token_ids: Sequence[int]) -> str:
        """Text that is now safe to send after these new ids ('' when it all waits)."""
        self.text += self._decoder.push([t for t in token_ids if t not in self._skip])
        end = len(self.text)
        if self._stop:
            end = min(end, self._stop_at(), len(self.text) - self._held_stop_prefix())
        return self._take(end)

    def finish(self) -> str:
        """The rest of the text, cut before the first stop string."""
        self.text += self._decoder.flush()
        end = self._stop_at() if self._stop else len(self.text)
        return self._take(min(end, len(self.text)))

    def _take(self, end: int) -> str:
        if end <= self.num_sent:
            return ""
        out = self.text[self.num_sent : end]
        self.num_sent = end
        return out

    def _stop_at(self) -> int:
        """Index of the first stop string not yet sent past; len(text) when there is none."""
        start = max(0, self.num_sent - self._max_stop)
        hits = [i for i in (self.text.find(s, start) for s in self._stop) if i >= 0]
        return min(hits, default=len(self.text))

    def _held_stop_prefix(self) -> int:
        """Length of the longest tail of the text that a stop string starts with."""
        longest = 0
        for s in self._stop:
            for k in range(min(len(s) - 1, len(self.text)), longest, -1):
                if self.text.endswith(s[:k]):
                    longest = k
                    break
        return longest


class _ByteDecoder:
    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, ids: list[int]) -> str:
        return self._utf8.decode(bytes(t for t in ids if 0 <= t < 256))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


class _WindowDecoder:
    """Decode ids[prefix:] and ids[prefix:read]; the difference is the new text, unless it ends
    in a replacement character (a multi-token character not complete yet).

        ids     a b c d e f g
                    ^prefix ^read     text of [prefix:read] is already sent
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, ids: list[int]) -> str:
        self._ids.extend(ids)
        return self._advance(final=False)

    def flush(self) -> str:
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        sent = self._tokenizer.decode(self._ids[self._prefix : self._read])
        text = self._tokenizer.decode(self._ids[self._prefix :])
        if len(text) <= len(sent) or (text.endswith(REPLACEMENT) and not final):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return text[len(sent) :]
