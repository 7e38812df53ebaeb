"""The gRPC link from a child aggregator to its parent (a PRONTO-style tree).

Periodically sends this aggregator's merged model upward as one ``LocalModel`` whose weight is the
number of leaf nodes behind it (with all their per-pod costs), and hands the parent's fleet-wide
reply to the service, which serves it to this aggregator's own nodes while it is fresh. When the
parent is unreachable the link backs off (doubling up to ``max_backoff``) and the nodes keep
getting this aggregator's own model.

Neighbours: ``service`` provides the merged model and takes the reply; ``grpc_server`` is what
runs on the other end.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import grpc

from aggregator.service import AggregatorService
from aggregator.wire import forward_message
from carico.tls import grpc_channel_credentials
from protos.carico.v1 import aggregator_pb2_grpc

log = logging.getLogger("carico.aggregator.parent")


@dataclass(frozen=True)
class ClientTls:
    """Trust ``ca`` for the parent's certificate; present ``cert``/``key`` for mTLS."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None


class ParentLink:
    def __init__(
        self,
        service: AggregatorService,
        address: str,
        *,
        tls: ClientTls | None = None,
        interval: float = 1.0,
        timeout: float = 2.0,
        max_backoff: float = 30.0,
        max_message_bytes: int = 1 << 20,
    ) -> None:
        self.service = service
        self.address = address
        self.interval = interval
        self.timeout = timeout
        self.max_backoff = max_backoff
        options = [("grpc.max_send_message_length", max_message_bytes)]
        if tls is None:
            self._channel = grpc.aio.insecure_channel(address, options=options)
        else:
            creds = grpc_channel_credentials(tls.ca, tls.cert, tls.key)
            self._channel = grpc.aio.secure_channel(address, creds, options=options)
        self._stub = aggregator_pb2_grpc.AggregatorStub(self._channel)
        self._sequence = 0
        self._failures = 0

    async def exchange_once(self) -> bool:
        """Forward the merged model once; False when there is nothing to send or the call failed."""
        view = self.service.local_view
        if view is None:
            return False
        self._sequence += 1
        message = forward_message(
            view, self.service.config.name, self._sequence, self.service.clock()
        )
        counter = self.service.metrics.parent_exchanges
        try:
            reply = await self._stub.Exchange(message, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            counter.labels(exc.code().name.lower()).inc()
            self._failures += 1
            level = (
                logging.WARNING
                if self._failures in (1, 10) or self._failures % 100 == 0
                else logging.DEBUG
            )
            log.log(
                level,
                "parent exchange failed",
                extra={
                    "parent": self.address,
                    "code": exc.code().name,
                    "error": exc.details(),
                    "failures": self._failures,
                },
            )
            return False
        counter.labels("ok").inc()
        if self._failures:
            log.info("parent reachable again", extra={"parent": self.address})
        self._failures = 0
        self.service.set_parent_view(reply)
        return True

    def next_delay(self) -> float:
        if not self._failures:
            return self.interval
        return min(self.max_backoff, self.interval * math.pow(2.0, min(self._failures, 16)))

    async def run(self) -> None:
        """Exchange with the parent until cancelled."""
        while True:
            await self.exchange_once()
            await asyncio.sleep(self.next_delay())

    async def close(self) -> None:
        await self._channel.close()
