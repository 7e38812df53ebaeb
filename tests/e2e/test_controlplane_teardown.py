"""No control-plane or agent process outlives its owner: not after a failing test, not after a hard
kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from e2e_agents import AggregatorProcess, NodeAgents
from e2e_controlplane import ControlPlane, group_members, pid_alive, wait_for
from fake_procfs import FakeProcfs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class _InjectedFailure(Exception):
    pass


def test_failing_test_body_still_stops_every_process(tmp_path: Path, e2e_bin: Path) -> None:
    pids: dict[str, int] = {}
    with pytest.raises(_InjectedFailure), ControlPlane(tmp_path, e2e_bin) as cp:
        pids = cp.pids()
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
        assert all(pid_alive(pid) for pid in pids.values())
        raise _InjectedFailure  # a test failing while the control plane runs
    # Each component led its own process group; nothing in those groups may remain.
    for name, pid in pids.items():
        assert not pid_alive(pid), f"{name} ({pid}) survived teardown"
        assert group_members(pid) == [], f"{name}'s process group survived teardown"


def _dies_with_its_owner(start: str, what: str) -> None:
    """Run ``start`` (Python that starts a process and binds its pid to ``pid``) in an owner
    process, SIGKILL the owner (no atexit, no finalizer runs) and wait for the process to die."""
    here = Path(__file__).resolve().parent
    script = "\n".join(
        [
            "import sys, time",
            "from pathlib import Path",
            f"sys.path.insert(0, {str(here)!r})",
            textwrap.dedent(start),
            "print(pid, flush=True)",
            "time.sleep(600)",
        ]
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.strip().isdigit(), f"owner did not start {what} (exit {owner.poll()})"
        pid = int(line)
        assert pid_alive(pid)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)
        wait_for(lambda: not pid_alive(pid), 30, f"{what} to die with its owner")
    finally:
        if owner.poll() is None:
            os.killpg(owner.pid, signal.SIGKILL)
            owner.wait()


def test_killed_owner_takes_its_processes_along(tmp_path: Path, e2e_bin: Path) -> None:
    """If the Python process dies without running any cleanup (SIGKILL), the kernel's parent-death
    signal still ends the components it started."""
    _dies_with_its_owner(
        f"""
        from e2e_controlplane import ControlPlane
        cp = ControlPlane(Path({str(tmp_path)!r}), Path({str(e2e_bin)!r}))
        cp._write_files()
        etcd = cp._start(cp._etcd())
        cp._wait(etcd, cp._etcd_healthy, "/health", 120)
        pid = etcd.pid
        """,
        "etcd",
    )


def test_failing_test_body_still_stops_every_agent(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    nodes = ["e2e-node-0"]
    procfs = FakeProcfs(tmp_path / "procfs", nodes, running=dict)  # idle nodes
    procfs.start()
    aggregator = AggregatorProcess(tmp_path)
    agents = NodeAgents(
        control_plane.kubeconfig, procfs, nodes, tmp_path, aggregator=aggregator.address
    )
    pids: dict[str, int] = {}
    try:
        with pytest.raises(_InjectedFailure):
            try:
                aggregator.start()
                agents.start()
                pids = {**agents.pids(), "aggregator": aggregator.pid or 0}
                assert set(pids) == {*nodes, "aggregator"}
                assert all(pid_alive(p) for p in pids.values())
                agents[nodes[0]].pause()  # a hung (SIGSTOPped) agent must go as well
                raise _InjectedFailure
            finally:  # what the node_agents fixture's finalizer does
                agents.stop()
                aggregator.stop()
    finally:
        procfs.stop()
    for name, pid in pids.items():
        assert not pid_alive(pid), f"{name} ({pid}) survived teardown"
        assert group_members(pid) == [], f"{name}: its process group survived"


def test_killed_owner_takes_its_agents_along(tmp_path: Path, control_plane: ControlPlane) -> None:
    """An agent's parent-death signal ends it when the process that started it is SIGKILLed."""
    (tmp_path / "proc").mkdir()
    _dies_with_its_owner(
        f"""
        from e2e_agents import AgentProcess
        agent = AgentProcess("e2e-node-0", Path({str(tmp_path / "proc")!r}),
                             Path({str(control_plane.kubeconfig)!r}), "127.0.0.1:9", 0,
                             Path({str(tmp_path)!r}))
        agent.start()
        pid = agent.pid
        """,
        "the agent",
    )
