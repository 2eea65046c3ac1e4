"""The server's step history (engine.runtime.stats.StepHistory): one array taken at start, read back
as the steps that went in."""

import pytest

from engine.runtime.stats import Phase, StepHistory
from tests.soak.fakes import engine_step


def _steps(first: int, last: int):
    return [
        engine_step(
            step=n,
            t=1_796_000_000.25 + n,
            phase=(Phase.PREFILL, Phase.DECODE, Phase.MIXED)[n % 3],
            num_prefill_tokens=n * 7,
            kv_usage=n / 1000,
            expert_misses=n if n % 2 else None,
            evict_s=0.5 / n if n % 5 == 0 else None,
        )
        for n in range(first, last + 1)
    ]


def test_the_history_gives_back_each_step_as_it_went_in_and_drops_the_oldest_when_full():
    history = StepHistory(8)
    assert len(history) == 0 and history.first_step is None and history.after(0, 10) == []
    steps = _steps(1, 20)
    for k, step in enumerate(steps, 1):
        history.append(step)
        held = steps[max(0, k - 8) : k]
        assert len(history) == len(held) and history.first_step == held[0].step
        assert history.after(0, 100) == held  # every field, None and the phase included
    assert history.after(15, 2) == steps[15:17] and history.after(19, 5) == [steps[19]]
    assert history.after(20, 5) == [] and history.after(3, 0) == []
    got = history.after(0, 1)[0]
    assert type(got.phase) is Phase and type(got.step) is int and type(got.expert_misses) is int


def test_the_history_takes_its_memory_at_start_and_refuses_a_gap():
    history = StepHistory(1000)
    assert history._rows.nbytes == 1000 * history._rows.dtype.itemsize
    history.append(engine_step(step=41))  # an engine counts from where it counts
    with pytest.raises(ValueError, match="without gaps"):
        history.append(engine_step(step=43))
    with pytest.raises(ValueError, match="at least one"):
        StepHistory(0)
