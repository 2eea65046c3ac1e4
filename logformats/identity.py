"""What an engine says about itself when it starts: the facts that make two lives the same engine.

A log with several engine starts may hold several engines: a new build, another backend, other
threads, another model or context size. A restart is a control only between lives of the same
engine, so each reader emits the facts a start-up line states as `engine_config` events
(`detail`: `key=value`), and diagnostics compares the lives (diagnostics.source.identity).

`facts(message)` reads one message, its prefix already removed. The shapes, as the engines print
them (docs/diagnostics.md, "Engine identity"):

    build: 4585 (cae9fb43) with cc (GCC) 12.2.0 for x86_64-linux-gnu      llama.cpp (older: build = 1)
    build_info: b8680-15f786e65                                           llama.cpp since 2026
    common_params_print_info: build 1 (6f3a9f3de) with GNU 11.2.1 ...     llama-server inside Ollama
    system_info: n_threads = 4 (n_threads_batch = 4) / 10 | ...
    llama_model_loader: loaded meta data with 56 key-value pairs and 720 tensors from /m/x.gguf (...)
    llama_model_load_from_file_impl: using device CUDA0 (NVIDIA L40S) (0000:61:00.0) - 45455 MiB free
    ggml_vulkan: Found 1 Vulkan devices:  /  ggml_cuda_init: found 1 CUDA devices:
    load_tensors: offloaded 43/43 layers to GPU                           (older: llm_load_tensors:)
    llama_context: n_ctx         = 65536      llama_context: flash_attn    = auto
    srv    load_model: initializing slots, n_slots = 4
    msg="Listening on 127.0.0.1:11434 (version 0.19.0)"                   Ollama
    msg="inference compute" ... library=CUDA ... description="NVIDIA RTX 3090"
    vLLM API server version 0.6.3  /  Initializing a V1 LLM engine (v0.8.5) with config: model='m', ...
    Initializing a V0 LLM engine (v0.7.3) ...  /  Initializing an LLM engine with config: ...   (0.2-0.3)
     ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.27.1                         vLLM 0.16 on: the logo's lines
      █▄█▀ █     █     █     █  model   Qwen/Qwen3-8B
    vLLM server version 0.32.0, serving model Qwen/Qwen3-8B               the same, logo off
    server_args=ServerArgs(model_path='m', tp_size=1, ...)                SGLang
    Resolved config: moe_backend='offload', attention_backend='triton', ...   FreeToken
"""

from __future__ import annotations

import re
from collections.abc import Callable

Fact = tuple[str, str]


def _model_name(path: str) -> str:
    """A model's short name: the file or folder name, or an Ollama blob's first 12 hex digits."""
    name = path.strip().strip("'\"").rstrip("/").rsplit("/", 1)[-1]
    if name.startswith("sha256-"):
        return name[:19]
    return name


def _kv_list(text: str, keys: dict[str, str]) -> list[Fact]:
    """`key=value` or `key='value'` pairs of a config dump, those named in `keys` (printed name -> fact)."""
    out = []
    for m in re.finditer(r"(\w+)=('[^']*'|\"[^\"]*\"|[^,)\s]+)", text):
        name = keys.get(m.group(1))
        if name is not None:
            value = m.group(2).strip("'\"")
            out.append((name, _model_name(value) if name == "model" else value))
    return out


VLLM_KEYS = {
    "model": "model",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "dtype": "dtype",
    "max_seq_len": "max_seq_len",
    "quantization": "quantization",
    "enable_prefix_caching": "prefix_caching",
    "kv_cache_dtype": "kv_cache_dtype",
    "enforce_eager": "enforce_eager",
}
SGLANG_KEYS = {
    "model_path": "model",
    "tp_size": "tp",
    "dp_size": "dp",
    "dtype": "dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "context_length": "context_length",
    "attention_backend": "attention_backend",
    "mem_fraction_static": "mem_fraction",
    "chunked_prefill_size": "chunked_prefill_size",
    "disable_radix_cache": "radix_cache_off",
}
FREETOKEN_KEYS = {
    "moe_backend": "moe_backend",
    "moe_strategy": "moe_backend",
    "attention_backend": "attention_backend",
    "cache_type": "cache_type",
    "page_size": "page_size",
    "model": "model",
    "model_path": "model",
}
OLLAMA_CMD = {
    "--model": "model",
    "--ctx-size": "n_ctx",
    "--n-gpu-layers": "gpu_layers",
    "--threads": "threads",
    "--parallel": "slots",
    "--batch-size": "batch_size",
    "--flash-attn": "flash_attn",
}

