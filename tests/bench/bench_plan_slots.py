"""What repack plan slots cost the extender's filter, as ratios against no slots at all.

A filter call (``ExtenderService.filter``, nodeCacheCapable body, 500 candidate nodes with fresh
reports) is timed for three pods while a plan holds 50 slots:

* an unrelated pod (no slot matches: one dict lookup by uid and one by owner uid);
* a pod whose controller holds a replacement slot (its class is decoded from the request and
  compared; only the slot's node passes);
* a formerly pending pod with a pending slot (matched by uid);

each against the same unrelated pod's filter with no slot open (the baseline). Medians of
interleaved rounds; run with ``make bench BENCH_ARGS=plan_slots``.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from protos.carico.v1 import capacity_pb2
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.repack.recheck import request_signature
from scheduler_ext.service import ExtenderService
from scheduler_ext.slots import SlotKind

NODES = 500
SLOTS = 50
ROUNDS = 15
CALLS = 200


def pod(name: str, owner: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": owner, "uid": f"uid-{owner}", "controller": True}
            ],
        },
        "spec": {
            "schedulerName": "carico-scheduler",
            "priority": 0,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "200m", "memory": "600Mi"}}}
            ],
        },
    }


def body(p: dict[str, Any], names: list[str]) -> bytes:
    return json.dumps({"Pod": p, "Nodes": None, "NodeNames": names}).encode()


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.perf_counter() - start) / CALLS


def main() -> None:
    names = [f"node-{i:04d}" for i in range(NODES)]
    idle = ExtenderService(InMemoryCluster())
    busy = ExtenderService(InMemoryCluster())
    now = time.monotonic()
    for service in (idle, busy):
        for i, node in enumerate(names):
            msg = capacity_pb2.NodeCapacity(
                node=node, avail=20.0, sequence=1, timestamp=time.time(), pods=3
            )
            service.ingest(msg, stream=i)
    unrelated = body(pod("unrelated", "rs-other"), names)
    replacement = body(pod("rs-moved-x", "rs-moved"), names)
    pending = body(pod("pending-6", "rs-pending"), names)
    sig = request_signature(replacement)
    for i in range(SLOTS):
        if i % 2:
            busy.slots.open(
                "bench", SlotKind.REPLACEMENT, names[i], f"uid-rs-moved-{i}", now, signature=sig
            )
        else:
            busy.slots.open("bench", SlotKind.PENDING, names[i], f"uid-pending-{i}", now)
    busy.slots.open("bench", SlotKind.REPLACEMENT, names[1], "uid-rs-moved", now, signature=sig)
    assert json.loads(busy.filter(replacement))["NodeNames"] == [names[1]]
    assert json.loads(busy.filter(pending))["NodeNames"] == [names[6]]
    assert len(json.loads(busy.filter(unrelated))["NodeNames"]) == NODES
    cases = {
        "unrelated pod, 50 slots open": lambda: busy.filter(unrelated),
        "replacement pod with a slot": lambda: busy.filter(replacement),
        "pending pod with a slot": lambda: busy.filter(pending),
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    base: list[float] = []
    gc.disable()
    try:
        for _ in range(ROUNDS):  # interleaved, so load changes hit every case alike
            base.append(timed(lambda: idle.filter(unrelated)))
            for name, call in cases.items():
                results[name].append(timed(call))
    finally:
        gc.enable()
    baseline = statistics.median(base)
    print(f"filter, {NODES} candidates; baseline: an unrelated pod with no slot open")
    print(f"{'case':<34} {'time / baseline':>16}")
    for name, times in results.items():
        print(f"{name:<34} {statistics.median(times) / baseline:>16.2f}")


if __name__ == "__main__":
    main()
