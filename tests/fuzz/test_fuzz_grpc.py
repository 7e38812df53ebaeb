"""Fuzzing the gRPC surfaces: the aggregator's Exchange and ExchangeStream, the extender's
CapacityIngest.Report, with messages drawn from the protos' descriptors (valid ones with fields
overwritten, and anything of the right types) and with raw bytes that may not parse at all (sent
with identity serialisers on a generic channel), on real servers on 127.0.0.1.

Properties: every call ends within its deadline with OK or the status the protocol promises for
a refusal (INVALID_ARGUMENT; for the extender a refused report is counted in the summary), a
refused input changes nothing (the aggregator's senders and served model; the extender's
/api/v1/nodes), what was accepted never breaks a later answer (the aggregator's next served
model, the extender's JSON API and a filter), and nothing is logged at ERROR.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregator.grpc_server import SERVICE_NAME, start_grpc_server
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2, capacity_pb2

from .conftest import budget, tried
from .messages import messages, overlaid
from .mutations import mutated_bytes
from .servers import (
    NODES,
    POD,
    TIMEOUT,
    ErrorRecords,
    Extender,
    FixedClock,
    LoopThread,
    node_report,
)

NOW = 1_000_000.0
FEATURES = ("cpu", "memory")
REFUSED = {grpc.StatusCode.INVALID_ARGUMENT}


def _valid_local(node: str, sequence: int, seed: int) -> aggregator_pb2.LocalModel:
    batch = np.random.default_rng(seed).random((16, len(FEATURES)))
    u, sigma = SubspaceModel.from_batch(batch).to_arrays()
    return aggregator_pb2.LocalModel(
        node=node,
        sequence=sequence,
        timestamp=NOW,
        weight=1,
        per_pod_costs=[0.1],
        model=aggregator_pb2.SubspaceFactor(
            d=u.shape[0],
            r=u.shape[1],
            u=u.ravel().tolist(),
            sigma=sigma.tolist(),
            feature_names=list(FEATURES),
        ),
    )


valid_locals = st.builds(
    _valid_local, st.sampled_from(("a1", "a2", "a3")), st.integers(1, 2**40), st.integers(0, 9)
)
local_models = st.one_of(valid_locals, overlaid(valid_locals), messages(aggregator_pb2.LocalModel))


def raw_of(models: st.SearchStrategy[aggregator_pb2.LocalModel]) -> st.SearchStrategy[bytes]:
    """Serialised messages, mutated byte by byte, or any bytes at all."""
    serialised = models.map(lambda m: m.SerializeToString())
    return st.one_of(serialised.flatmap(mutated_bytes), st.binary(max_size=200))


@dataclass
class Aggregator:
    service: AggregatorService
    server: grpc.aio.Server
    port: int
    loop: LoopThread
    error_log: ErrorRecords

    def state(self) -> tuple[object, ...]:
        """The senders and the model served, once the background recompute has caught up."""
        deadline = time.monotonic() + TIMEOUT
        while self.service.store.dirty or self.service._wake.is_set():
            assert time.monotonic() < deadline, "the recompute never caught up"
            time.sleep(0.005)
        known = self.service.store.known
        entries = tuple(sorted((node, repr(entry)) for node, entry in known.items()))
        return entries, self.service.reply


async def _start_aggregator(loop: LoopThread, error_log: ErrorRecords) -> Aggregator:
    service = AggregatorService(
        AggregatorConfig(name="fuzz", ttl=1e9), AggregatorMetrics(), clock=FixedClock(NOW)
    )
    await service.start()
    server, port = await start_grpc_server(service, "127.0.0.1:0", max_message_bytes=64 << 10)
    return Aggregator(service, server, port, loop, error_log)


async def _stop_aggregator(agg: Aggregator) -> None:
    await agg.server.stop(None)
    await agg.service.stop()


@pytest.fixture(scope="module")
def aggregator(loop_thread: LoopThread, error_log: ErrorRecords) -> Iterator[Aggregator]:
    agg = loop_thread.run(_start_aggregator(loop_thread, error_log))
    yield agg
    loop_thread.run(_stop_aggregator(agg))


@pytest.fixture(scope="module")
def agg_channel(aggregator: Aggregator) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{aggregator.port}") as channel:
        yield channel


def _check_exchange(agg: Aggregator, call: object, request: bytes, stream: bool) -> None:
    before = agg.state()
    try:
        if stream:
            replies = list(call(iter([request]), timeout=TIMEOUT))  # type: ignore[operator]
            assert len(replies) == 1
            reply = replies[0]
        else:
            reply = call(request, timeout=TIMEOUT)  # type: ignore[operator]
    except grpc.RpcError as exc:
        code = exc.code()  # type: ignore[attr-defined]
        assert code in REFUSED, (code, exc.details())  # type: ignore[attr-defined]
        assert agg.state() == before
    else:
        aggregator_pb2.GlobalModel.FromString(reply)
        # the accepted model is merged: the next model served must still be finite
        served = aggregator_pb2.GlobalModel.FromString(agg.state()[1])
        assert np.isfinite(list(served.model.u) + list(served.model.sigma)).all(), served
    assert not agg.error_log.records, agg.error_log.records[-3:]


@pytest.mark.fuzz("aggregator gRPC")
def test_aggregator_exchanges_survive_mutated_models_and_raw_bytes(
    aggregator: Aggregator, agg_channel: grpc.Channel
) -> None:
    identity: dict[str, None] = {"request_serializer": None, "response_deserializer": None}
    unary = agg_channel.unary_unary(f"/{SERVICE_NAME}/Exchange", **identity)
    streaming = agg_channel.stream_stream(f"/{SERVICE_NAME}/ExchangeStream", **identity)
    bodies = st.one_of(local_models.map(lambda m: m.SerializeToString()), raw_of(local_models))

    @budget(200)
    @given(bodies, st.booleans())
    def one(request: bytes, stream: bool) -> None:
        tried("aggregator gRPC")
        _check_exchange(aggregator, streaming if stream else unary, request, stream)

    one()


# -- the extender's CapacityIngest ------------------------------------------------------------

valid_reports = st.builds(
    node_report, st.sampled_from(NODES), st.floats(0, 50), st.integers(2, 2**40)
)
reports = st.one_of(valid_reports, overlaid(valid_reports), messages(capacity_pb2.NodeCapacity))


def _nodes(ext: Extender) -> object:
    status, body = ext.request("GET", "/api/v1/nodes")
    assert status == 200, body[:300]
    return json.loads(body)


def _still_answers(ext: Extender) -> None:
    """What an accepted report must never break: the JSON API and a filter over every node."""
    for path in ("/api/v1/nodes", "/api/v1/model", "/api/v1/history"):
        status, body = ext.request("GET", path)
        assert status == 200, (path, body[:300])
        json.loads(body)
    names = [n["name"] for n in json.loads(ext.request("GET", "/api/v1/nodes")[1])]
    args = json.dumps({"Pod": POD, "Nodes": None, "NodeNames": names}).encode()
    for verb in ("filter", "prioritize"):
        status, body = ext.request("POST", f"/scheduler/{verb}", args)
        assert status == 200, (verb, body[:300])


@pytest.fixture(scope="module")
def ingest_channel(extender: Extender) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(extender.grpc_address) as channel:
        yield channel


@pytest.mark.fuzz("extender CapacityIngest")
def test_capacity_ingest_survives_mutated_reports_and_raw_bytes(
    extender: Extender, ingest_channel: grpc.Channel
) -> None:
    report = ingest_channel.stream_unary(
        "/carico.v1.CapacityIngest/Report", request_serializer=None, response_deserializer=None
    )
    as_bytes = reports.map(lambda m: m.SerializeToString())
    streams = st.lists(
        st.one_of(as_bytes, as_bytes.flatmap(mutated_bytes), st.binary(max_size=120)),
        min_size=1,
        max_size=3,
    )

    @budget(150)
    @given(streams)
    def one(stream: list[bytes]) -> None:
        tried("extender CapacityIngest", len(stream))
        before, errors = _nodes(extender), extender.failures()[0]
        try:
            summary = capacity_pb2.ReportSummary.FromString(report(iter(stream), timeout=TIMEOUT))
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            assert code in REFUSED, (code, exc.details())  # type: ignore[attr-defined]
            accepted = None
        else:
            assert summary.accepted + summary.rejected == len(stream), summary
            accepted = summary.accepted
        # a refused call may follow reports of the same stream that were taken
        if accepted == 0 or (accepted is None and len(stream) == 1):
            assert _nodes(extender) == before
        _still_answers(extender)
        assert extender.failures() == (errors, [])

    one()