Rule = tuple["re.Pattern[str]", Callable[["re.Match[str]"], list[Fact]]]
RULES: tuple[Rule, ...] = (
    (
        re.compile(r"build(?:_info)?\s*[:=]\s*b?(\d+)(?:\s*\((\w+)\)|-(\w+))?"),
        lambda m: [("build", m.group(1) + (f" ({m.group(2) or m.group(3)})" if m.group(2) or m.group(3) else ""))],
    ),
    (
        re.compile(r"common_params_print_info: build (\d+) \((\w+)\)"),
        lambda m: [("build", f"{m.group(1)} ({m.group(2)})")],
    ),
    (re.compile(r"system_info: n_threads = (\d+)"), lambda m: [("threads", m.group(1))]),
    (re.compile(r"llama_model_loader: loaded meta data .* from (\S+)"), lambda m: [("model", _model_name(m.group(1)))]),
    (re.compile(r"\w+: using device (\w+) \(([^)]*)\)"), lambda m: [("device", f"{m.group(1)} ({m.group(2)})")]),
    (
        re.compile(r"ggml_(vulkan|cuda_init|metal_init|sycl_init|hip_init)\w*: [Ff]ound (\d+) "),
        lambda m: [
            (
                "backend",
                {"cuda_init": "CUDA", "metal_init": "Metal", "sycl_init": "SYCL", "hip_init": "HIP"}.get(
                    m.group(1), m.group(1).capitalize()
                ),
            )
        ],
    ),
    (
        re.compile(r"(?:llm_)?load_tensors: offloaded (\d+)/(\d+) layers to GPU"),
        lambda m: [("gpu_layers", f"{m.group(1)}/{m.group(2)}")],
    ),
    (
        re.compile(r"(?:llama_context|llama_new_context_with_model): +n_ctx += +(\d+)"),
        lambda m: [("n_ctx", m.group(1))],
    ),
    (
        re.compile(r"(?:llama_context|llama_new_context_with_model): +flash_attn += +(\S+)"),
        lambda m: [("flash_attn", m.group(1))],
    ),
    (re.compile(r"initializing slots, n_slots = (\d+)"), lambda m: [("slots", m.group(1))]),
    (re.compile(r"Listening on \S+ \(version ([\w.+-]+)\)"), lambda m: [("version", m.group(1))]),
    (
        re.compile(r"inference compute.*?library=(\w+).*?description=\"([^\"]*)\""),
        lambda m: [("device", f"{m.group(1)} ({m.group(2)})")],
    ),
    (
        re.compile(r"vLLM (?:API |gRPC )?server version ([\w.+-]+)(?:, serving model (\S+))?"),
        lambda m: [("version", m.group(1)), *([("model", _model_name(m.group(2)))] if m.group(2) else [])],
    ),
    (
        re.compile(r"Initializing an? (?:V[01] )?LLM engine (?:\(v?([\w.+-]+)\) )?with config: (.*)"),
        lambda m: [*([("version", m.group(1))] if m.group(1) else []), *_kv_list(m.group(2), VLLM_KEYS)],
    ),
    (re.compile(r"^\s*[▄█▀ ]+ version ([\w.+-]+)\s*$"), lambda m: [("version", m.group(1))]),
    (re.compile(r"^\s*[▄█▀ ]+ model +(\S+)\s*$"), lambda m: [("model", _model_name(m.group(1)))]),
    (re.compile(r"server_args=ServerArgs\((.*)"), lambda m: _kv_list(m.group(1), SGLANG_KEYS)),
    (re.compile(r"Resolved config: (.*)"), lambda m: _kv_list(m.group(1), FREETOKEN_KEYS)),
)
# What a message must start with for any rule to apply: a cheap first test, and no fact read
# from a line that only mentions a build or a device in passing.
STARTS = (
    "build",
    "main: build",
    "common_params_print_info",
    "system_info",
    "llama_model_loader: loaded",
    "ggml_",
    "load_tensors",
    "llm_load_tensors",
    "llama_context",
    "llama_new_context_with_model",
    "llama_model_load_from_file",
    "llama_prepare_model_devices",
    "load_model: initializing slots",
    "Listening on",
    "inference compute",
    "vLLM API server",
    "vLLM server version",
    "vLLM gRPC server",
    "Initializing a",
    "server_args=",
    "Resolved config",
)


# vLLM's logo (0.16 on), drawn over several lines; two of them say the version and the model.
VLLM_LOGO = ("▄▄ ▄█ █", "█▄█▀ █")


def facts(message: str) -> list[Fact]:
    """The identity facts one start-up message states (empty for any other message)."""
    if not (message.startswith(STARTS) or message.lstrip().startswith(VLLM_LOGO)):
        return []
    for pattern, read in RULES:
        m = pattern.search(message)
        if m is not None and (found := read(m)):
            return found
    return []


def ollama_runner_facts(command: str) -> list[Fact]:
    """The options that matter on the command line Ollama starts its runner (llama-server) with."""
    out = []
    for m in re.finditer(r"(--[\w-]+)(?:[ =](\S+))?", command):
        name = OLLAMA_CMD.get(m.group(1))
        if name is not None and m.group(2) and not m.group(2).startswith("--"):
            out.append((name, _model_name(m.group(2)) if name == "model" else m.group(2)))
    return out
