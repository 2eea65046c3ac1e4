"""SamplingParams (what a request asks for) and the sampler that turns logits into tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.errors import EngineError


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0  # 0 is greedy
    top_p: float = 1.0
    top_k: int | None = None  # None: no cut
    seed: int | None = None  # None: unseeded
    stop: tuple[str, ...] = ()  # stop strings; the text ends before them
    stop_token_ids: tuple[int, ...] = ()  # extra stop ids besides eos
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        # Accept lists and single values, store tuples.
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            self._fail("max_tokens", "an integer >= 1", self.max_tokens)
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            self._fail("temperature", "a number >= 0", self.temperature)
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            self._fail("top_p", "in (0, 1]", self.top_p)
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            self._fail("top_k", "None or an integer >= 1", self.top_k)
        if self.seed is not None and not isinstance(self.seed, int):
            self._fail("seed", "None or an integer", self.seed)
        if any(not isinstance(s, str) or not s for s in self.stop):
            self._fail("stop", "non-empty strings", list(self.stop))
        if any(not isinstance(i, int) or i < 0 for i in self.stop_token_ids):
            self._fail("stop_token_ids", "non-negative integers", list(self.stop_token_ids))

    @staticmethod
    def _fail(name: str, expected: str, found: object) -> None:
        raise EngineError(f"SamplingParams: field '{name}': expected {expected}, found {found!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    if params.greedy or params.seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(params.seed)
    return gen


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token from logits [V] (float32)."""
    if params.greedy:
        return int(torch.argmax(logits))
    logits = logits / params.temperature  # [V]
    if params.top_k is not None and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))  # [V]
    probs = torch.softmax(logits, dim=-1)  # [V]
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)  # [V], [V]
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= params.top_p  # [V]
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)  # [V]
    return int(torch.multinomial(probs, 1, generator=generator))


def stop_ids(params: SamplingParams, eos_token_ids: Sequence[int]) -> frozenset[int]:
    return frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else frozenset(eos_token_ids))
