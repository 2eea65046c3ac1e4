"""Traces: the tokdrift trace format, importers, synthesis and a recording proxy (no torch).

The soak driver uses three things from here: `read_trace` for the calls, `Materializer`
(or `materialize`) to turn each call into token ids or chat text, and `probe_prompt` for a
fixed prompt from a namespace no trace call ever produces.
"""

from replay.errors import TraceError
from replay.materialize import MaterializeConfig, Materializer, Prompt, materialize, probe_prompt
from replay.trace import Call, Trace, TraceHeader, TraceWriter, read_trace, write_trace

__all__ = [
    "Call",
    "MaterializeConfig",
    "Materializer",
    "Prompt",
    "Trace",
    "TraceError",
    "TraceHeader",
    "TraceWriter",
    "materialize",
    "probe_prompt",
    "read_trace",
    "write_trace",
]
