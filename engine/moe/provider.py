"""The expert provider a MoE model loads its experts into, for each of `engine.moe.MOE_BACKENDS`."""

from __future__ import annotations

import torch

from engine.errors import EngineError
from engine.model.experts import ExpertProvider, ResidentExperts
from engine.moe import MOE_BACKENDS
from engine.moe.expert_cache import OffloadExperts


def make_expert_provider(
    moe_backend: str, moe_cache_size: int | None = None, device: torch.device | str = "cpu", thrash: bool = False
) -> ExpertProvider:
    """The provider a MoE model loads its experts into. `offload` needs `moe_cache_size` slots;
    `thrash` (the expert-thrash fault, offload only) never gives a step's staging slot back."""
    if moe_backend == "resident":
        return ResidentExperts()
    if moe_backend == "offload":
        if moe_cache_size is None:
            raise EngineError("moe_backend='offload' needs moe_cache_size (expert slots), got None")
        return OffloadExperts(moe_cache_size, device, thrash=thrash)
    raise EngineError(f"moe_backend must be one of {', '.join(MOE_BACKENDS)}; got {moe_backend!r}")
