"""LLM: the offline entry point (`LLM(...).generate(prompts, params)`), in vLLM's shape.

Requests run one at a time here: a prefill (in chunks of `chunk_size` when set), then a
decode loop. Every forward goes through a ForwardBatch and the KV/state pools, so the
batched engine only adds scheduling and slot allocation. Slot assignment is the trivial
one: token position p of the running request lives in KV slot p, and its state in slot 0.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, Union

import torch

from engine.errors import EngineError
from engine.memory.kv_pool import KVPool
from engine.memory.state_pool import StatePool
from engine.model.attention_backend import make_attention_backend
from engine.model.checkpoint import default_checkpoint
from engine.model.experts import ExpertProvider
from engine.model.forward_batch import ForwardBatch, RequestSlice
from engine.model.loader import load_model
from engine.sampling import SamplingParams, make_generator, sample, stop_ids
from engine.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)

Prompt = Union[str, Sequence[int]]


@dataclass
class RequestOutput:
    request_id: int
    prompt: str | None  # None when the prompt came as token ids
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)  # generated ids, a stop id included
    text: str = ""  # generated text, without stop ids and without the stop string
    finish_reason: str | None = None  # "stop" | "length"
    prefill_time_s: float = 0.0
    decode_time_s: float = 0.0


class LLM:
    def __init__(self, model: str | Path | None = None, dtype: str = "float32", device: str | None = None,
                 attention_backend: str = "auto", chunk_size: int | None = None,
                 max_model_len: int | None = None, experts: ExpertProvider | None = None) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise EngineError(f"LLM: chunk_size must be None or >= 1, found {chunk_size}")
        self.checkpoint = Path(model) if model is not None else default_checkpoint()
        if not self.checkpoint.is_dir():
            raise EngineError(f"LLM: expected a checkpoint directory, found no directory at {self.checkpoint}")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = load_model(self.checkpoint, dtype=dtype, device=self.device, experts=experts)
        config = self.config = self.model.config
        self.tokenizer = load_tokenizer(self.checkpoint, config.vocab_size, config.eos_token_ids)
        self.max_model_len = max_model_len or min(config.max_position_embeddings, 8192)
        self.chunk_size = chunk_size
        self.kv_pool = KVPool(self.max_model_len, config.full_attention_layers, config.num_key_value_heads,
                              config.head_dim, dtype=self.model.model.embed_tokens.weight.dtype, device=self.device)
        self.state_pool = StatePool(1, config.linear_attention_layers, config.linear_conv_dim,
                                    config.linear_conv_kernel_dim, config.linear_num_value_heads,
                                    config.linear_key_head_dim, config.linear_value_head_dim, device=self.device)
        self.attention = make_attention_backend(attention_backend, self.device)
        self._slots = torch.arange(self.max_model_len, device=self.device)  # [S]: position p -> slot p
        self._next_id = 0
        logger.info("LLM ready: %s on %s, attention %s", self.checkpoint, self.device, self.attention.name)

    @torch.inference_mode()
    def generate(self, prompts: Prompt | Sequence[Prompt],
                 params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[RequestOutput]:
        """Generate for each prompt (a string or a list of token ids); one output per prompt, in order."""
        if isinstance(prompts, str) or (isinstance(prompts, Sequence) and prompts
                                        and all(isinstance(t, int) for t in prompts)):
            prompts = [prompts]  # a single prompt
        params = params if params is not None else SamplingParams()
        param_list = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(param_list) != len(prompts):
            raise EngineError(f"generate: expected one SamplingParams per prompt ({len(prompts)}), "
                              f"found {len(param_list)}")
        return [self._run(prompt, p) for prompt, p in zip(prompts, param_list)]

    # -- one request ------------------------------------------------------------------------
    def _run(self, prompt: Prompt, params: SamplingParams) -> RequestOutput:
        text_prompt = prompt if isinstance(prompt, str) else None
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        out = RequestOutput(request_id=self._next_id, prompt=text_prompt, prompt_token_ids=ids)
        self._next_id += 1
        self._validate(out, params)
        stops = stop_ids(params, self.tokenizer.eos_token_ids)
        generator = make_generator(params, self.device)
        start = time.perf_counter()
        logits = self._prefill(ids)  # [V]
        out.prefill_time_s = time.perf_counter() - start
        start = time.perf_counter()
        position = len(ids)
        while True:
            token = sample(logits, params, generator)
            out.token_ids.append(token)
            if token in stops:
                out.finish_reason = "stop"
                break
            if params.stop and self._hit_stop_string(out, params):
                out.finish_reason = "stop"
                break
            if len(out.token_ids) >= params.max_tokens:
                out.finish_reason = "length"
                break
            logits = self._forward([token], position)  # [V]
            position += 1
        out.decode_time_s = time.perf_counter() - start
        if not out.text:
            out.text = self.tokenizer.decode([t for t in out.token_ids if t not in stops])
        return out

    def _prefill(self, ids: list[int]) -> torch.Tensor:
        chunk = self.chunk_size or len(ids)
        for start in range(0, len(ids), chunk):
            logits = self._forward(ids[start:start + chunk], start)
        return logits

    def _forward(self, new_ids: list[int], prefix_len: int) -> torch.Tensor:
        """Run `new_ids` after `prefix_len` tokens already in the pools; logits of the last one, [V]."""
        slots = self._slots[:prefix_len + len(new_ids)]  # [prefix + new]
        batch = ForwardBatch.build([RequestSlice(new_ids, prefix_len, slots, 0)], device=self.device)
        return self.model(batch, self.kv_pool, self.state_pool, self.attention)[0]  # [V]

    def _hit_stop_string(self, out: RequestOutput, params: SamplingParams) -> bool:
        text = self.tokenizer.decode(out.token_ids)
        for s in params.stop:
            at = text.find(s)
            if at >= 0:
                out.text = text[:at]
                return True
        return False

    def _validate(self, out: RequestOutput, params: SamplingParams) -> None:
        ids, vocab = out.prompt_token_ids, self.config.vocab_size
        if not ids:
            raise EngineError(f"request {out.request_id}: expected a non-empty prompt, found no tokens")
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise EngineError(f"request {out.request_id}: token ids must be in [0, {vocab}), found {bad}")
        if len(ids) + params.max_tokens > self.max_model_len:
            raise EngineError(f"request {out.request_id}: prompt ({len(ids)}) + max_tokens ({params.max_tokens}) "
                              f"exceeds max_model_len ({self.max_model_len})")
