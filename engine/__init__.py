"""The built-in inference engine: a Qwen3-Next-architecture model served from slot pools.

    from engine import LLM, SamplingParams
    outs = LLM().generate(["hello"], SamplingParams(max_tokens=16, temperature=0))

`LLM`, `RequestOutput` and `SamplingParams` are loaded on first use, so that the torch-free
parts (`engine.server.wire`, the bodies soak reads) import without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LLM", "RequestOutput", "SamplingParams"]
_WHERE = {"LLM": "engine.llm", "RequestOutput": "engine.llm", "SamplingParams": "engine.sampling"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
