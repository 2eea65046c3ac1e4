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
) -> None:
    """Write the built-in default checkpoint (small, deterministic, random weights)."""
    from engine.model.checkpoint import write_default_checkpoint

    path = write_default_checkpoint(out, seed=seed)
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


def main() -> None:
    run_app(app)
