"""Time a fixed probe on a llama-server before and after its other slots hold long conversations.

    python scripts/peer_kv_probe.py probe --url http://127.0.0.1:8191 [--repeat 3] [--label fresh]
        [--control-url http://127.0.0.1:8291]
    python scripts/peer_kv_probe.py fill  --url http://127.0.0.1:8191 --sessions 7 --tokens 4000 [--turns 2]
        [--parallel 7]
    python scripts/peer_kv_probe.py churn --url http://127.0.0.1:8191 --parallel 4 --cycles 12 [--phase 30]

Issue 25, mechanism 1 (KV cells held by idle slots): a request of fixed size decodes slower on a
server whose other slots keep long conversations, on builds where the attention window spans
every slot's cells. `probe` sends the same prompt (`--probe-tokens` tokens, temperature 0,
`--max-tokens` generated with `ignore_eos`) `--repeat` times to llama-server's own /completion
endpoint, one at a time, and prints one JSON line per call: the engine's own decode rate
(`timings.predicted_per_second`), the client's wall time, the slot that served it, then the
median and spread. With `--control-url` each probe is followed by the same probe on a second,
fresh server of the same build, and the summary adds the median and spread of the per-pair
ratio (soaked / control): on a shared host whatever slows one slows both. `fill` sends `--sessions` conversations, each a different text of about
`--tokens` tokens (so that each lands in its own slot: prompt similarity below the server's
0.5 threshold, and the least recently used slot otherwise), optionally grown over `--turns`
appends, one at a time. `churn` (issue 25, mechanism 2: KV fragmentation) alternates
`--cycles` phases of traffic and probes: for `--phase` seconds `--parallel` workers each run
agent-like sessions (a new text of `--tokens` tokens, then `--turns` appends of about
`--append` tokens, `--fill-max-tokens` generated each turn, then a new session: the slot's old
cells are freed between other slots' cells); then, once the calls in flight end, the probe
`--repeat` times with /metrics and the count of "failed to find free space" lines in `--log`. Texts are built from a seeded word list, tokenised by the server
(/tokenize) and cut to the token count: nothing is downloaded. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import urllib.request
from urllib.parse import urlparse

WORDS = (
    "cache slot token decode prefill engine request stream batch window attention layer "
    "head value key matrix kernel thread server client probe trace session agent tool "
    "result append prefix branch memory buffer cell block page graph node edge queue "
    "latency throughput restart model vocab merge split byte range offset index count"
).split()


def post(url: str, path: str, body: dict, timeout: float = 3600) -> dict:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def get(url: str, path: str) -> str:
    with urllib.request.urlopen(url + path, timeout=30) as resp:
        return resp.read().decode()


def text_of(url: str, seed: int, n_tokens: int) -> str:
    """A text of about n_tokens tokens (by the server's own tokenizer), from a seeded word list."""
    rng = random.Random(seed)
    words: list[str] = []
    while True:
        words += [rng.choice(WORDS) + ("." if rng.random() < 0.08 else "") for _ in range(n_tokens)]
        tokens = post(url, "/tokenize", {"content": " ".join(words)})["tokens"]
        if len(tokens) >= n_tokens:
            break
    detok = post(url, "/detokenize", {"tokens": tokens[:n_tokens]})["content"]
    return detok


def metrics(url: str) -> dict[str, float]:
    out = {}
    try:
        for line in get(url, "/metrics").splitlines():
            if line.startswith("llamacpp:"):
                name, value = line.split()[:2]
                out[name.split(":", 1)[1]] = float(value)
    except OSError:
        pass
    return out


def complete(url: str, prompt: str, max_tokens: int) -> dict:
    t0 = time.monotonic()
    res = post(
        url,
        "/completion",
        {
            "prompt": prompt,
            "n_predict": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "cache_prompt": True,
            "stream": False,
        },
    )
    wall = time.monotonic() - t0
    t = res.get("timings", {})
    return {
        "slot": res.get("id_slot", res.get("slot_id")),
        "prompt_n": t.get("prompt_n"),
        "cached": res.get("tokens_cached"),
        "predicted_n": t.get("predicted_n"),
        "decode_tok_s": round(t.get("predicted_per_second", 0.0), 2),
        "prompt_ms": round(t.get("prompt_ms", 0.0), 1),
        "wall_s": round(wall, 3),
    }


def cmd_probe(args) -> None:
    prompt = text_of(args.url, 10_000, args.probe_tokens)
    rates, control_rates, ratios = [], [], []
    for i in range(args.repeat):
        row = complete(args.url, prompt, args.max_tokens)
        rates.append(row["decode_tok_s"])
        print(json.dumps({"label": args.label, "i": i, **row}), flush=True)
        time.sleep(args.pause)
        if args.control_url:  # the same probe on a fresh server of the same build, right after
            crow = complete(args.control_url, prompt, args.max_tokens)
            control_rates.append(crow["decode_tok_s"])
            ratios.append(round(row["decode_tok_s"] / crow["decode_tok_s"], 3))
            print(json.dumps({"label": args.label + "-control", "i": i, **crow}), flush=True)
            time.sleep(args.pause)
    m = metrics(args.url)
    summary = {
        "label": args.label,
        "median_tok_s": statistics.median(rates),
        "min": min(rates),
        "max": max(rates),
        "n": len(rates),
    }
    if ratios:
        summary.update(
            control_median_tok_s=statistics.median(control_rates),
            control_min=min(control_rates),
            control_max=max(control_rates),
            ratio_median=statistics.median(ratios),
            ratio_min=min(ratios),
            ratio_max=max(ratios),
        )
    summary["metrics"] = {k: m[k] for k in sorted(m) if not k.endswith("_seconds")}
    print(json.dumps(summary), flush=True)


def fill_session(args, s: int) -> list[str]:
    base = text_of(args.url, 1 + s, args.tokens)
    per_turn = max(1, len(base) // args.turns)
    lines = []
    for turn in range(1, args.turns + 1):
        prompt = base[: per_turn * turn] if turn < args.turns else base
        t0 = time.monotonic()
        row = complete(args.url, prompt, args.fill_max_tokens)
        line = json.dumps(
            {"label": "fill", "session": s, "turn": turn, **row, "wall_s": round(time.monotonic() - t0, 2)}
        )
        print(line, flush=True)
        lines.append(line)
    return lines


def cmd_fill(args) -> None:
    if args.parallel > 1:  # all at once: each takes a slot of its own whatever the slot choice
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda s: fill_session(args, s), range(args.sessions)))
    else:
        for s in range(args.sessions):
            fill_session(args, s)
    m = metrics(args.url)
    print(json.dumps({"label": "fill-done", "metrics": m}), flush=True)


