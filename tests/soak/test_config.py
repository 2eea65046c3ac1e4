"""SoakConfig's probing options: left out, a plain soak's, or those of one that runs until decided."""

from soak.config import DECIDING, PLAIN, SoakConfig


def test_a_soak_that_runs_until_decided_probes_as_soak_run_until_decided_does():
    plain = SoakConfig(trace="t.jsonl", duration_s=60.0)
    deciding = SoakConfig(trace="t.jsonl", duration_s=60.0, until_decided=True)
    assert plain.probing == PLAIN == (300.0, 64, 0)
    assert deciding.probing == DECIDING == (10.0, 256, 8)
    # what the manifest keeps, and a resumed run reads back: the values run, not None
    assert {k: deciding.to_json()[k] for k in DECIDING._fields} == DECIDING._asdict()
    assert SoakConfig.from_json(deciding.to_json()).probing == DECIDING


def test_a_probing_option_given_is_kept_either_way():
    given = SoakConfig(trace="t.jsonl", duration_s=60.0, until_decided=True, probe_every_s=300.0, baseline_cycles=0)
    assert given.probing == (300.0, 256, 0)
