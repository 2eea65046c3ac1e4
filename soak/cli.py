"""`soak`: the command line of the soak driver and the built-in engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from replay.cli import trace_app
from tokdrift import configure_logging, run_app

app = typer.Typer(
    help="Replay agent sessions against an inference engine for hours and record everything.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(trace_app, name="trace", help="Make and inspect replay traces: import, synth, record, stats.")

from soak.run_cli import register as _register_soak_commands  # noqa: E402  run, resume, status

_register_soak_commands(app)


@app.callback()
def _callback(
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output (-vv for debug).")] = 0,
) -> None:
    configure_logging(verbose)


@app.command()
def checkpoint(
    out: Annotated[Path, typer.Argument(help="Directory to write config.json, model.safetensors and tokenizer files into.")],
    seed: Annotated[int, typer.Option(help="Seed of the random weights; the same seed writes the same bytes.")] = 0,
    moe_intermediate_size: Annotated[Optional[int], typer.Option(
        help="Width of each routed expert instead of the default's 128 (768 for the expert-thrash validation: "
             "an expert copy then costs enough beside a decode step to show).")] = None,
) -> None:
    """Write the built-in default checkpoint (small, deterministic, random weights)."""
    from engine.model.checkpoint import write_default_checkpoint

    overrides = {"moe_intermediate_size": moe_intermediate_size} if moe_intermediate_size is not None else None
    path = write_default_checkpoint(out, seed=seed, overrides=overrides)
    typer.echo(f"wrote {path}")


@app.command()
def generate(
    prompt: Annotated[list[str], typer.Argument(help="Prompt text; give several to generate for each.")],
    model: Annotated[Optional[Path], typer.Option(help="Checkpoint directory (HF layout); the built-in default when omitted.")] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens to generate per prompt.")] = 32,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 is greedy.")] = 0.0,
    seed: Annotated[Optional[int], typer.Option(help="Sampling seed.")] = None,
) -> None:
    """Generate text with the built-in engine and print speed figures."""
    import time

    from engine import LLM, SamplingParams

    llm = LLM(str(model) if model else None)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    start = time.perf_counter()
    outs = llm.generate(prompt, params)
    elapsed = time.perf_counter() - start
    num_tokens = sum(len(o.token_ids) for o in outs)
    for text, out in zip(prompt, outs):
        typer.echo(f"> {text}\n{out.text!r}")
    typer.echo(f"{num_tokens} tokens in {elapsed:.2f} s ({num_tokens / elapsed:.1f} tok/s)")


@app.command()
def serve(
    model: Annotated[Optional[Path], typer.Option(help="Checkpoint directory (HF layout); the built-in default when omitted.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on; loopback unless you mean to expose the engine.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 1919,
    api_key: Annotated[Optional[str], typer.Option(envvar="TOKDRIFT_API_KEY", help="Require 'Authorization: Bearer KEY' on every route but /health.")] = None,
    served_model_name: Annotated[Optional[str], typer.Option(help="Model id in /v1/models and responses; the checkpoint directory name when omitted.")] = None,
    log_file: Annotated[Optional[Path], typer.Option(help="Also append the engine log (FreeToken format) to this file.")] = None,
    max_running_requests: Annotated[Optional[int], typer.Option(help="Requests decoded together at most (engine default 4).")] = None,
    chunked_prefill_size: Annotated[Optional[int], typer.Option(help="Prompt tokens computed per step at most (default 8192).")] = None,
    page_size: Annotated[Optional[int], typer.Option(help="Tokens per KV page (default 1: token-granular prefix matching).")] = None,
    kv_tokens: Annotated[Optional[int], typer.Option(help="KV pool size in tokens; sized by --memory-ratio when omitted.")] = None,
    memory_ratio: Annotated[Optional[float], typer.Option(help="Share of free memory the KV pool may take when --kv-tokens is omitted (default 0.05).")] = None,
    mamba_slots: Annotated[Optional[int], typer.Option(help="Linear-attention state slots: running requests plus cached snapshots (default 32).")] = None,
    cache_type: Annotated[Optional[str], typer.Option(help="Prefix cache: hybrid_radix (default), radix or none.")] = None,
    moe_backend: Annotated[Optional[str], typer.Option(help="Where experts live: resident (default) or offload (host tier behind --moe-cache-size device slots).")] = None,
    moe_cache_size: Annotated[Optional[int], typer.Option(help="Device expert slots with --moe-backend offload.")] = None,
    attention_backend: Annotated[Optional[str], typer.Option(help="auto (default: triton on CUDA, torch elsewhere), torch or triton.")] = None,
    dtype: Annotated[Optional[str], typer.Option(help="Weight and KV dtype (default float32).")] = None,
    device: Annotated[Optional[str], typer.Option(help="auto (default), cpu or cuda.")] = None,
    decode_log_interval: Annotated[Optional[int], typer.Option(help="Decode forwards between 'Decode batch' log lines (default 40).")] = None,
    enable_mixed_chunk: Annotated[bool, typer.Option(help="Let decodes ride along prefill steps.")] = False,
    step_history: Annotated[int, typer.Option(help="Engine steps kept for GET /v1/engine/steps.")] = 65536,
    fault: Annotated[Optional[list[str]], typer.Option("--fault", help="Switch on a degradation mechanism (repeatable): eviction-scan, snapshot-leak, kv-scatter, expert-thrash (needs --moe-backend offload), gc-pressure. See docs/faults.md.")] = None,
    threads: Annotated[Optional[int], typer.Option(help="Torch threads for the model on the CPU (default: all cores this process may use but one, at least 1, so the server thread and a local soak driver keep a core).")] = None,
) -> None:
    """Serve the built-in engine as an OpenAI-compatible server with Prometheus /metrics."""
    import logging
    import sys

    from engine.runtime.config import EngineConfig
    from engine.runtime.logfmt import attach_log
    from engine.server.config import ServerConfig
    from engine.server.main import bind, serve as run_server

    given = dict(max_running_requests=max_running_requests, chunked_prefill_size=chunked_prefill_size,
                 page_size=page_size, kv_tokens=kv_tokens, memory_ratio=memory_ratio, mamba_slots=mamba_slots,
                 cache_type=cache_type, moe_backend=moe_backend, moe_cache_size=moe_cache_size,
                 attention_backend=attention_backend, dtype=dtype, device=device,
                 decode_log_interval=decode_log_interval, num_threads=threads or serving_threads())
    engine_config = EngineConfig(model=str(model) if model else None, mixed_chunk=enable_mixed_chunk,
                                 faults=tuple(fault or ()),
                                 **{k: v for k, v in given.items() if v is not None})
    server_config = ServerConfig(host=host, port=port, api_key=api_key, served_model_name=served_model_name,
                                 step_history=step_history)
    engine_log = logging.getLogger("engine")
    engine_log.propagate = False  # its lines go out once, in FreeToken's format
    attach_log(engine_log, sys.stderr)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        attach_log(engine_log, open(log_file, "a", buffering=1, encoding="utf-8"))
    sock = bind(host, port)
    verbose = logging.getLogger().level <= logging.INFO
    typer.echo(f"loading the engine; then serving on http://{host}:{port}/v1 (metrics at /metrics)", err=True)
    run_server(engine_config, server_config, log_level="info" if verbose else "warning", access_log=verbose,
               sock=sock)


def serving_threads() -> int:
    """Model threads when serving on the CPU: every core this process may use but one. Torch's own
    threads spin while they wait for work, so with every core taken they fight the server's thread
    (which streams each token) and a soak driver on the same machine: on two cores that halved the
    decode rate of a served probe and made it swing by 10-20 % from one run to the next. A soak
    pins its engines to the cores it leaves free (soak.affinity); the threads follow those."""
    import os

    try:
        num_cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS
        num_cpus = os.cpu_count() or 1
    return max(1, num_cpus - 1)


@app.command()
def validate(
    minutes: Annotated[float, typer.Option(help="Soak length of each run, in minutes.")] = 3.0,
    fault: Annotated[Optional[list[str]], typer.Option("--fault", help="Mechanism to validate (repeatable); all of them when omitted. A no-fault control always runs first.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Directory for the runs and matrix.md / matrix.json (default runs/validate-<time>).")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="Trace to replay (default: the agentic example trace, examples/opencode.jsonl).")] = None,
    speed: Annotated[float, typer.Option(help="Replay speed: trace think times are divided by this.")] = 4.0,
    engine_arg: Annotated[Optional[list[str]], typer.Option(help="An extra `soak serve` option for every run (repeatable).")] = None,
    probe_tokens: Annotated[Optional[int], typer.Option(help="Probe prompt length in tokens for every run (default: 256, or what a mechanism needs to show, e.g. 4096 for kv-scatter).")] = None,
    probe_output_tokens: Annotated[int, typer.Option(help="Probe output length in tokens (longer probes average out more noise).")] = 192,
    scale: Annotated[Optional[float], typer.Option(help="Trace length scale for every run (default: 1, or what a mechanism needs to act, e.g. longer contexts for kv-scatter).")] = None,
) -> None:
    """Soak the built-in engine with each degradation mechanism and a control; check that diag finds and names each."""
    import time

    from soak.fault_matrix import MECHANISMS, machine_description, render_markdown, validate as run_matrix

    out = out or Path("runs") / f"validate-{time.strftime('%Y%m%d-%H%M%S')}"
    mechanisms = tuple(fault) if fault else MECHANISMS

    def progress(row) -> None:
        typer.echo(f"{row.mechanism}: {row.verdict}, top suspect {row.top_suspect or '-'}: "
                   f"{'pass' if row.passed else 'FAIL'} ({row.detail})", err=True)

    rows = run_matrix(minutes, out, mechanisms, trace=trace, engine_args=tuple(engine_arg or ()), speed=speed,
                      probe_tokens=probe_tokens, on_row=progress, probe_output_tokens=probe_output_tokens, scale=scale)
    typer.echo(render_markdown(rows, minutes, machine_description()))
    typer.echo(f"runs and matrix.md in {out}")
    if not all(r.passed for r in rows):
        raise typer.Exit(1)


def main() -> None:
    run_app(app)
