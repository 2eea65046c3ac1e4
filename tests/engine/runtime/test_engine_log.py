"""The engine logs as FreeToken does, so diagnostics' FreeToken reader reads it."""

import logging
import re

from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine, RequestRejected
from engine.runtime.logfmt import attach_log
from engine.sampling import SamplingParams
from logformats import parse_log

PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d\|\d\d:\d\d:\d\d\] (INFO {5}|WARNING {2})\S")  # level padded to 8


def test_engine_log_reads_back_through_the_freetoken_parser(tiny_checkpoint, tmp_path):
    path = tmp_path / "engine.log"
    logger = logging.getLogger("engine")
    with open(path, "w") as stream:
        handler = attach_log(logger, stream)
        try:
            engine = Engine(EngineConfig(model=tiny_checkpoint, kv_tokens=512, decode_log_interval=5))
            params = SamplingParams(max_tokens=21, temperature=0, ignore_eos=True)
            engine.add_request(list(range(60)), params)
            engine.add_request(list(range(50)), params)
            try:
                engine.add_request(list(range(100)) * 6, params)
            except RequestRejected:
                pass
            while engine.has_work():
                engine.step()
            engine.step()  # idle
        finally:
            logger.removeHandler(handler)
    lines = path.read_text().splitlines()
    assert all(PREFIX.match(line) for line in lines), lines
    text = "\n".join(lines)
    assert "Resolved config: moe_backend='resident'" in text
    assert "Cache rebuilt: KV 512 pages (512 tokens" in text
    assert "Input sequence length 600 exceeds 512, request 2 is dropped." in text
    assert text.rstrip().endswith("Scheduler is idle, waiting for new reqs...")

    parsed = parse_log(path)
    assert parsed.info.format == "tokdrift"
    assert parsed.info.num_unknown_lines == 0 and parsed.info.num_bad_values == 0
    steps = parsed.steps
    prefill = steps[steps["phase"] == "prefill"]
    decode = steps[steps["phase"] == "decode"]
    assert prefill["new_tokens"].sum() == 110
    assert len(decode) == 4  # 20 decode steps, a line every 5
    assert (decode["gen_tps"] > 0).all() and (decode["num_running_reqs"] == 2).all()  # as the batch ran
    assert len(parsed.events) >= 2  # the startup and the dropped request
