"""The built-in engine beside two real ones: `soak serve`, `transformers serve` and llama.cpp's
`llama-server`, each soaked with the same trace at the same concurrencies for the same minutes.

    python benchmarks/serve_peers.py --minutes 3                       # 3 engines x concurrency 1 and 4
    python benchmarks/serve_peers.py --minutes 1 --engines llama --concurrency 4

Needs `scripts/peer-engines.sh build` and `model` first (llama-server and the peer checkpoint;
docs/soak.md, "Against a real engine"). Every engine gets one compute thread (`soak serve`'s
default on two cores, `llama-server -t 1`, `OMP_NUM_THREADS=1` for transformers), and each soak
is the same command: `soak run --trace examples/opencode.jsonl --minutes M --concurrency C
--probe-every 0 --no-restart-at-end --no-profiles`, the built-in engine without its twin. Runs
go one at a time; the load average is printed with each.

Per run, from its run directory: requests served (replayed calls, turns and compactions, answered `ok`), output tokens
per second over the replay, TTFT p50 / p95, the median per-request decode rate the client saw
((output - 1) / (last token - first token)), the start and end probes' decode rate, and what the
engine's own figures say: the built-in engine's median decode step (its steps table), llama.cpp's
`tokens_predicted_total / tokens_predicted_seconds_total` and `n_busy_slots_per_decode` (its
/metrics, saved in metrics.prom); transformers serve has no /metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rundir.reader import read_table  # noqa: E402

SCRIPT = ROOT / "scripts" / "peer-engines.sh"
PORTS = {"transformers": 8192, "llama": 8191}
ENGINES = ("builtin", "transformers", "llama")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--trace", default=str(ROOT / "examples" / "opencode.jsonl"))
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "tokdrift" / "peers" / "bench")
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        ap.error(f"--engines: expected some of {', '.join(ENGINES)}, found {', '.join(sorted(unknown))}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    for concurrency in [int(c) for c in args.concurrency.split(",")]:
        for engine in engines:
            run_dir = args.out / f"{stamp}-{engine}-c{concurrency}"
            load_before = os.getloadavg()[0]
            run(engine, concurrency, args.minutes, args.trace, run_dir)
            row = {
                "engine": engine,
                "concurrency": concurrency,
                "load_before": load_before,
                "load_after": os.getloadavg()[0],
                **figures(engine, run_dir, args.minutes),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    (args.out / f"{stamp}.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows, args.minutes))


def run(engine: str, concurrency: int, minutes: float, trace: str, run_dir: Path) -> None:
    soak = [
        sys.executable,
        "-m",
        "tokdrift.cli.soak",
        "run",
        "--trace",
        trace,
        "--minutes",
        str(minutes),
        "--concurrency",
        str(concurrency),
        "--probe-every",
        "0",
        "--no-restart-at-end",
        "--no-profiles",
        "--no-live",
        "-o",
        str(run_dir),
    ]
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    if engine == "builtin":
        subprocess.run([*soak, "--no-twin"], check=True, cwd=ROOT, env=env)
        return
    port = PORTS[engine]
    start_env = {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([str(SCRIPT), "restart", engine, str(port)], check=True, env=start_env)
    try:
        subprocess.run([str(SCRIPT), "wait", engine, str(port)], check=True, env=start_env)
        subprocess.run([*soak, "--target", f"http://127.0.0.1:{port}"], check=True, cwd=ROOT, env=env)
    finally:
        subprocess.run([str(SCRIPT), "stop", engine, str(port)], env=start_env)


def figures(engine: str, run_dir: Path, minutes: float) -> dict[str, Any]:
    requests = read_table(run_dir, "requests")
    calls = requests[requests["kind"] != "probe"]  # replayed turns and compactions
    turns = calls[calls["status"] == "ok"]
    seconds = lambda a, b: (turns[a] - turns[b]).dt.total_seconds()  # noqa: E731
    ttft = seconds("t_first_token", "t_send")
    decode_s = seconds("t_last_token", "t_first_token")
    per_request = ((turns["output_tokens"] - 1) / decode_s)[(turns["output_tokens"] >= 8) & (decode_s > 0)]
    probes = read_table(run_dir, "probes")
    probes = probes[(probes["status"] == "ok") & (probes["role"] == "main")]
    out = {
        "served": int(len(turns)),
        "failed": int(len(calls) - len(turns)),
        "output_tps": float(turns["output_tokens"].sum() / (minutes * 60.0)),
        "ttft_p50_s": _q(ttft, 0.5),
        "ttft_p95_s": _q(ttft, 0.95),
        "decode_tps_p50": _q(per_request, 0.5),
        "probe_decode_tps": [round(float(v), 1) for v in probes["decode_tps"]],
    }
    out.update(engine_figures(engine, run_dir))
    return out


def engine_figures(engine: str, run_dir: Path) -> dict[str, Any]:
    if engine == "builtin":
        steps = read_table(run_dir, "steps")
        decode = steps[steps["num_decode_tokens"].fillna(0) > 0]
        step_s = decode[["schedule_s", "forward_s", "sample_s"]].sum(axis=1)
        return (
            {
                "engine_says": f"median decode step {1e3 * float(np.median(step_s)):.1f} ms "
                f"({1.0 / float(np.median(step_s)):.0f} tok/s per request), "
                f"mean batch {decode['num_running_reqs'].mean():.2f}"
            }
            if len(decode)
            else {}
        )
    if engine == "llama":
        scrapes = _scrapes(run_dir)
        if len(scrapes) < 2:
            return {"engine_says": "no /metrics scrapes"}
        lives, tokens, secs = [[scrapes[0]]], 0.0, 0.0
        for prev, cur in zip(scrapes, scrapes[1:]):
            if cur["tokens_predicted_total"] < prev["tokens_predicted_total"]:  # a new process starts over
                lives.append([cur])
                continue
            lives[-1].append(cur)
            tokens += cur["tokens_predicted_total"] - prev["tokens_predicted_total"]
            secs += cur["tokens_predicted_seconds_total"] - prev["tokens_predicted_seconds_total"]
        busy = max(lives, key=len)[-1]["n_busy_slots_per_decode"]  # an average over the life
        return {
            "engine_says": f"{tokens / secs:.1f} tok/s per request (tokens_predicted / its seconds), "
            f"{busy:.2f} busy slots per decode"
        }
    return {"engine_says": "no /metrics (transformers serve)"}


def _scrapes(run_dir: Path) -> list[dict[str, float]]:
    """llama.cpp's samples of every scrape in metrics.prom, in order."""
    path = run_dir / "metrics.prom"
    if not path.is_file():
        return []
    out = []
    for block in path.read_text().split("# scrape_time:")[1:]:
        values = {}
        for line in block.splitlines()[1:]:
            m = re.fullmatch(r"llamacpp:(\w+) (\S+)", line.strip())
            if m:
                values[m.group(1)] = float(m.group(2))
        if "tokens_predicted_total" in values:
            out.append(values)
    return out


def _q(values, q: float) -> float | None:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    return float(np.quantile(values, q)) if len(values) else None


def table(rows: list[dict[str, Any]], minutes: float) -> str:
    def f(v: float | None, spec: str) -> str:
        return "—" if v is None else format(v, spec)

    lines = [
        f"{minutes:g} minutes per run, examples/opencode.jsonl",
        "| engine | concurrency | requests served | output tok/s | TTFT p50 / p95 | decode tok/s per request "
        "(client, p50) | probes tok/s | the engine's own figures | load avg before / after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['engine']} | {r['concurrency']} | {r['served']} | {f(r['output_tps'], '.1f')} | "
            f"{f(r['ttft_p50_s'], '.2f')} / {f(r['ttft_p95_s'], '.2f')} s | {f(r['decode_tps_p50'], '.1f')} | "
            f"{', '.join(str(v) for v in r['probe_decode_tps'])} | {r.get('engine_says', '')} | "
            f"{r['load_before']:.2f} / {r['load_after']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
