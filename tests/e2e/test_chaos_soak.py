"""The chaos soak, short (docs/testing.md#chaos-soak): about a minute and a half of mixed workload
on a pool of simulated nodes, with faults from a fixed seed (soak_bed.py). ``make soak`` runs the
same bed for as long as it is told.

The soak kills and restarts etcd, the API server and kube-scheduler, so it runs on a control
plane of its own: on the session's, every watch of the tier's other fixtures (the session's
simulated kubelet, the agents) would break and later tests would inherit the damage. The bed
checks every invariant; this test asserts that none was broken and that the run exercised what it
claims (faults of several kinds, binds decided, Jobs run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_controlplane import ControlPlane, ControlPlaneError
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


NODE_GRACE_S = 20.0  # as the session's control plane (conftest.py) and make soak's


@pytest.fixture
def soak_control_plane(tmp_path: Path, e2e_bin: Path) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path / "controlplane", e2e_bin, node_monitor_grace_s=NODE_GRACE_S)
    try:
        cp.start()
    except ControlPlaneError as exc:  # start() has stopped what it started
        pytest.fail(f"the soak's control plane did not start: {exc}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def soak(soak_control_plane: ControlPlane, tmp_path: Path) -> Iterator[SoakBed]:
    api = soak_control_plane.api_client()
    bed = SoakBed(soak_control_plane, api, tmp_path / "soak", SHORT)
    try:
        bed.setup()
        yield bed
    finally:
        bed.teardown()
        api.close()


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
