"""The verdict in words and numbers: one paragraph and the key figures, for every page."""

from __future__ import annotations

from typing import NamedTuple, Optional

from diagnostics.result import Analysis, iso

HEADLINES = {
    "engine_age_degradation": "The engine slowed down with age, beyond what longer context explains",
    "context_growth_only": "Throughput fell, but only as much as the longer context explains",
    "no_degradation": "No slowdown at matched conditions",
    "insufficient_data": "The data cannot tell",
}


class KeyNumber(NamedTuple):
    label: str
    value: str


def headline(a: Analysis) -> str:
    if a.verdict == "engine_age_degradation" and a.age_basis == "prefix_reuse":
        return "The engine slowed down with age: its prefix cache stopped reusing, so every turn recomputes"
    if a.verdict == "engine_age_degradation" and a.age_basis == "prefill":
        return "The engine slowed down with age: admitting a prompt takes longer and longer"
    return HEADLINES[a.verdict]


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def trigger_text(a: Analysis) -> Optional[str]:
    if a.onset is None or a.onset.trigger is None:
        return None
    tr = a.onset.trigger
    when = iso(tr.t)
    if tr.kind in ("prefill_append", "prefill") and tr.new_tokens is not None:
        cached = tr.cached_tokens or 0
        what = (f"a prefill appending {tr.new_tokens:,} new tokens onto {cached:,} cached tokens" if cached
                else f"a prefill of {tr.new_tokens:,} new tokens with nothing cached")
        return f"{what} (at {when})"
    if tr.kind == "fault_on":
        return f"a fault switched on at {when} ({tr.detail})"
    return f"a {tr.kind.replace('_', ' ')} at {when}" + (f" ({tr.detail})" if tr.detail else "")


def paragraph(a: Analysis) -> str:
    """One paragraph that states the verdict with its numbers."""
    s, checks = a.slowdown, {c.name: c for c in a.checks}
    matched = "; ".join(m.detail for m in a.matched if m.ratio is not None)
    if a.verdict == "insufficient_data":
        fails = [c.detail for c in a.checks if c.status == "fail"]
        return "The data cannot tell engine age from context growth: " + ("; ".join(fails) or "too few samples") + "."
    if a.verdict == "engine_age_degradation" and a.age_basis == "prefix_reuse" and a.prefix_reuse is not None:
        return _reuse_paragraph(a)
    if a.verdict == "engine_age_degradation" and a.age_basis == "prefill" and a.prefill is not None:
        return _prefill_paragraph(a)
    if a.verdict == "engine_age_degradation":
        out = []
        if a.onset is not None:
            out.append(f"After {duration(a.onset.engine_age_s)} of engine life, decode throughput fell to "
                       f"{s.ratio:.2f}x its healthy rate at matched conditions: the engine ran a median "
                       f"{s.healthy_tps:.1f} tok/s while healthy and {s.degraded_tps:.1f} tok/s from "
                       f"{iso(a.onset.t)} on.")
            trig = trigger_text(a)
            out.append(f"It began right after {trig}." if trig else "Nothing notable stands out just before it.")
        else:
            out.append(f"Decode throughput late in the engine's life ran at {s.ratio:.2f}x its healthy rate at "
                       f"matched conditions ({s.degraded_tps:.1f} against {s.healthy_tps:.1f} tok/s).")
        ctx = checks.get("context_only_model")
        if ctx is not None and ctx.detail.startswith("context cannot explain it"):
            out.append("Longer context cannot explain it: " + ctx.detail.split(": ", 1)[1] + ".")
        elif matched:
            out.append(f"At matched conditions: {matched}.")
        out.append(_restart_sentence(a))
        sentence = _suspect_sentence(a)
        return " ".join(out + ([sentence] if sentence else []))
    if a.verdict == "context_growth_only":
        return (f"Decode throughput fell from a median {s.healthy_tps:.1f} to {s.degraded_tps:.1f} tok/s, but at "
                f"matched conditions the late samples ran at {s.ratio:.2f}x the healthy ones, so the longer context "
                f"explains the loss" + (f" ({matched})" if matched else "") + ".")
    return (f"At matched conditions, late samples ran at {s.ratio:.2f}x the healthy ones (a median "
            f"{s.degraded_tps:.1f} against {s.healthy_tps:.1f} tok/s)" + (f"; {matched}" if matched else "") + ".")


