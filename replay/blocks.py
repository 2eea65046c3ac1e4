"""Prefix blocks: how a growing conversation becomes a list of hash ids.

A block id names the content of a whole block *and everything before it*, as in the
Mooncake and Bailian traces: two prompts that share their first k ids share their first
k * block_size tokens. Changing a block (a partial last block that grows) gives it a new id.

    tokens:  |<- block 0 ->|<- block 1 ->|<- blk 2 ..|     num_tokens = 2 * B + r
    ids:     [    17      ,     18      ,    19     ]     19 names a partial block
    extend:  |<- block 0 ->|<- block 1 ->|<- block 2 ->|<- 3 ..|
    ids:     [    17      ,     18      ,     40      ,   41  ]  (19 is gone: its content grew)
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Sequence


class IdAllocator:
    """Hands out fresh block ids, unique within one trace."""

    def __init__(self, start: int = 1) -> None:
        self._next = itertools.count(start)

    def take(self, n: int) -> list[int]:
        return [next(self._next) for _ in range(n)]


class BlockChain:
    """The block ids of one growing context."""

    def __init__(self, block_size: int, alloc: IdAllocator, ids: Sequence[int] = (), num_tokens: int = 0) -> None:
        self.block_size = block_size
        self.alloc = alloc
        self.ids = list(ids)
        self.num_tokens = num_tokens

    def copy(self) -> BlockChain:
        return BlockChain(self.block_size, self.alloc, self.ids, self.num_tokens)

    def extend(self, num_new_tokens: int) -> None:
        """Append new content; a partial last block gets a new id because its content changed."""
        if num_new_tokens <= 0:
            return
        num_full = self.num_tokens // self.block_size
        self.num_tokens += num_new_tokens
        num_blocks = -(-self.num_tokens // self.block_size)
        self.ids = self.ids[:num_full] + self.alloc.take(num_blocks - num_full)

    def truncate(self, num_tokens: int) -> None:
        """Keep the first `num_tokens` tokens; a block cut in the middle gets a new id."""
        if num_tokens >= self.num_tokens:
            return
        num_full = num_tokens // self.block_size
        self.ids = self.ids[:num_full]
        if num_tokens % self.block_size:
            self.ids += self.alloc.take(1)
        self.num_tokens = num_tokens

    def advance_to(self, num_tokens: int, *, reset_to: int) -> None:
        """Make the context `num_tokens` long for the next call of a session.

        Longer than now: the new tokens were appended to the cached context. Shorter: the
        history was replaced (compaction, or an edit), so only the first `reset_to` tokens
        (the fixed prefix) are kept before new content.
        """
        if num_tokens >= self.num_tokens:
            self.extend(num_tokens - self.num_tokens)
            return
        keep = min(reset_to, num_tokens)
        self.truncate(keep)
        self.extend(num_tokens - keep)


def chained_block_hashes(blocks: Iterable[bytes]) -> list[int]:
    """Ids for content blocks, each hashed together with the id before it (63-bit ints)."""
    out: list[int] = []
    prev = b""
    for block in blocks:
        digest = hashlib.blake2b(prev + block, digest_size=8).digest()
        value = int.from_bytes(digest, "big") >> 1
        out.append(value)
        prev = digest
    return out


def token_block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Prefix-chained ids of a token-id prompt, one per `block_size` tokens (last may be partial)."""
    blocks = (
        b",".join(str(t).encode() for t in token_ids[i : i + block_size]) for i in range(0, len(token_ids), block_size)
    )
    return chained_block_hashes(blocks)


def text_block_hashes(text: str, chars_per_block: int) -> list[int]:
    """Prefix-chained ids of a text prompt, one per `chars_per_block` characters."""
    # Cut on characters, not bytes, so that a block boundary never splits a character.
    return chained_block_hashes(
        text[i : i + chars_per_block].encode("utf-8", "surrogatepass") for i in range(0, len(text), chars_per_block)
    )
