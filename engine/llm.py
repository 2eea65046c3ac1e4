"""LLM: the offline entry point (`LLM(...).generate(prompts, params)`), in vLLM's shape.

It drives the batched `Engine` (continuous batching, prefix cache, chunked prefill) until
every request of the call is done, and returns one output per prompt, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from engine.errors import EngineError
from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine
from engine.runtime.request import Request
from engine.sampling import SamplingParams

logger = logging.getLogger(__name__)

Prompt = str | Sequence[int]


@dataclass(kw_only=True)
class RequestOutput:
    request_id: str
    prompt: str | None  # None when the prompt came as token ids
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)  # generated ids, a stop id included
    text: str = ""  # generated text, without stop ids and without the stop string
    finish_reason: str | None = None  # "stop" | "length"
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    prefill_time_s: float = 0.0  # arrival to first token
    decode_time_s: float = 0.0  # first token to the last


class LLM:
    """`max_model_len` bounds prompt + max_tokens of one request; the KV pool holds
    `max_running_requests` such requests unless `kv_tokens` says otherwise."""

    def __init__(
        self,
        model: str | Path | None = None,
        dtype: str = "float32",
        device: str | None = None,
        attention_backend: str = "auto",
        chunk_size: int | None = None,
        max_model_len: int | None = None,
        **engine_options: Any,
    ) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise EngineError(f"LLM: chunk_size must be None or >= 1, found {chunk_size}")
        if model is not None and not Path(model).is_dir():
            raise EngineError(f"LLM: expected a checkpoint directory, found no directory at {model}")
        self.max_model_len = max_model_len or 8192
        max_running = engine_options.get("max_running_requests", EngineConfig.max_running_requests)
        engine_options.setdefault("kv_tokens", self.max_model_len * max_running)
        config = EngineConfig(
            model=str(model) if model is not None else None,
            dtype=dtype,
            device=device or "auto",
            attention_backend=attention_backend,
            chunked_prefill_size=chunk_size or EngineConfig.chunked_prefill_size,
            **engine_options,
        )
        self.engine = Engine(config)
        self.checkpoint = Path(self.engine.checkpoint)
        self.model = self.engine.model
        self.config = self.engine.model_config
        self.tokenizer = self.engine.tokenizer
        self.attention = self.engine.attention
        self.max_model_len = min(self.max_model_len, self.config.max_position_embeddings)

    def generate(
        self, prompts: Prompt | Sequence[Prompt], params: SamplingParams | Sequence[SamplingParams] | None = None
    ) -> list[RequestOutput]:
        """Generate for each prompt (a string or a list of token ids); one output per prompt, in order."""
        prompts = _as_prompts(prompts)
        params = params if params is not None else SamplingParams()
        param_list = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(param_list) != len(prompts):
            raise EngineError(
                f"generate: expected one SamplingParams per prompt ({len(prompts)}), found {len(param_list)}"
            )
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
        for i, (prompt_ids, p) in enumerate(zip(ids, param_list)):
            if prompt_ids and len(prompt_ids) + p.max_tokens > self.max_model_len:
                raise EngineError(
                    f"request {i}: prompt ({len(prompt_ids)}) + max_tokens ({p.max_tokens}) "
                    f"exceeds max_model_len ({self.max_model_len})"
                )
        requests = []
        try:
            for prompt_ids, p in zip(ids, param_list):
                requests.append(self.engine.add_request(prompt_ids, p))
            while self.engine.has_work():
                self.engine.step()
        except BaseException:
            for request in requests:
                self.engine.abort(request.request_id)
            raise
        finally:
            self.engine.take_updates()
        return [self._output(prompt, r) for prompt, r in zip(prompts, requests)]

    def _output(self, prompt: Prompt, request: Request) -> RequestOutput:
        first = request.first_token_time or request.arrival
        return RequestOutput(
            request_id=request.request_id,
            prompt=prompt if isinstance(prompt, str) else None,
            prompt_token_ids=list(request.prompt_ids),
            token_ids=list(request.output_ids),
            text=self.engine.output_text(request),
            finish_reason=request.finish_reason,
            num_cached_tokens=request.num_cached_tokens or 0,
            prefill_time_s=first - request.arrival,
            decode_time_s=(request.finish_time or first) - first,
        )


def _as_prompts(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """One prompt (a string, or token ids) as a list of one; a list of prompts as a list."""
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, Sequence) and prompts and all(isinstance(t, int) for t in prompts):
        return [cast(Sequence[int], prompts)]  # every item an int: one prompt's token ids
    return list(cast(Sequence[Prompt], prompts))  # neither: the prompts