def _reuse_paragraph(a: Analysis) -> str:
    r = a.prefix_reuse
    when = f"After {duration(a.onset.engine_age_s)} of engine life, the" if a.onset is not None else "Late in the run, the"
    out = [f"{when} engine's prefix cache stopped reusing what an agent's next turn shares with the last: "
           f"continuation turns reused a median {r.late_share:.0%} of their prompt from cache, against "
           f"{r.healthy_share:.0%} early"
           + (f", so each recomputed about {r.recomputed_tokens:,.0f} more prompt tokens" if r.recomputed_tokens else "")
           + (f" (median time to first token {r.ttft_healthy_s:.2f} s early, {r.ttft_late_s:.2f} s late)"
              if r.ttft_healthy_s is not None and r.ttft_late_s is not None else "") + "."]
    return " ".join(out + _decode_held(a))


def _prefill_paragraph(a: Analysis) -> str:
    p = a.prefill
    when = f"After {duration(a.onset.engine_age_s)} of engine life, the" if a.onset is not None else "Late in the run, the"
    out = [f"{when} engine took longer and longer to admit a prompt: the last {p.num_late} prefills took {p.ratio:.2f}x, "
           f"in total, what prefills of the same size took while it was young."]
    return " ".join(out + _decode_held(a))


def _decode_held(a: Analysis) -> list[str]:
    """The sentences after a prefill-side finding: decode held, what began it, the top suspect."""
    out = []
    if a.slowdown is not None:
        out.append(f"Decode itself held: late decode ran at {a.slowdown.ratio:.2f}x its healthy rate at matched "
                   f"conditions.")
    if a.onset is not None:
        trig = trigger_text(a)
        out.append(f"It began after {trig}." if trig else "Nothing notable stands out just before it.")
    sentence = _suspect_sentence(a)
    return out + ([sentence] if sentence else [])


def _suspect_sentence(a: Analysis) -> Optional[str]:
    if not a.suspects:
        return None
    top = a.suspects[0]
    return (f"The engine figure that tracks it best is {top.name} (score {top.score:.2f}): "
            f"{top.evidence.split('; ')[-1]}.")


def key_numbers(a: Analysis) -> list[KeyNumber]:
    out = [KeyNumber("verdict", a.verdict)]
    if a.slowdown is not None:
        s = a.slowdown
        out += [KeyNumber("matched throughput ratio (degraded / healthy)", f"{s.ratio:.2f}"),
                KeyNumber("healthy decode (median, tok/s)", f"{s.healthy_tps:.1f}"),
                KeyNumber("degraded decode (median, tok/s)" if a.onset else "late decode (median, tok/s)",
                          f"{s.degraded_tps:.1f}")]
    if a.prefix_reuse is not None:
        r = a.prefix_reuse
        out.append(KeyNumber("prefix reuse of continuation turns (late / early)",
                             f"{r.ratio:.2f} ({r.late_share:.0%} against {r.healthy_share:.0%})"))
    if a.prefill is not None:
        out.append(KeyNumber("prefill time at matched sizes (late / healthy)", f"{a.prefill.ratio:.2f}"))
    if a.onset is not None:
        out += [KeyNumber("onset", iso(a.onset.t)),
                KeyNumber("engine age at onset", f"{a.onset.engine_age_s:.0f} s ({duration(a.onset.engine_age_s)})")]
        trig = trigger_text(a)
        out.append(KeyNumber("trigger", trig if trig else "none stands out"))
    out.append(KeyNumber("recovered by restart", {True: "yes", False: "no", None: "no restart in the data"}
                         [a.recovered_by_restart]))
    if a.model is not None:
        out.append(KeyNumber("healthy model (step time)", f"{a.model.describe()} ({a.model.num_points} samples)"))
    valid = a.samples[a.samples["excluded"] == ""] if len(a.samples) else a.samples
    out.append(KeyNumber("decode samples", f"{len(a.samples)} ({len(a.samples) - len(valid)} kept out)"))
    return out


def _restart_sentence(a: Analysis) -> str:
    if a.recovered_by_restart is True:
        return "A restart brought it back to the healthy rate, so the slowdown lives in the engine's state."
    if a.recovered_by_restart is False:
        return "A restart did not bring it back."
    return "The data holds no restart, so whether a fresh engine recovers is not tested here."
