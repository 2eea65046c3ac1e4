"""The built-in inference engine: a Qwen3-Next-architecture model served from slot pools.

    from engine import LLM, SamplingParams
    outs = LLM().generate(["hello"], SamplingParams(max_tokens=16, temperature=0))
"""

from engine.llm import LLM, RequestOutput
from engine.sampling import SamplingParams

__all__ = ["LLM", "RequestOutput", "SamplingParams"]
