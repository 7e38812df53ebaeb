"""The chaos soak, short (docs/testing.md#chaos-soak): about a minute and a half of mixed workload
on a pool of simulated nodes beside the session's control plane, with faults from a fixed seed
(soak_bed.py). ``make soak`` runs the same bed for as long as it is told.

The soak restarts etcd, the API server and kube-scheduler of the shared control plane; every
other test of the tier runs before or after it, and finds them back (the bed waits for each to be
ready). The bed checks every invariant; this test asserts that none was broken and that the run
exercised what it claims (faults of several kinds, binds decided, Jobs run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from e2e_controlplane import ControlPlane
from soak_bed import SoakBed, SoakOptions, format_report

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.soak]

# Seed 4's first faults are six different kinds (soak_schedule draws each kind once per round):
# aggregator killed, etcd restarted, an agent paused, a repack, extender killed, an agent cut off.
SHORT = SoakOptions(
    minutes=1.5,
    seed=4,
    mean_gap_s=8.0,
    warmup_s=10.0,
    quiet_s=15.0,
    job_every_s=6.0,
    scale_every_s=8.0,
    drain_s=180.0,
    memory_warmup_s=30.0,  # slopes are printed; a run this short is never judged (5 min needed)
)


@pytest.fixture
def soak(
    control_plane: ControlPlane,
    api_client: kubernetes.client.ApiClient,
    tmp_path: Path,
) -> Iterator[SoakBed]:
    bed = SoakBed(control_plane, api_client, tmp_path, SHORT)
    try:
        bed.setup()
        yield bed
    finally:
        bed.teardown()


@pytest.mark.timeout(600)
def test_short_soak_breaks_no_invariant(soak: SoakBed) -> None:
    report = soak.run()
    text = format_report(report)
    print(text)
    assert report["violation_count"] == 0, text
    assert len(report["faults"]) >= 4, text
    assert sum(r["count"] for r in report["recoveries"].values()) >= 3, text
    assert report["binds"]["decisions"] > 10, text
    # The workload kept going through the faults: a Job every 3-9 s over 90 s.
    assert report["workload"]["jobs_completed"] == report["workload"]["jobs"] >= 8, text
    assert report["workload"]["scalings"] >= 6, text
