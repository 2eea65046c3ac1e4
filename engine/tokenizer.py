"""Tokenizers: a checkpoint's `tokenizer.json` through `tokenizers`, or plain bytes.

The byte tokenizer (the built-in default checkpoint) maps each UTF-8 byte to its value and
puts the special tokens right after the 256 bytes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from engine.errors import EngineError

logger = logging.getLogger(__name__)

BYTE_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 256, 257, 258


class Tokenizer:
    eos_token_ids: tuple[int, ...] = ()

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError


class ByteTokenizer(Tokenizer):
    def __init__(self, vocab_size: int, eos_token_ids: Sequence[int] = (256,)) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = tuple(eos_token_ids)
        self.special_ids = {name: 256 + i for i, name in enumerate(BYTE_SPECIALS) if 256 + i < vocab_size}

    def encode(self, text: str) -> list[int]:
        ids = list(text.encode("utf-8"))
        if ids and max(ids) >= self.vocab_size:
            raise EngineError(f"byte tokenizer: the text needs byte {max(ids)}, past vocab_size {self.vocab_size}")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        # ids past the bytes are special or unused: they have no text
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class HFTokenizer(Tokenizer):
    def __init__(self, path: Path, eos_token_ids: Sequence[int]) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        try:
            self._tok = _Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises a bare Exception on a malformed file
            raise EngineError(f"{path}: expected a tokenizers JSON file, {exc}") from None
        self.eos_token_ids = tuple(eos_token_ids)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


def load_tokenizer(checkpoint: str | Path, vocab_size: int, eos_token_ids: Sequence[int]) -> Tokenizer:
    """`tokenizer.json` when the checkpoint has one (and `tokenizers` imports), bytes otherwise."""
    checkpoint = Path(checkpoint)
    eos = tuple(eos_token_ids) or _generation_eos(checkpoint)
    path = checkpoint / "tokenizer.json"
    if path.exists():
        try:
            return HFTokenizer(path, eos)
        except ImportError:
            logger.warning("%s exists but the tokenizers library is not installed; using bytes", path)
    return ByteTokenizer(vocab_size, eos or ((256,) if vocab_size > 256 else ()))


def _generation_eos(checkpoint: Path) -> tuple[int, ...]:
    path = checkpoint / "generation_config.json"
    if not path.exists():
        return ()
    eos = json.loads(path.read_text()).get("eos_token_id")
    return () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos)
