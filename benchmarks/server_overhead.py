"""What serving through HTTP costs: the same requests streamed by `openai` clients through the
server vs run on the engine directly, same config, same run. The clients run in their own
processes, as real ones do, so they do not compete with the server for its GIL.

    .venv/bin/python benchmarks/server_overhead.py [--clients 4] [--tokens 128] [--model DIR]

Prints aggregate decode tok/s both ways and their ratio, the mean engine step both ways, and
last the headline figure: the share of the served run's wall time the engine thread spent
inside `step()` (the rest is what HTTP, JSON and the GIL took from it). On a shared host the
throughputs swing with the load; the busy share is steadier.
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ProcessPoolExecutor


def stream_one(base: str, prompt: str, max_tokens: int) -> int:
    """One streaming request in a client process; the completion tokens it got."""
    import openai

    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
    stream = client.completions.create(
        model="m",
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    return [c for c in stream][-1].usage.completion_tokens


def main() -> None:
    import httpx
    import torch
    import uvicorn

    from engine.runtime.config import EngineConfig
    from engine.runtime.engine import Engine
    from engine.sampling import SamplingParams
    from engine.server.config import ServerConfig
    from engine.server.main import bind, make_app

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4, help="concurrent streaming clients")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per request")
    parser.add_argument("--model", default=None, help="checkpoint directory (default: built-in)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steady on a busy host)")
    parser.add_argument("--repeat", type=int, default=3, help="runs each way; the best counts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = EngineConfig(model=args.model, kv_tokens=8192, max_running_requests=args.clients)
    prompts = [f"request {i}: " + "context " * 20 for i in range(args.clients)]
    n = len(prompts)

    engine = Engine(config)
    params = SamplingParams(max_tokens=args.tokens, temperature=0, ignore_eos=True)

    direct_step_s: list[float] = []

    def direct_run(engine: Engine) -> float:
        start = time.perf_counter()
        for p in prompts:
            engine.add_request(p, params)
        while engine.has_work():
            stats = engine.step()
            if stats is not None:
                direct_step_s.append(stats.duration_s)
        return n * args.tokens / (time.perf_counter() - start)

    direct_run(engine)  # the first batched run pays one-time costs (and fills the prefix cache)
    direct_tps = max(direct_run(engine) for _ in range(args.repeat))
    del engine

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(make_app(config, ServerConfig(port=0)), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with ProcessPoolExecutor(n) as pool:
        list(pool.map(stream_one, [base] * n, prompts, [args.tokens] * n))  # the same one-time costs
        served_tps, busy = 0.0, 0.0
        for _ in range(args.repeat):
            after = httpx.get(base + "/engine/steps", params={"limit": 1}).json()["last_step"]
            start = time.perf_counter()
            num_tokens = sum(pool.map(stream_one, [base] * n, prompts, [args.tokens] * n))
            wall = time.perf_counter() - start
            steps = httpx.get(base + "/engine/steps", params={"after": after}).json()["steps"]
            served_step_s = [s["duration_s"] for s in steps]
            if num_tokens / wall > served_tps:
                served_tps, busy = num_tokens / wall, sum(served_step_s) / wall
                mean_served = sum(served_step_s) / len(served_step_s)
    server.should_exit = True

    print(f"direct engine: {direct_tps:.1f} tok/s ({n} requests x {args.tokens} tokens, best of {args.repeat})")
    print(f"served, {n} streaming openai clients in their own processes: {served_tps:.1f} tok/s")
    print(f"served / direct throughput: {served_tps / direct_tps:.2f} (both swing with the host's load)")
    print(
        f"mean engine step: direct {1e3 * sum(direct_step_s) / len(direct_step_s):.2f} ms, "
        f"served {1e3 * mean_served:.2f} ms"
    )
    print(f"engine busy stepping, share of the served wall time: {100 * busy:.0f}%")


if __name__ == "__main__":
    main()
