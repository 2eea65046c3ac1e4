"""Engine options, named as FreeToken's `ft serve` names them where one exists."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field, fields
from typing import Any

from engine.errors import EngineError
from engine.moe import MOE_BACKENDS
from engine.runtime.faults import FaultSet, check_faults

# The choices, named here (the experts' in torch-free engine.moe) so that the config (and the server's
# command line built from it) loads without torch; engine.cache's builders are checked against its own.
ATTENTION_BACKENDS = ("auto", "torch", "triton")
CACHE_TYPES = ("hybrid_radix", "radix", "none")
FORWARD_PATHS = ("fast", "reference")
# Options renamed, old name -> new. The old name is still read, with a FutureWarning: from Python, a
# --config file, a command line, and the --engine-arg words that a soak keeps in its run directory.
# decode_path: the fast path took decode steps alone when it was named, and now takes every forward.
RENAMED_OPTIONS = {"decode_path": "forward_path"}
DEFAULT_FORWARD_PATH = "fast"


def option(default: Any, help: str, flag: str | None = None) -> Any:
    """A config field with its command-line help (and its flag where it is not --<name>): the server's
    options are generated from these fields (engine.server.cli), so each is declared once. Typed as
    what `dataclasses.field` gives a field's default (Any): each field's annotation says its type."""
    return field(default=default, metadata={"help": help, **({"flag": flag} if flag else {})})


class EngineConfigError(EngineError):
    """An engine option is out of range."""


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    model: str | None = option(None, "Checkpoint directory (HF layout); the built-in default when unset.")
    dtype: str = option("float32", "Weight and KV dtype (CPU matmuls are fastest and exact in float32).")
    device: str = option("auto", "auto (cuda when available, else cpu), cpu or cuda.")
    attention_backend: str = option("auto", "auto (triton on CUDA, torch elsewhere), torch or triton.")
    max_running_requests: int = option(4, "Requests decoded together at most.")
    chunked_prefill_size: int = option(8192, "Prompt tokens computed per step at most.")
    page_size: int = option(1, "Tokens per KV page (1: token-granular prefix matching).")
    kv_tokens: int | None = option(None, "KV pool size in tokens; sized by --memory-ratio when unset.")
    memory_ratio: float = option(0.05, "Share of free memory the KV pool may take when --kv-tokens is unset.")
    max_kv_tokens: int = option(262144, "Cap on the --memory-ratio sizing, so a big host doesn't over-allocate.")
    mamba_slots: int = option(32, "Linear-attention state slots: running requests plus cached snapshots.")
    cache_type: str = option("hybrid_radix", "Prefix cache: hybrid_radix, radix or none.")
    moe_backend: str = option(
        "resident", "Where experts live: resident, or offload (a host tier behind --moe-cache-size device slots)."
    )
    moe_cache_size: int | None = option(None, "Device expert slots with --moe-backend offload.")
    forward_path: str = option(
        DEFAULT_FORWARD_PATH,
        "fast: every forward (prefill, extend, decode, mixed) through the fused layers and batched ops "
        "(the log says why where the model cannot); reference: the layer modules, op by op.",
    )
    mixed_chunk: bool = option(
        False, "Let decodes ride along prefill steps (SGLang's --enable-mixed-chunk).", flag="--enable-mixed-chunk"
    )
    decode_log_interval: int = option(40, "Decode forwards between 'Decode batch' log lines.")
    max_events: int = option(65536, "Bound of each hook's event queue.")
    seed: int = option(0, "Seed of sampling and of the faults that shuffle.")
    num_threads: int | None = option(
        None,
        "Torch threads for the model on the CPU (unset: torch's default; "
        "`soak serve` leaves one core to the server thread).",
        flag="--threads",
    )
    faults: tuple[str, ...] = option(
        (),
        "Switch on a degradation mechanism (repeatable): eviction-scan, "
        "snapshot-leak, kv-scatter, expert-thrash (needs --moe-backend "
        "offload), gc-pressure, output-buffer. See docs/faults.md.",
        flag="--fault",
    )
    fault_buffer_rows: int = option(
        2048, "output-buffer fault: vocabulary rows the output buffer grows to (the slowdown's size)."
    )
    fault_after: int = option(
        100, "output-buffer fault: the finished request that grows the buffer (the slowdown's onset)."
    )
    fault_leak_after: int = option(
        0,
        "snapshot-leak fault: the finished request from which dropped snapshots leak (the onset; 0: from the start).",
    )

    decode_path: InitVar[str | None] = None  # forward_path's old name (RENAMED_OPTIONS), still read

    def __post_init__(self, decode_path: str | None) -> None:
        if decode_path is not None:  # the old name wins over a forward_path left at its default
            given = {"decode_path": decode_path}
            if self.forward_path != DEFAULT_FORWARD_PATH:
                given["forward_path"] = self.forward_path
            object.__setattr__(self, "forward_path", current_names(given)["forward_path"])
        if isinstance(self.faults, list):
            object.__setattr__(self, "faults", tuple(self.faults))
        problem = check_faults(self.faults, self.moe_backend)
        if problem is not None:
            raise EngineConfigError(problem)
        positive = (
            "max_running_requests",
            "chunked_prefill_size",
            "page_size",
            "mamba_slots",
            "decode_log_interval",
            "max_events",
            "max_kv_tokens",
            "fault_buffer_rows",
            "fault_after",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise EngineConfigError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.fault_leak_after, int) or self.fault_leak_after < 0:
            raise EngineConfigError(f"fault_leak_after must be a whole number >= 0, got {self.fault_leak_after!r}")
        for name in ("kv_tokens", "moe_cache_size", "num_threads"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise EngineConfigError(f"{name} must be a positive integer or unset, got {value!r}")
        if not 0.0 < self.memory_ratio <= 0.95:
            raise EngineConfigError(f"memory_ratio must be in (0, 0.95], got {self.memory_ratio!r}")
        _check_choice("cache_type", self.cache_type, CACHE_TYPES)
        _check_choice("moe_backend", self.moe_backend, MOE_BACKENDS)
        _check_choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        _check_choice("forward_path", self.forward_path, FORWARD_PATHS)
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

    @property
    def fault_set(self) -> FaultSet:
        """The faults switched on, one flag each."""
        return FaultSet.of(self.faults)

    def resolved_line(self) -> str:
        """The `Resolved config:` log line body, MoE backend first as FreeToken prints it."""
        order = ["moe_backend", "attention_backend", "cache_type", "page_size"]
        rest = [f.name for f in fields(self) if f.name not in order]
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in order + rest)


def _check_choice(name: str, value: str, known: Sequence[str]) -> None:
    if value not in known:
        raise EngineConfigError(f"{name} must be one of {', '.join(known)}; got {value!r}")


def current_names(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` (engine option names and values) with each old name (RENAMED_OPTIONS) given under its
    new one, and a FutureWarning that says so; an old name beside its new one with another value is
    an EngineConfigError."""
    out = dict(options)
    for old, new in RENAMED_OPTIONS.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new in out and out[new] != value:
            raise EngineConfigError(
                f"{old} is the old name of {new}; give one of them, got {old}={value!r} and {new}={out[new]!r}"
            )
        warnings.warn(
            f"engine option {old} is now named {new} (the old name is still read)", FutureWarning, stacklevel=3
        )
        out[new] = value
    return out
