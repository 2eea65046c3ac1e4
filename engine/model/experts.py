"""Where a MoE layer gets its expert weights: the seam the expert cache sits behind.

A sparse MoE layer asks its `ExpertProvider` for the weights of each expert the router
picked, once per expert per forward. `ResidentExperts` keeps every expert in place;
the offload tier (`engine.moe`) keeps them in host memory and copies them into a fixed
number of slots on a miss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

if TYPE_CHECKING:  # engine.moe builds on this module
    from engine.moe.expert_cache import ExpertCacheStats


def input_major(weight: torch.Tensor) -> torch.Tensor:
    """The same [O, I] matrix, stored input-major ([I, O] contiguous) and seen through `.t()`.

    `F.linear(x, w)` multiplies by `w.t()`; with this layout that is a plain row-major matrix,
    which the CPU's BLAS multiplies 1.2x (one row) to 2.3x (eight rows) faster than the
    transposed one it gets from an [O, I] tensor (docs/benchmarks.md, "Fixes made while measuring").
    """
    return weight.t().contiguous().t()


class ExpertWeights(NamedTuple):
    gate_up: torch.Tensor  # [2 * I, H]: gate_proj rows, then up_proj rows
    down: torch.Tensor  # [H, I]


class ExpertProvider:
    """Gives the weights of expert `expert` of MoE layer `layer` (layer = decoder layer index)."""

    def begin_step(self) -> None:
        """Called once per engine step, before the forward; a cache may protect this step's experts."""

    @property
    def num_misses(self) -> int | None:
        """Expert fetches that had to copy weights in, since start; None where nothing can miss.
        Cheap: the engine reads it every step."""
        return None

    def get(self, layer: int, expert: int) -> ExpertWeights:
        raise NotImplementedError

    def load(self, layer: int, expert: int, weights: ExpertWeights) -> None:
        """Take ownership of one expert's weights at load time."""
        raise NotImplementedError

    def allocate(self) -> tuple[int, int, int] | None:
        """Called once every expert is loaded: reserve what serving needs. (experts, device slots,
        device bytes of the slots) where experts are cached in slots, else None."""
        return None

    def stats(self) -> ExpertCacheStats | None:
        """Hits, misses and evictions per layer (engine.moe.expert_cache.ExpertCacheStats); None where nothing is cached."""
        return None

    def check_integrity(self) -> None:
        """Raise IntegrityError where the provider's bookkeeping is broken; nothing to check by default."""


class ResidentExperts(ExpertProvider):
    """Every expert stays where it was loaded (`moe_backend='resident'`)."""

    def __init__(self) -> None:
        self._weights: dict[tuple[int, int], ExpertWeights] = {}

    def load(self, layer: int, expert: int, weights: ExpertWeights) -> None:
        self._weights[(layer, expert)] = weights

    def get(self, layer: int, expert: int) -> ExpertWeights:
        return self._weights[(layer, expert)]

    @property
    def num_parameters(self) -> int:
        """Parameters held across every layer's experts."""
        return sum(w.gate_up.numel() + w.down.numel() for w in self._weights.values())
