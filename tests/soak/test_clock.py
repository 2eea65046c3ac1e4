"""Serving time (soak.clock.ServingClock): only the replay spends it, across resumes."""

import time

from soak.clock import ServingClock


def test_the_clock_stands_still_until_the_replay_starts_and_counts_earlier_segments():
    clock = ServingClock(duration_s=100.0, before_s=30.0)
    later = time.time() + 50.0
    assert clock.elapsed_s(later) == 30.0  # the engines' start and the start probes spend none of it
    deadline = clock.start()
    assert deadline - clock.started == 70.0  # what is left of the duration
    assert clock.elapsed_s(clock.started + 10.0) == 40.0
    assert clock.remaining_s(deadline - 5.0) == 5.0 and clock.remaining_s(deadline + 5.0) == 0.0
