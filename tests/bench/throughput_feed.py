"""Capacity reports for every node of the throughput benchmark, over the extender's real gRPC
``CapacityIngest``: one ``Report`` stream per node, as each node's agent keeps one.

Run as its own process by ``bench_throughput`` (so that its CPU is counted apart and it holds no
lock of the driver): ``python throughput_feed.py TARGET AVAILS.json EVERY [CLASS]``. Each node
reports its avail from the JSON object (node -> avail; no pods run, so it never changes) every
EVERY seconds, starting at a random phase so that reports arrive evenly; the streams are spread
over a few channels (one HTTP/2 connection each). Prints ``ready`` once every node has sent its
first report.

With CLASS, each report is an agent's per-class one instead (features, scale, the node's size,
full level, default footprint), every node having learned CLASS (the benchmark pods' workload
class) at POD_CORES and POD_BYTES, with a CPU headroom of exactly ``avail`` such pods and memory
to spare: the extender then decides by the per-class fit, as it does with today's agents.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc  # noqa: E402

STREAMS_PER_CHANNEL = 250
# The per-class reports: a 4-core, 32 GiB node (with PSI, a core is 1/8 of the cpu feature) whose
# pods of the benchmark's class each keep a tenth of a core busy and hold 16 MiB.
CORES, MEMORY = 4.0, 32 * 2**30
POD_CORES, POD_BYTES = 0.1, 16 * 2**20
FULL_LEVEL = 0.85


def per_class(msg: capacity_pb2.NodeCapacity, avail: float, klass: str) -> None:
    """Make ``msg`` a per-class report with room for ``avail`` pods of ``klass``."""
    per_core, per_byte = 1 / (2 * CORES), 1 / MEMORY
    msg.feature_names.extend(["cpu", "memory"])
    msg.features.extend([FULL_LEVEL - avail * POD_CORES * per_core, 0.1])
    msg.headroom.extend([avail * POD_CORES * per_core, FULL_LEVEL - 0.1])
    msg.scale.extend(
        [
            capacity_pb2.FeatureScale(per_core=per_core),
            capacity_pb2.FeatureScale(per_byte=per_byte),
        ]
    )
    msg.classes.add(
        workload_class=klass, cpu_cores=POD_CORES, memory_bytes=POD_BYTES, source="learned",
        samples=100,
    )  # fmt: skip
    msg.full_level, msg.cpu_cores, msg.memory_bytes = FULL_LEVEL, CORES, MEMORY
    msg.default_footprint.CopyFrom(
        capacity_pb2.ClassFootprint(cpu_cores=POD_CORES, memory_bytes=POD_BYTES, source="default")
    )


async def reports(
    node: str, avail: float, every: float, first: asyncio.Event, klass: str
) -> AsyncIterator[capacity_pb2.NodeCapacity]:
    sequence = 0
    await asyncio.sleep(random.uniform(0, min(every, 1.0)))
    while True:
        sequence += 1
        msg = capacity_pb2.NodeCapacity(
            node=node,
            avail=avail,
            k=avail * 0.1,
            capacity=avail,
            per_pod_cost=1.0,
            pods=0,
            mode=capacity_pb2.CAPACITY_MODE_LIVE,
            sequence=sequence,
            timestamp=time.time(),
        )
        msg.health.psi_available = True
        if klass:
            per_class(msg, avail, klass)
        yield msg
        first.set()
        await asyncio.sleep(every)


async def stream(
    channel: grpc.aio.Channel,
    node: str,
    avail: float,
    every: float,
    first: asyncio.Event,
    klass: str,
) -> None:
    stub = capacity_pb2_grpc.CapacityIngestStub(channel)
    while True:
        try:
            await stub.Report(reports(node, avail, every, first, klass))
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.5)  # the extender is not up (yet): reconnect


async def main(target: str, avails: dict[str, float], every: float, klass: str) -> None:
    nodes = sorted(avails)
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(max(1, -(-len(nodes) // STREAMS_PER_CHANNEL)))
    ]
    firsts = [asyncio.Event() for _ in nodes]
    tasks = [
        asyncio.create_task(
            stream(channels[i % len(channels)], node, avails[node], every, firsts[i], klass)
        )
        for i, node in enumerate(nodes)
    ]
    await asyncio.gather(*(f.wait() for f in firsts))
    print("ready", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    target, path, every = sys.argv[1], sys.argv[2], float(sys.argv[3])
    klass = sys.argv[4] if len(sys.argv) > 4 else ""
    asyncio.run(main(target, json.loads(Path(path).read_text()), every, klass))
