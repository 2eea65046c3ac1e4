"""tokdrift inside a user's own vLLM: three entry points of the `vllm-plugin` extra, all off unless
an environment variable asks for them (docs/diagnostics.md, "vLLM step record"; docs/faults.md,
"vLLM").

- `vllm.stat_logger_plugins` -> `stat_logger.StepRecord`: each engine iteration's figures, as
  JSON lines in the file `TOKDRIFT_VLLM_STEPS` names, which `diag` reads as steps
  (logformats.vllm_steps).
- `vllm.general_plugins` -> `fault.register`: with `TOKDRIFT_VLLM_FAULT=step-cost[:...]`, a per-step
  cost that grows with the requests served, in the process that runs the model. A test instrument.
- `vllm.general_plugins` -> `gcstats.register`: with `TOKDRIFT_VLLM_STEPS` set, each vLLM process's
  garbage-collector pauses, collections and objects collected, as `figures` lines in that record
  every 10 s (figures.py: one vLLM's processes, summed by the reader).

Nothing here imports vLLM at module import time but `stat_logger` (which vLLM alone loads), and
nothing imports the rest of tokdrift but the ground (`ground`): the user's vLLM venv holds this package without its
dependencies (`pip install --no-deps`).
"""
