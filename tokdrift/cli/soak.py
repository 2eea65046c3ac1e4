"""`soak`: the command line of the soak driver and the built-in engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokdrift.cli import verbose_callback
from tokdrift.cli.app import run_app
from tokdrift.cli.trace import trace_app

app = typer.Typer(
    help="Replay agent sessions against an inference engine for hours and record everything.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(trace_app, name="trace", help="Make and inspect replay traces: import, synth, record, stats.")

from tokdrift.cli.soak_run import register as _register_soak_commands  # noqa: E402  run, resume, status

_register_soak_commands(app)


app.callback()(verbose_callback)


@app.command()
def checkpoint(
    out: Annotated[
        Path, typer.Argument(help="Directory to write config.json, model.safetensors and tokenizer files into.")
    ],
    seed: Annotated[int, typer.Option(help="Seed of the random weights; the same seed writes the same bytes.")] = 0,
    moe_intermediate_size: Annotated[
        int | None,
        typer.Option(
            help="Width of each routed expert instead of the default's 128 (768 for the expert-thrash validation: "
            "an expert copy then costs enough beside a decode step to show)."
        ),
    ] = None,
) -> None:
    """Write the built-in default checkpoint (small, deterministic, random weights)."""
    from engine.model.checkpoint import write_default_checkpoint

    overrides = {"moe_intermediate_size": moe_intermediate_size} if moe_intermediate_size is not None else None
    path = write_default_checkpoint(out, seed=seed, overrides=overrides)
    typer.echo(f"wrote {path}")


@app.command()
def generate(
    prompt: Annotated[list[str], typer.Argument(help="Prompt text; give several to generate for each.")],
    model: Annotated[
        Path | None, typer.Option(help="Checkpoint directory (HF layout); the built-in default when omitted.")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens to generate per prompt.")] = 32,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 is greedy.")] = 0.0,
    seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
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


from engine.server.cli import HELP as _SERVE_HELP  # noqa: E402  options from the configs
from engine.server.cli import serve as _serve  # noqa: E402

app.command("serve", help=_SERVE_HELP)(_serve)


@app.command()
def validate(
    minutes: Annotated[float, typer.Option(help="Soak length of each run, in minutes.")] = 3.0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            help="Mechanism to validate (repeatable); all of them when omitted. A no-fault control runs first.",
        ),
    ] = None,
    control: Annotated[
        bool,
        typer.Option(
            help="Run the no-fault control first (--no-control leaves it out, where time is short and a "
            "control of the same machine is already known)."
        ),
    ] = True,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Directory for the runs and matrix.md / matrix.json (default runs/validate-<time>)."
        ),
    ] = None,
    trace: Annotated[
        Path | None, typer.Option(help="Trace to replay (default: the agentic example trace, examples/opencode.jsonl).")
    ] = None,
    speed: Annotated[float, typer.Option(help="Replay speed: trace think times are divided by this.")] = 4.0,
    engine_arg: Annotated[
        list[str] | None, typer.Option(help="An extra `soak serve` option for every run (repeatable).")
    ] = None,
    probe_tokens: Annotated[
        int | None,
        typer.Option(
            help="Probe prompt length in tokens for every run (default: 256, or what a mechanism needs to show, e.g. 4096 for kv-scatter)."
        ),
    ] = None,
    probe_output_tokens: Annotated[
        int, typer.Option(help="Probe output length in tokens (longer probes average out more noise).")
    ] = 192,
    scale: Annotated[
        float | None,
        typer.Option(
            help="Trace length scale for every run (default: 1, or what a mechanism needs to act, e.g. longer contexts for kv-scatter)."
        ),
    ] = None,
    aging_control: Annotated[
        bool,
        typer.Option(
            help="Run each mechanism a second time with the fault acting in the twin too (its onset within "
            "each of the twin's lives): what a control instance of the same build sees. It must not turn "
            "into a verdict of no age."
        ),
    ] = False,
) -> None:
    """Soak the built-in engine with each degradation mechanism and a control; check that diag finds and names each."""
    import time

    from tokdrift.cli.fault_matrix import MECHANISMS, MatrixRow, machine_description, render_markdown
    from tokdrift.cli.fault_matrix import validate as run_matrix

    out = out or Path("runs") / f"validate-{time.strftime('%Y%m%d-%H%M%S')}"
    mechanisms = tuple(fault) if fault else MECHANISMS

    def progress(row: MatrixRow) -> None:
        typer.echo(
            f"{row.mechanism}{' (aging control)' if row.aging_control else ''}: {row.verdict}, top suspect {row.top_suspect or '-'}: "
            f"{'pass' if row.passed else 'FAIL'} ({row.detail})",
            err=True,
        )

    rows = run_matrix(
        minutes,
        out,
        mechanisms,
        trace=trace,
        engine_args=tuple(engine_arg or ()),
        speed=speed,
        probe_tokens=probe_tokens,
        on_row=progress,
        probe_output_tokens=probe_output_tokens,
        scale=scale,
        control=control,
        aging_control=aging_control,
    )
    typer.echo(render_markdown(rows, minutes, machine_description()))
    typer.echo(f"runs and matrix.md in {out}")
    if not all(r.passed for r in rows):
        raise typer.Exit(1)


def main() -> None:
    from soak.heap import use_system_allocator_for_arrow

    use_system_allocator_for_arrow()  # before anything imports pyarrow (soak/heap.py)
    run_app(app)


if __name__ == "__main__":  # python -m tokdrift.cli.soak
    main()