def churn_worker(args, w: int, cycle: int, stop_at: list[float], rows: list[dict]) -> None:
    rng = random.Random(f"{args.seed}-{w}-{cycle}")  # every phase its own sessions
    session = 1000 * cycle
    while time.monotonic() < stop_at[0]:
        session += 1
        text = text_of(args.url, 100_000 * (w + 1) + session, args.tokens + rng.randrange(args.tokens // 2))
        for turn in range(args.turns + 1):
            if time.monotonic() >= stop_at[0]:
                return
            try:
                row = complete(args.url, text, args.fill_max_tokens)
            except OSError as err:  # a refused or failed call is a finding, not a crash
                rows.append({"worker": w, "session": session, "turn": turn, "error": str(err)[:200]})
                break
            rows.append({"worker": w, "session": session, "turn": turn, **row})
            text += " " + text_of(args.url, rng.randrange(10**9), args.append + rng.randrange(args.append))


def free_space_lines(path: str | None) -> int:
    if not path:
        return 0
    try:
        with open(path, errors="replace") as fh:
            return sum("failed to find free space" in line for line in fh)
    except OSError:
        return 0


def cmd_churn(args) -> None:
    from concurrent.futures import ThreadPoolExecutor

    prompt = text_of(args.url, 10_000, args.probe_tokens)
    t0 = time.monotonic()
    for cycle in range(args.cycles):
        rows: list[dict] = []
        if cycle > 0:  # cycle 0: the fresh engine
            stop_at = [time.monotonic() + args.phase]
            with ThreadPoolExecutor(args.parallel) as pool:
                list(pool.map(lambda w: churn_worker(args, w, cycle, stop_at, rows), range(args.parallel)))
        rates = [complete(args.url, prompt, args.max_tokens) for _ in range(args.repeat)]
        m = metrics(args.url)
        ok = [r for r in rows if "error" not in r]
        print(
            json.dumps(
                {
                    "cycle": cycle,
                    "t_s": round(time.monotonic() - t0, 1),
                    "probe_tok_s": statistics.median(r["decode_tok_s"] for r in rates),
                    "probe_prompt_ms": statistics.median(r["prompt_ms"] for r in rates),
                    "calls": len(ok),
                    "errors": len(rows) - len(ok),
                    "call_prompt_tok_s": round(
                        sum(r["prompt_n"] or 0 for r in ok) / max(1e-9, sum(r["prompt_ms"] for r in ok) / 1000), 1
                    ),
                    "kv_cache_tokens": m.get("kv_cache_tokens"),
                    "kv_usage": m.get("kv_cache_usage_ratio"),
                    "free_space_lines": free_space_lines(args.log),
                }
            ),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("probe", "fill", "churn"))
    parser.add_argument("--url", default="http://127.0.0.1:8191")
    parser.add_argument("--label", default="probe")
    parser.add_argument(
        "--control-url",
        default=None,
        help="a fresh server of the same build, probed right after each probe (host drift cancels)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pause", type=float, default=1.0)
    parser.add_argument("--probe-tokens", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--sessions", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--fill-max-tokens", type=int, default=16)
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="fill sessions sent at once (0.3.1 never updates a slot's last-use time, so "
        "its least-recently-used choice is always slot 0 for requests one at a time)",
    )
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--phase", type=float, default=30.0, help="seconds of traffic between probes (churn)")
    parser.add_argument("--append", type=int, default=200, help="tokens appended a turn, about (churn)")
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument(
        "--log", default=None, help="the server's log, for its 'failed to find free space' lines (churn)"
    )
    args = parser.parse_args()
    for url in (args.url, args.control_url):
        host = urlparse(url).hostname if url else "127.0.0.1"
        if host not in ("127.0.0.1", "localhost", "::1"):
            sys.exit(f"loopback only, not {host}")
    {"probe": cmd_probe, "fill": cmd_fill, "churn": cmd_churn}[args.command](args)


if __name__ == "__main__":
    main()
