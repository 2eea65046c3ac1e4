"""Engine options, named as FreeToken's `ft serve` names them where one exists."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from engine.cache import CACHE_TYPES
from engine.errors import EngineError
from engine.moe import MOE_BACKENDS
from engine.runtime.faults import check_faults

ATTENTION_BACKENDS = ("auto", "torch", "triton")


class EngineConfigError(EngineError):
    """An engine option is out of range."""


@dataclass(frozen=True)
class EngineConfig:
    model: Optional[str] = None  # checkpoint directory; None = the built-in default
    dtype: str = "float32"  # CPU matmuls are fastest and exact in float32
    device: str = "auto"  # cuda when available, else cpu
    attention_backend: str = "auto"  # triton on CUDA, torch elsewhere
    max_running_requests: int = 4  # a small engine on two cores; FreeToken's default is larger
    chunked_prefill_size: int = 8192  # tokens of prefill per step, as FreeToken
    page_size: int = 1  # tokens per KV page; 1 = token-granular prefix matching
    kv_tokens: Optional[int] = None  # KV pool size in tokens; None = sized by memory_ratio
    memory_ratio: float = 0.05  # share of free memory the KV pool may take when kv_tokens is None
    max_kv_tokens: int = 262144  # cap on the memory_ratio sizing, so a big host doesn't over-allocate
    mamba_slots: int = 32  # linear-attention state slots: live requests + cached snapshots
    cache_type: str = "hybrid_radix"
    moe_backend: str = "resident"
    moe_cache_size: Optional[int] = None  # expert slots (of layers x experts) with offload
    mixed_chunk: bool = False  # let decodes ride along prefill steps (SGLang --enable-mixed-chunk)
    decode_log_interval: int = 40  # decode forwards between `Decode batch` log lines
    max_events: int = 65536  # bound of each hook's event queue
    seed: int = 0
    num_threads: Optional[int] = None  # torch intra-op threads on the CPU; None = torch's default (all cores)
    faults: tuple[str, ...] = ()  # degradation mechanisms switched on (engine.runtime.faults); none by default

    def __post_init__(self) -> None:
        if isinstance(self.faults, list):
            object.__setattr__(self, "faults", tuple(self.faults))
        problem = check_faults(self.faults, self.moe_backend)
        if problem is not None:
            raise EngineConfigError(problem)
        positive = ("max_running_requests", "chunked_prefill_size", "page_size", "mamba_slots",
                    "decode_log_interval", "max_events", "max_kv_tokens")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise EngineConfigError(f"{name} must be a positive integer, got {value!r}")
        for name in ("kv_tokens", "moe_cache_size", "num_threads"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise EngineConfigError(f"{name} must be a positive integer or unset, got {value!r}")
        if not 0.0 < self.memory_ratio <= 0.95:
            raise EngineConfigError(f"memory_ratio must be in (0, 0.95], got {self.memory_ratio!r}")
        _check_choice("cache_type", self.cache_type, CACHE_TYPES)
        _check_choice("moe_backend", self.moe_backend, MOE_BACKENDS)
        _check_choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        if self.moe_backend == "offload" and self.moe_cache_size is None:
            raise EngineConfigError("moe_cache_size must be set (expert slots) with moe_backend='offload'")
        if self.mamba_slots < self.max_running_requests:
            raise EngineConfigError(
                f"mamba_slots must be at least max_running_requests ({self.max_running_requests}), "
                f"got {self.mamba_slots}: every running request holds one state slot"
            )
        if self.kv_tokens is not None and self.kv_tokens % self.page_size:
            raise EngineConfigError(
                f"kv_tokens must be a multiple of page_size ({self.page_size}), got {self.kv_tokens}"
            )

    def resolved_line(self) -> str:
        """The `Resolved config:` log line body, MoE backend first as FreeToken prints it."""
        order = ["moe_backend", "attention_backend", "cache_type", "page_size"]
        rest = [f.name for f in fields(self) if f.name not in order]
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in order + rest)


def _check_choice(name: str, value: str, known) -> None:
    if value not in known:
        raise EngineConfigError(f"{name} must be one of {', '.join(known)}; got {value!r}")
