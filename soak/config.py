"""Soak options as one frozen config, validated once, written into the manifest as given."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from soak.errors import SoakError

if TYPE_CHECKING:  # types only: the commands read this module's defaults without loading numpy
    from engine.server.cli import ServeOptions
    from replay.materialize import OverLimit

APIS = ("auto", "completions", "chat")


class Probing(NamedTuple):
    """How a soak probes where its options do not say: a plain soak, or one that runs until decided."""

    probe_every_s: float
    probe_output_tokens: int
    baseline_cycles: int


PLAIN = Probing(probe_every_s=300.0, probe_output_tokens=64, baseline_cycles=0)
# Until decided, more often and longer: certainty comes per cycle, and a 256-token probe's cycle was
# the least noisy per minute measured here (docs/diagnostics.md, "Probe design"). And a baseline
# first, so that a loss that sets in with the first calls is compared with an engine younger than
# it: without one, an output-buffer fault from the second cycle held the engine at 0.85 of its twin
# through a 12-minute soak whose first third was as slow, and diag said "no engine age, medium"
# (paired 0.97, 0.92-1.02). Eight is the fewest that let the early side decide as the first third
# does (docs/soak.md, "A baseline before the traffic").
DECIDING = Probing(probe_every_s=10.0, probe_output_tokens=256, baseline_cycles=8)
DECIDING_MAX_HOURS = 2.0  # `soak run --until-decided` given no duration: the longest it may run


@dataclass(frozen=True, kw_only=True)
class SoakConfig:
    trace: str  # path of the trace (replay format v1)
    duration_s: float  # how long to replay; the trace loops until then
    target: str = "builtin"  # "builtin" or the base URL of an OpenAI-compatible server
    model: str | None = None  # model name sent to a URL target; None = the first of /v1/models
    api: str = "auto"  # completions (token ids) for builtin, chat (text) for a URL
    api_key: str | None = None  # bearer token for a URL target
    concurrency: int = 4  # sessions in flight at most
    speed: float = 1.0  # trace start times and think times divided by this
    scale: float = 1.0  # every length times this (replay.MaterializeConfig.scale)
    max_context: int | None = None  # prompt + output cap; None = the trace header's, for URL targets
    over_limit: OverLimit = "trim"  # what to do with a call above max_context: drop, trim, keep
    request_timeout_s: float = 600.0  # one call, send to last byte
    temperature: float | None = None  # replayed calls' sampling temperature; None: the target's default
    # The probing options left None take PLAIN's value, or DECIDING's with until_decided (above).
    probe_every_s: float | None = None  # matched-condition probe period (0 = only at start and end)
    # False: a replay only, as a user serves, with no probe and no control: the engine's log and the
    # requests are then exactly what a user has (scheduled restarts still happen, unprobed).
    probes: bool = True
    probe_input_tokens: int = 256  # probe prompt length (tokens, or words for chat targets)
    probe_output_tokens: int | None = None  # probe output length, greedy, eos ignored where the target accepts it
    probe_wait_s: float = 60.0  # how long a probe waits for the target to go idle
    # Probe cycles on the fresh engine with no traffic, probe_every_s apart, after the start cycle
    # and before the replay (not serving time): the engine's youth, where traffic fills its caches
    # within the first minutes. 0: none, the youth is the first probes of the replay.
    baseline_cycles: int | None = None
    restart_every_s: float | None = None  # deliberate restarts during the run
    restart_at_end: bool = True  # the restart control: restart and probe once more at the end
    restart_cmd: str | None = None  # shell command that restarts a URL target
    flush_every_s: float = 10.0  # parts are written at least this often
    sample_every_s: float = 2.0  # hooks, process, GPU and /metrics sampling period
    profile_drop: float = 0.3  # profile when probe decode rate falls this far below its first value
    profile_seconds: float = 5.0  # py-spy record duration
    profiles: bool = True  # take py-spy profiles at all
    engine_log: str | None = None  # a URL target's log file, tailed and parsed into steps
    engine_args: tuple[str, ...] = ()  # extra `soak serve` options for the builtin target
    faults: tuple[str, ...] = ()  # degradation mechanisms switched on in the builtin engine (docs/faults.md)
    engine_start_timeout_s: float = 300.0  # how long the builtin engine may take to answer /health
    # The control: a young twin of the built-in engine (None: on where memory allows), or a second
    # instance of a URL target's server. Probed beside the soaked engine every cycle, it tells host
    # drift (both move) from engine age (only the soaked one does).
    twin: bool | None = None
    twin_restart_every_s: float = 600.0  # the control is restarted this often, so it stays young
    # ... and after answering this many probes in one life: what ages an engine is the requests it
    # served, and a fault driven by them reaches a same-build control too (docs/soak.md, "The control").
    control_restart_after: int = 16
    twin_engine_args: tuple[str, ...] = ()  # `soak serve` options for the twin alone, on top of engine_args
    control_target: str | None = None  # URL of a second instance of the target's server
    control_restart_cmd: str | None = None  # shell command that restarts --control-target
    affinity: bool | None = None  # driver and engines on separate CPUs (None: where there are >= 2)
    # Stop as soon as the running verdict is decided either way (age found, or a loss of more
    # than rule_out ruled out), restart control included; duration_s is then the most it may take.
    until_decided: bool = False
    rule_out: float = 0.10  # the loss a decided "no age" rules out
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # free-form, kept in the manifest

    def __post_init__(self) -> None:
        mode = DECIDING if self.until_decided else PLAIN
        for name, value in mode._asdict().items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            _fail("duration_s", "a number of seconds > 0", self.duration_s)
        if not (self.target == "builtin" or self.target.startswith(("http://", "https://"))):
            _fail("target", "'builtin' or an http(s):// URL", self.target)
        if self.api not in APIS:
            _fail("api", f"one of {', '.join(APIS)}", self.api)
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            _fail("concurrency", "an integer >= 1", self.concurrency)
        for name in (
            "speed",
            "scale",
            "flush_every_s",
            "sample_every_s",
            "request_timeout_s",
            "probe_wait_s",
            "engine_start_timeout_s",
            "profile_seconds",
        ):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                _fail(name, "a number > 0", value)
        every_s = self.probing.probe_every_s
        if not (every_s >= 0 and math.isfinite(every_s)):
            _fail("probe_every_s", "a number of seconds >= 0", every_s)
        if self.restart_every_s is not None and not self.restart_every_s > 0:
            _fail("restart_every_s", "a number of seconds > 0 or unset", self.restart_every_s)
        for name in ("probe_input_tokens", "probe_output_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 2:
                _fail(name, "an integer >= 2", getattr(self, name))
        if self.max_context is not None and self.max_context < 2:
            _fail("max_context", "an integer >= 2 or unset", self.max_context)
        if self.over_limit not in ("drop", "trim", "keep"):
            _fail("over_limit", "one of drop, trim, keep", self.over_limit)
        if not (isinstance(self.rule_out, (int, float)) and 0 < self.rule_out < 1):
            _fail("rule_out", "a fraction in (0, 1)", self.rule_out)
        if self.temperature is not None and not (
            isinstance(self.temperature, (int, float)) and self.temperature >= 0 and math.isfinite(self.temperature)
        ):
            _fail("temperature", "a number >= 0 or unset", self.temperature)
        if not isinstance(self.baseline_cycles, int) or self.baseline_cycles < 0:
            _fail("baseline_cycles", "an integer >= 0", self.baseline_cycles)
        if self.baseline_cycles and every_s <= 0:
            _fail("probe_every_s", "a period > 0 with baseline_cycles (they are probe_every_s apart)", every_s)
        if self.until_decided and every_s <= 0:
            _fail("probe_every_s", "a period > 0 with until_decided (only probe cycles decide)", every_s)
        if not self.probes:
            for name, value in (
                ("until_decided", self.until_decided),  # before the baseline it gives (DECIDING)
                ("baseline_cycles", self.baseline_cycles),
                ("twin", self.twin),
                ("control_target", self.control_target),
            ):
                if value:
                    _fail(name, "unset without probes (a replay only has no probe cycles and no control)", value)
        if not 0 < self.profile_drop < 1:
            _fail("profile_drop", "a fraction in (0, 1)", self.profile_drop)
        if self.restart_cmd is not None and self.is_builtin:
            _fail("restart_cmd", "unset for the builtin target (it restarts its own engine)", self.restart_cmd)
        if not (
            isinstance(self.twin_restart_every_s, (int, float))
            and self.twin_restart_every_s > 0
            and math.isfinite(self.twin_restart_every_s)
        ):
            _fail("twin_restart_every_s", "a number of seconds > 0", self.twin_restart_every_s)
        if not (isinstance(self.control_restart_after, int) and self.control_restart_after >= 1):
            _fail("control_restart_after", "a number of probes >= 1", self.control_restart_after)
        object.__setattr__(self, "twin_engine_args", tuple(self.twin_engine_args))
        if self.twin_engine_args and not self.is_builtin:
            _fail("twin_engine_args", "none for a URL target (its control is --control-target)", self.twin_engine_args)
        if self.twin and not self.is_builtin:
            _fail("twin", "off for a URL target (its control is --control-target)", self.twin)
        if self.control_target is not None:
            if self.is_builtin:
                _fail("control_target", "unset for the builtin target (its control is the twin)", self.control_target)
            if not self.control_target.startswith(("http://", "https://")):
                _fail("control_target", "an http(s):// URL", self.control_target)
            if self.control_target.rstrip("/") == self.target.rstrip("/"):
                _fail("control_target", "a second instance, not the target itself", self.control_target)
        if self.control_restart_cmd is not None and self.control_target is None:
            _fail("control_restart_cmd", "unset without control_target", self.control_restart_cmd)
        if self.engine_log is not None and self.is_builtin:
            _fail("engine_log", "unset for the builtin target (its log is runs/<id>/engine.log)", self.engine_log)
        object.__setattr__(self, "engine_args", tuple(self.engine_args))
        object.__setattr__(self, "faults", tuple(self.faults))
        if self.faults and not self.is_builtin:
            _fail("faults", "none for a URL target (faults live in tokdrift's engine)", list(self.faults))
        if self.is_builtin:
            _ = self.engine_options  # parsed once, here: a bad --engine-arg or fault fails before anything starts
            _ = self.twin_engine_options

    @cached_property
    def twin_engine_options(self) -> ServeOptions:
        """The twin's options: the engine's, with twin_engine_args on top (a later option wins)."""
        return self._options(self.engine_args + self.twin_engine_args, "--twin-engine-arg")

    @cached_property
    def engine_options(self) -> ServeOptions:
        """The built-in engine's options (engine.server.cli.ServeOptions): --engine-arg words and the
        faults, handed to each engine the soak starts as one JSON document."""
        return self._options(self.engine_args, "--engine-arg")

    def _options(self, args: tuple[str, ...], flag: str) -> ServeOptions:
        from engine.server.cli import parse_args
        from engine.server.errors import ServerError

        try:
            options = parse_args(args)
            faults = list(dict.fromkeys([*options.engine.get("faults", ()), *self.faults]))  # in order, once each
            return options.with_(engine={"faults": faults}) if faults else options
        except ServerError as exc:
            raise SoakError(f"{flag} / --fault: {exc}") from None

    @property
    def probing(self) -> Probing:
        """The probing options as the soak runs them: none is None once __post_init__ has filled them in."""
        every, output, baseline = self.probe_every_s, self.probe_output_tokens, self.baseline_cycles
        assert every is not None and output is not None and baseline is not None
        return Probing(every, output, baseline)

    @property
    def is_builtin(self) -> bool:
        return self.target == "builtin"

    @property
    def resolved_api(self) -> str:
        if self.api != "auto":
            return self.api
        return "completions" if self.is_builtin else "chat"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["engine_args"] = list(self.engine_args)
        out["faults"] = list(self.faults)
        if out.get("api_key"):
            out["api_key"] = "<redacted>"
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SoakConfig:
        known = {k: v for k, v in obj.items() if k in cls.__dataclass_fields__}
        if known.get("api_key") == "<redacted>":
            known["api_key"] = None
        known["engine_args"] = tuple(known.get("engine_args", ()))
        # Before the faults had their own field they were kept in `extra` (and in engine_args as
        # --fault words, which engine_options merges with these).
        known["faults"] = tuple(known.get("faults") or (known.get("extra") or {}).get("faults") or ())
        return cls(**known)


def _fail(name: str, expected: str, value: Any) -> None:
    raise SoakError(f"{name}: expected {expected}, found {value!r}")
