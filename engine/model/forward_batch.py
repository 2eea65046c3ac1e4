"""ForwardBatch: what one forward pass computes, for a batch of requests.

Each request brings `prefix_len` tokens that are already in the KV pool and in its state
slot, and `extend_len` new tokens to run. Decode is extend-by-1. Tokens of all requests are
laid end to end:

    request          r0            r1        r2
    new tokens   [a a a a a]   [b b]     [c]           input_ids, positions: [T]
    context      [A A A a a a a a][B B B B b b][C C c]  kv_slots: [sum(prefix + extend)]
                  ^prefix ^new                          kv_indptr: [B + 1] starts in kv_slots

`kv_slots` names the pool slot of every context token (prefix and new), so a paged pool only
has to hand out slot ids; `new_kv_slots` is the tail of each request's run, where this
forward writes K/V.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from engine.errors import EngineError


class RequestSlice(NamedTuple):
    """One request's share of a forward."""

    new_token_ids: Sequence[int]  # the extend tokens
    prefix_len: int  # tokens of this request already in its KV slots and state slot
    kv_slots: Sequence[int] | torch.Tensor  # slots of the whole context: prefix_len + len(new_token_ids)
    state_slot: int  # linear-attention state slot of this request


@dataclass(frozen=True, kw_only=True)
class ForwardBatch:
    input_ids: torch.Tensor  # [T] int64, new tokens of every request, end to end
    positions: torch.Tensor  # [T] int64, position of each new token in its request
    prefix_lens: tuple[int, ...]  # B entries
    extend_lens: tuple[int, ...]  # B entries
    kv_slots: torch.Tensor  # [sum(prefix + extend)] int64, every context token's KV slot
    kv_indptr: torch.Tensor  # [B + 1] int64, request b's context is kv_slots[kv_indptr[b]:kv_indptr[b + 1]]
    new_kv_slots: torch.Tensor  # [T] int64, where the new tokens' K/V go
    state_slots: torch.Tensor  # [B] int64
    logits_indices: torch.Tensor  # [B] (last token of each request) or [T] (all positions)

    @classmethod
    def build(
        cls, requests: Sequence[RequestSlice], device: torch.device | str = "cpu", return_all_logits: bool = False
    ) -> ForwardBatch:
        if not requests:
            raise EngineError("ForwardBatch: expected at least one request, found none")
        prefix_lens = tuple(int(r.prefix_len) for r in requests)
        extend_lens = tuple(len(r.new_token_ids) for r in requests)
        ids: list[int] = []
        positions: list[int] = []
        slot_parts: list[torch.Tensor] = []
        for b, r in enumerate(requests):
            if extend_lens[b] == 0:
                raise EngineError(f"ForwardBatch: request {b} has no new tokens")
            slots = torch.as_tensor(r.kv_slots, dtype=torch.int64)  # [prefix + extend]
            if slots.numel() != prefix_lens[b] + extend_lens[b]:
                raise EngineError(
                    f"ForwardBatch: request {b} expected {prefix_lens[b] + extend_lens[b]} KV slots "
                    f"(prefix {prefix_lens[b]} + new {extend_lens[b]}), found {slots.numel()}"
                )
            ids.extend(r.new_token_ids)
            positions.extend(range(prefix_lens[b], prefix_lens[b] + extend_lens[b]))
            slot_parts.append(slots)
        ctx_lens = torch.tensor([p + e for p, e in zip(prefix_lens, extend_lens)])  # [B]
        kv_indptr = torch.zeros(len(requests) + 1, dtype=torch.int64)  # [B + 1]
        torch.cumsum(ctx_lens, 0, out=kv_indptr[1:])
        kv_slots = torch.cat(slot_parts)  # [sum ctx]
        new_kv_slots = torch.cat([s[p:] for s, p in zip(slot_parts, prefix_lens)])  # [T]
        ends = torch.tensor(extend_lens).cumsum(0)  # [B]
        logits_indices = torch.arange(len(ids)) if return_all_logits else ends - 1  # [T] or [B]
        return cls(
            input_ids=torch.tensor(ids, dtype=torch.int64, device=device),
            positions=torch.tensor(positions, dtype=torch.int64, device=device),
            prefix_lens=prefix_lens,
            extend_lens=extend_lens,
            kv_slots=kv_slots.to(device),
            kv_indptr=kv_indptr.to(device),
            new_kv_slots=new_kv_slots.to(device),
            state_slots=torch.tensor([int(r.state_slot) for r in requests], dtype=torch.int64, device=device),
            logits_indices=logits_indices.to(device),
        )

    @property
    def num_requests(self) -> int:
        return len(self.extend_lens)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def is_decode(self) -> bool:
        """Every request extends by exactly one token."""
        return all(e == 1 for e in self.extend_lens)

    def token_ranges(self) -> list[tuple[int, int]]:
        """[start, end) of each request's new tokens in input_ids."""
        out, start = [], 0
        for e in self.extend_lens:
            out.append((start, start + e))
            start += e
        return out
