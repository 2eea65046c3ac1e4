"""A request as the scheduler and the engine loop see it: the only state they share."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch

from engine.sampling import SamplingParams

if TYPE_CHECKING:
    from engine.cache.tree import TreeNode

_NO_SLOTS = torch.empty(0, dtype=torch.int64)


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False, kw_only=True)
class Request:
    """One generation request.

    Token layout (prompt, then output; the last output token is not yet computed):

        ids         p0 p1 p2 p3 p4 | o0 o1 o2
        computed    x  x  x  x  x    x  x  .      num_computed = 7
        cache owns  x  x  x  .  .                  num_cache_owned = 3 (locked via lock_node)
        kv_slots    s0 s1 s2 s3 s4   s5 s6 [s7]    whole pages; slots past num_cache_owned are ours
    """

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    arrival: float
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    kv_slots: torch.Tensor = _NO_SLOTS  # [capacity] int64
    num_computed: int = 0  # tokens whose K/V and state are written
    num_cache_owned: int = 0  # leading tokens whose KV slots the prefix cache owns
    lock_node: TreeNode | None = None  # prefix-cache node locked on this request's behalf
    state_slot: int | None = None  # its own linear-attention state slot while running
    num_cached_tokens: int | None = None  # prompt tokens from the prefix cache, first admission
    num_retractions: int = 0
    finish_reason: str | None = None  # "stop", "length", "abort"
    stop_text_len: int | None = None  # output text ends here when a stop string matched
    num_sent: int = 0  # output tokens handed out by take_updates()
    first_token_time: float | None = None
    finish_time: float | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        """Tokens to run before the next sample: 1 when decoding, more while prefilling."""
        return self.num_tokens - self.num_computed

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def token_ids(self, start: int, end: int) -> list[int]:
        """ids[start:end] of prompt + output, without building the whole list."""
        n_prompt = len(self.prompt_ids)
        if end <= n_prompt:
            return self.prompt_ids[start:end]
        if start >= n_prompt:
            return self.output_ids[start - n_prompt : end - n_prompt]
        return self.prompt_ids[start:] + self.output_ids[: end - n_prompt]


class RequestUpdate(NamedTuple):
    """New output of one request since the last `take_updates()`."""

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
