"""The extender's process never loads the solver, and its solver process runs at a lower priority.

The solver's numba kernels compile when first imported (seconds of CPU where the image leaves no
writable cache). Loaded on the extender's event loop, they left kube-scheduler's filter, bind and
every other request unanswered for as long: the first repack of a run stopped scheduling. The
check runs in a fresh interpreter, since this test process may have loaded the solver already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from scheduler_ext.repack.service import SOLVER_NICENESS

from .conftest import fragmented_cluster

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sys

    import psutil

    from scheduler_ext.cluster import InMemoryCluster
    from scheduler_ext.http_server import build_app
    from scheduler_ext.repack.service import RepackService, RepackSettings
    from scheduler_ext.service import ExtenderService

    SOLVER_MODULES = ("numba", "ortools", "repack.driver.solver")

    async def main() -> dict:
        cluster = InMemoryCluster()
        cluster.set_objects(json.loads(sys.stdin.read()))
        service = ExtenderService(cluster)
        settings = RepackSettings(time_limit=10.0, workers=1)
        repack = RepackService(settings, cluster.list_for_repack, service.metrics)
        build_app(service, repack=repack)
        try:
            record = await repack.run("http")
            children = psutil.Process().children()
            solvers = [c.nice() for c in children if "spawn_main" in " ".join(c.cmdline())]
        finally:
            await repack.close()
        return {
            "status": record.status if record else None,
            "loaded": sorted(m for m in SOLVER_MODULES if m in sys.modules),
            "nice": os.nice(0),
            "solver_nice": solvers,
        }

    print(json.dumps(asyncio.run(main())))
    """
)


def test_a_repack_run_loads_the_solver_only_in_a_lower_priority_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        input=json.dumps(fragmented_cluster()),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["status"] == "OPTIMAL"  # the run solved, in the other process
    assert seen["loaded"] == [], seen
    assert seen["solver_nice"] == [min(19, seen["nice"] + SOLVER_NICENESS)], seen
