"""Capacity reports for every node of the throughput benchmark, over the extender's real gRPC
``CapacityIngest``: one ``Report`` stream per node, as each node's agent keeps one.

Run as its own process by ``bench_throughput`` (so that its CPU is counted apart and it holds no
lock of the driver): ``python throughput_feed.py TARGET AVAILS.json EVERY``. Each node reports its
avail from the JSON object (node -> avail; no pods run, so it never changes) every EVERY seconds,
starting at a random phase so that reports arrive evenly; the streams are spread over a few
channels (one HTTP/2 connection each). Prints ``ready`` once every node has sent its first report.
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


async def reports(
    node: str, avail: float, every: float, first: asyncio.Event
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
        yield msg
        first.set()
        await asyncio.sleep(every)


async def stream(
    channel: grpc.aio.Channel, node: str, avail: float, every: float, first: asyncio.Event
) -> None:
    stub = capacity_pb2_grpc.CapacityIngestStub(channel)
    while True:
        try:
            await stub.Report(reports(node, avail, every, first))
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.5)  # the extender is not up (yet): reconnect


async def main(target: str, avails: dict[str, float], every: float) -> None:
    nodes = sorted(avails)
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(max(1, -(-len(nodes) // STREAMS_PER_CHANNEL)))
    ]
    firsts = [asyncio.Event() for _ in nodes]
    tasks = [
        asyncio.create_task(
            stream(channels[i % len(channels)], node, avails[node], every, firsts[i])
        )
        for i, node in enumerate(nodes)
    ]
    await asyncio.gather(*(f.wait() for f in firsts))
    print("ready", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    target, path, every = sys.argv[1], sys.argv[2], float(sys.argv[3])
    asyncio.run(main(target, json.loads(Path(path).read_text()), every))
