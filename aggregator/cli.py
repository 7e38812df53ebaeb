"""``carico aggregator``: flags, start-up and orderly shutdown of the aggregation service.

Starts the gRPC server, the ops HTTP endpoint (/metrics, /healthz, /readyz), the background tasks
and, with ``--parent``, the link to a parent aggregator. SIGTERM and SIGINT stop it cleanly: the
server stops taking calls, in-flight ones finish, open ``ExchangeStream`` streams end with
``UNAVAILABLE`` (their agents reconnect), and the final checkpoint is written. With
``--workers`` above 1 the gRPC server is that many worker processes in front of this one
(``merger``); should they keep failing, the command stops and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from pathlib import Path

import grpc

from aggregator.grpc_client import ClientTls, ParentLink
from aggregator.grpc_server import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OpenStreams,
    ServerTls,
    start_grpc_server,
    stop_grpc_server,
)
from aggregator.merger import Merger
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from aggregator.validate import (
    DEFAULT_MAX_CHILD_WEIGHT,
    MAX_WEIGHT,
    SenderPolicy,
    ValidationError,
    check_feature_names,
    check_node_name,
)
from aggregator.worker import WorkerConfig
from carico.cliargs import (
    EVENT_LOOPS,
    add_env_argument,
    event_loop_factory,
    non_negative_int,
    positive_float,
    positive_int,
)
from carico.http_ops import start_ops_server
from carico.logs import add_logging_arguments, configure_logging

log = logging.getLogger("carico.aggregator")


def _features(text: str) -> tuple[str, ...] | None:
    if not text.strip():
        return None
    names = tuple(n.strip() for n in text.split(","))
    try:
        return check_feature_names(names, len(names))
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _children(text: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        try:
            check_node_name(name, "--children name")
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
    return names


def _child_weight(text: str) -> int:
    weight = positive_int(text)
    if weight > MAX_WEIGHT:
        raise argparse.ArgumentTypeError(f"at most {MAX_WEIGHT}")
    return weight


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arg = parser.add_argument_group("service")
    add_env_argument(
        arg,
        "--listen",
        default="0.0.0.0:7070",
        metavar="HOST:PORT",
        help="gRPC address to serve on",
    )
    add_env_argument(
        arg,
        "--ops-listen",
        default="0.0.0.0:9470",
        type=_host_port,
        metavar="HOST:PORT",
        help="HTTP endpoint for /metrics, /healthz, /readyz",
    )
    add_env_argument(
        arg,
        "--workers",
        default=0,
        type=non_negative_int,
        help="processes serving gRPC on the port, in front of one that holds the store "
        "(0: as many as the CPUs this process may use; 1: everything in one process)",
    )
    add_env_argument(
        arg,
        "--event-loop",
        default="uvloop",
        choices=list(EVENT_LOOPS),
        help="event loop of every process: uvloop (libuv, less CPU per call) or the stdlib's",
    )
    add_env_argument(
        arg,
        "--name",
        default=socket.gethostname().lower(),
        help="this aggregator's name (a DNS-1123 name; it is the node name a parent sees)",
    )
    add_env_argument(
        arg,
        "--ttl",
        default=30.0,
        type=positive_float,
        help="seconds after which a silent node drops out of the global model",
    )
    add_env_argument(
        arg,
        "--features",
        default=None,
        type=_features,
        metavar="NAME,NAME,...",
        help="the feature set every model must have; unset: learned from the first model",
    )
    add_env_argument(
        arg,
        "--recompute-interval",
        default=0.05,
        type=positive_float,
        help="seconds between recomputations of the global model while models arrive",
    )
    add_env_argument(
        arg,
        "--max-senders",
        default=100_000,
        type=positive_int,
        help="most agents and child aggregators held at once (further new senders are refused)",
    )
    add_env_argument(
        arg,
        "--children",
        default=None,
        type=_children,
        metavar="NAME,NAME,...",
        help="the child aggregators (their --name) that may stand for more than one node; every "
        "other sender is one node, and a model claiming more is refused",
    )
    add_env_argument(
        arg,
        "--max-child-weight",
        default=DEFAULT_MAX_CHILD_WEIGHT,
        type=_child_weight,
        help="nodes one child aggregator may stand for at most (its model's weight)",
    )
    add_env_argument(
        arg,
        "--max-message-bytes",
        default=DEFAULT_MAX_MESSAGE_BYTES,
        type=positive_int,
        help="largest request accepted (a parent must allow 8 bytes per node behind a child)",
    )
    add_env_argument(
        arg,
        "--max-concurrent-rpcs",
        default=0,
        type=non_negative_int,
        help="calls in flight (per worker process) beyond which new ones get RESOURCE_EXHAUSTED "
        "at once; an agent's open exchange stream counts as one for as long as it is open, so "
        "this also caps the streaming agents per process; 0: no limit",
    )
    ckpt = parser.add_argument_group("checkpoint")
    add_env_argument(
        ckpt,
        "--checkpoint",
        default=None,
        type=Path,
        metavar="PATH",
        help="file to save the node models to and restore them from on start (the models "
        "accepted since the last save are journaled beside it, PATH.journal.N); unset: none",
    )
    add_env_argument(
        ckpt,
        "--checkpoint-interval",
        default=30.0,
        type=positive_float,
        help="seconds between checkpoint writes (one is also written on shutdown)",
    )
    tls = parser.add_argument_group("TLS of the gRPC server")
    add_env_argument(tls, "--tls-cert", type=Path, metavar="PATH", help="server certificate (PEM)")
    add_env_argument(tls, "--tls-key", type=Path, metavar="PATH", help="server private key (PEM)")
    add_env_argument(
        tls,
        "--tls-client-ca",
        type=Path,
        metavar="PATH",
        help="CA that must have signed client certificates (enables mTLS)",
    )
    parent = parser.add_argument_group("parent aggregator (tree)")
    add_env_argument(
        parent,
        "--parent",
        default=None,
        metavar="ADDRESS",
        help="forward the merged model to this aggregator and serve its fleet-wide model",
    )
    add_env_argument(
        parent,
        "--parent-interval",
        default=1.0,
        type=positive_float,
        help="seconds between exchanges with the parent",
    )
    add_env_argument(
        parent,
        "--parent-timeout",
        default=2.0,
        type=positive_float,
        help="deadline of a parent call",
    )
    add_env_argument(
        parent,
        "--parent-tls-ca",
        type=Path,
        metavar="PATH",
        help="CA to trust for the parent's certificate (enables TLS to the parent)",
    )
    add_env_argument(
        parent, "--parent-tls-cert", type=Path, metavar="PATH", help="client certificate (mTLS)"
    )
    add_env_argument(
        parent, "--parent-tls-key", type=Path, metavar="PATH", help="client private key (mTLS)"
    )
    add_logging_arguments(parser)


def _check(args: argparse.Namespace) -> str | None:
    """A usage error in the flag combination, or None."""
    try:
        check_node_name(args.name, "--name")
    except ValidationError as exc:
        return str(exc)
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together"
    if args.tls_client_ca is not None and args.tls_cert is None:
        return "--tls-client-ca needs --tls-cert and --tls-key"
    if (args.parent_tls_cert is None) != (args.parent_tls_key is None):
        return "--parent-tls-cert and --parent-tls-key go together"
    if args.parent_tls_cert is not None and args.parent_tls_ca is None:
        return "--parent-tls-cert needs --parent-tls-ca"
    return None


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> int:
    """Run until ``stop`` is set."""
    metrics = AggregatorMetrics()
    policy = SenderPolicy(args.children or frozenset(), args.max_child_weight)
    service = AggregatorService(
        AggregatorConfig(
            name=args.name,
            ttl=args.ttl,
            feature_names=args.features,
            recompute_interval=args.recompute_interval,
            max_senders=args.max_senders,
            checkpoint_path=args.checkpoint,
            checkpoint_interval=args.checkpoint_interval,
            policy=policy,
        ),
        metrics,
    )
    await service.start()
    tls = ServerTls(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    server: grpc.aio.Server | None = None
    streams = OpenStreams()
    merger: Merger | None = None
    # 0 stands for the CPUs this process may use, so the documented default is machine-free.
    workers = args.workers or len(os.sched_getaffinity(0))
    try:
        if workers > 1:
            merger = Merger(
                service,
                args.listen,
                workers,
                WorkerConfig(
                    tls=tls,
                    max_message_bytes=args.max_message_bytes,
                    max_concurrent_rpcs=args.max_concurrent_rpcs or None,
                    log_level=args.log_level,
                    log_format=args.log_format,
                    event_loop=args.event_loop,
                    policy=policy,
                ),
            )
            port = await merger.start()
        else:
            server, port = await start_grpc_server(
                service,
                args.listen,
                tls=tls,
                max_message_bytes=args.max_message_bytes,
                max_concurrent_rpcs=args.max_concurrent_rpcs or None,
                streams=streams,
            )
            metrics.workers.set(1)
    except (OSError, RuntimeError, ValueError) as exc:
        log.error("cannot start the gRPC server", extra={"listen": args.listen, "error": str(exc)})
        print(f"carico aggregator: cannot serve on {args.listen}: {exc}", file=sys.stderr)
        await service.stop()
        return 1
    ops_host, ops_port = args.ops_listen
    ops = await start_ops_server(
        ops_host, ops_port, metrics.registry, healthy=merger.health if merger else None
    )
    link: ParentLink | None = None
    link_task: asyncio.Task[None] | None = None
    if args.parent:
        client_tls = (
            ClientTls(args.parent_tls_ca, args.parent_tls_cert, args.parent_tls_key)
            if args.parent_tls_ca
            else None
        )
        link = ParentLink(
            service,
            args.parent,
            tls=client_tls,
            interval=args.parent_interval,
            timeout=args.parent_timeout,
        )
        link_task = asyncio.create_task(link.run())
    log.info(
        "serving",
        extra={
            "grpc_port": port,
            "ops_port": ops.port,
            "aggregator": args.name,
            "parent": args.parent,
            "workers": workers,
        },
    )
    code = 0
    try:
        waits = {asyncio.create_task(stop.wait())}
        if merger is not None:
            waits.add(asyncio.create_task(merger.failed.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if merger is not None and merger.failed.is_set():
            print("carico aggregator: worker processes keep failing, stopping", file=sys.stderr)
            code = 1
    finally:
        log.info("stopping")
        if link_task is not None and link is not None:
            link_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await link_task
            await link.close()
        if server is not None:
            await stop_grpc_server(server, streams, 2.0)
        if merger is not None:
            await merger.stop()
        await service.stop()
        await ops.close()
        log.info("stopped", extra={"checkpoint": str(args.checkpoint) if args.checkpoint else None})
    return code


async def _main(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await serve(args, stop)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    problem = _check(args)
    if problem is not None:
        print(f"carico aggregator: {problem}", file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=event_loop_factory(args.event_loop)) as runner:
            return runner.run(_main(args))
    except ValueError as exc:  # unreadable TLS files and the like
        print(f"carico aggregator: {exc}", file=sys.stderr)
        return 2
