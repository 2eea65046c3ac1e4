"""What the engine's instrumentation costs a decode: hooks idle, sampled, and allocator events on.

    .venv/bin/python benchmarks/hooks_overhead.py [--quick] [--reps 15] [--tokens 48] [--batch 4]

One engine (the built-in checkpoint), a decode batch of `--batch` requests, run in four ways:

- `bare`:    the per-step instrumentation stubbed out (no StepStats built, no log lines):
             the baseline nothing can beat;
- `idle`:    the engine as shipped, nobody reading its hooks (StepStats built every step);
- `sampled`: what the soak does: every StepStats kept in a locked deque as the server's step
             history does, and every `--sample-every` steps a full hook reading
             (`engine.server.status.take_snapshot`: cache_report, mamba_stats,
             allocator_summary, expert_cache_stats) turned into JSON, with the step rows
             drained as dicts. At ~10 ms a step, every 25 steps is 4-10x more often than a
             2-5 s sampler: an upper bound;
- `events`:  `sampled` plus the allocator's event queue on, drained at every sample;
- `bare_again`: `bare` once more, so that bare_again vs bare shows the noise of the A/B.

Modes alternate within each repetition (rotating which goes first) and the overhead of a
mode is the median over repetitions of its decode time relative to the neighbouring
baseline run. The time spent inside the hook calls themselves is also clocked directly and
reported as a share of the decode: on a shared, noisy machine it is the steadier figure.
The headline, last, gives the clocked shares for `idle` (StepStats and log lines) and for
`sampled`/`events` (the sampler), then the A/B figures and the A/A noise floor.
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import clock, engine_decode, machine_line, median, prompt_ids, set_threads  # noqa: E402

MODES = ("bare", "idle", "sampled", "events", "bare_again")  # bare_again vs bare: the noise floor


class Sampler:
    """The soak's view of the engine: a step history and a periodic reading of every hook."""

    def __init__(self, engine, every: int, events: bool) -> None:
        self.engine, self.every, self.events = engine, every, events
        self.history: collections.deque = collections.deque(maxlen=65536)
        self.lock = threading.Lock()
        self.num_steps = self.num_samples = self.num_events = 0
        self.seconds = 0.0  # time spent in this class, clocked directly

    def on_step(self, stats) -> None:
        t0 = clock()
        with self.lock:
            self.history.append(stats)
        self.num_steps += 1
        if self.num_steps % self.every == 0:
            self.sample()
        self.seconds += clock() - t0

    def sample(self) -> None:
        from engine.server.status import as_json, take_snapshot

        as_json(take_snapshot(self.engine))
        with self.lock:
            rows = [s._asdict() for s in self.history]
            self.history.clear()
        rows.sort(key=lambda r: r["step"])
        if self.events:
            self.num_events += len(self.engine.take_allocator_events())
        self.num_samples += 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (smoke test)")
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the built-in one)")
    parser.add_argument("--reps", type=int, default=12, help="repetitions of every mode (median)")
    parser.add_argument("--tokens", type=int, default=48, help="tokens decoded per request and repetition")
    parser.add_argument("--batch", type=int, default=4, help="requests decoding together")
    parser.add_argument("--sample-every", type=int, default=25, help="steps between two hook readings")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.tokens, args.sample_every = 1, 6, 2
    set_threads(args.threads)
    logging.getLogger("engine").setLevel(logging.WARNING)
    print(machine_line())

    from engine.runtime.config import EngineConfig
    from engine.runtime.engine import Engine

    engine = Engine(
        EngineConfig(
            model=args.model,
            device="cpu",
            max_running_requests=args.batch,
            kv_tokens=args.batch * (64 + args.tokens) * 4,
        )
    )
    engine_decode(engine, [prompt_ids(64, 0)], 2)  # warm-up
    seconds = {m: [] for m in MODES}
    hook_share = {m: [] for m in MODES}
    num_samples = num_events = 0
    instrumentation_share = []  # idle: StepStats and log lines, clocked inside the engine
    for rep in range(args.reps):
        order = MODES[rep % len(MODES) :] + MODES[: rep % len(MODES)]
        for mode in order:
            prompts = [prompt_ids(64, 1000 * rep + 10 * MODES.index(mode) + b) for b in range(args.batch)]
            run, sampler, instr_s = _run(engine, mode, prompts, args)
            seconds[mode].append(run.seconds)
            hook_share[mode].append(sampler.seconds / run.seconds if sampler else 0.0)
            if sampler:
                num_samples, num_events = num_samples + sampler.num_samples, num_events + sampler.num_events
            if mode == "idle":
                instrumentation_share.append(instr_s / run.seconds)
    step_ms = {m: median(seconds[m]) / (args.tokens - 1) * 1e3 for m in MODES}  # N - 1 decode steps
    ab = {
        m: median([s / b - 1 for s, b in zip(seconds[m], seconds[base])])
        for m, base in (("idle", "bare"), ("sampled", "idle"), ("events", "idle"), ("bare_again", "bare"))
    }
    print(
        "decode step (median ms): "
        + ", ".join(f"{m} {step_ms[m]:.2f}" for m in MODES)
        + f"; batch {args.batch}, {args.tokens} tokens, {args.reps} repetitions"
    )
    print(f"hook readings taken: {num_samples}, allocator events drained: {num_events}")
    print("A/B overhead (median of paired runs): " + ", ".join(f"{m} {v:+.1%}" for m, v in ab.items()))
    clocked = {
        "idle": median(instrumentation_share),
        "sampled": median(hook_share["sampled"]),
        "events": median(hook_share["events"]),
    }
    print(
        "clocked inside the hooks, share of decode time: StepStats + step log (idle) "
        f"{clocked['idle']:.2%}, sampler (sampled) {clocked['sampled']:.2%}, "
        f"sampler with events (events) {clocked['events']:.2%}"
    )
    print(
        f"hooks_overhead idle={clocked['idle']:.2%} sampled={clocked['sampled']:.2%} events={clocked['events']:.2%} "
        f"(clocked; A/B {ab['idle']:+.1%} / {ab['sampled']:+.1%} / {ab['events']:+.1%}, "
        f"A/A noise {ab['bare_again']:+.1%})"
    )


def _run(engine, mode: str, prompts, args):
    """One decode in `mode`; returns the run, the sampler (None without one) and, for idle, the
    seconds spent building StepStats and log lines."""
    stats_fn, log_fn = engine._stats, engine._log_step
    instr = [0.0]
    if mode in ("bare", "bare_again"):
        engine._stats = lambda *a, **k: None
        engine._log_step = lambda *a, **k: None
    elif mode == "idle":

        def timed(fn):
            def wrapper(*a, **k):
                t0 = clock()
                out = fn(*a, **k)
                instr[0] += clock() - t0
                return out

            return wrapper

        engine._stats, engine._log_step = timed(stats_fn), timed(log_fn)
    sampler = Sampler(engine, args.sample_every, events=mode == "events") if mode in ("sampled", "events") else None
    if mode == "events":
        engine.enable_allocator_events()
    try:
        run = engine_decode(engine, prompts, args.tokens, on_step=sampler.on_step if sampler else None)
    finally:
        if mode == "events":
            engine.take_allocator_events()
            engine.kv_allocator.disable_events()
        for name in ("_stats", "_log_step"):  # back to the class's methods
            vars(engine).pop(name, None)
    return run, sampler, instr[0]


if __name__ == "__main__":
    main()
