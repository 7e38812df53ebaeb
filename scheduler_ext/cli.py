"""``carico extender``: the kube-scheduler extender with its capacity stream and reservation ledger.

Starts the gRPC ``CapacityIngest`` server, the HTTP server (extender verbs, JSON API, ops), the
pod watch that keeps the reservation ledger and, unless ``--repack-mode off``, the repacker
(``repack.service``); ``--no-kube`` replaces the API server with an in-memory cluster (bindings are
recorded, nothing else is needed). Every flag has a ``CARICO_*``
environment equivalent. Neighbours: ``service``, ``http_server``, ``grpc_server``, ``kube``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from carico.cliargs import (
    EVENT_LOOPS,
    add_env_argument,
    add_env_flag,
    event_loop_factory,
    non_negative_float,
    non_negative_int,
    port,
    positive_float,
    positive_int,
)
from carico.logs import add_logging_arguments, configure_logging
from carico.pods import DEFAULT_EXCLUDED_NAMESPACES, DEFAULT_MANAGED_SCHEDULERS
from carico.tls import grpc_server_credentials, server_ssl_context
from repack.problem.goal_spec import GOALS, Limits
from scheduler_ext.capacity import DEFAULT_MAX_NODES, DEFAULT_THRESHOLD
from scheduler_ext.cluster import Cluster, InMemoryCluster, OnEvent, OnList
from scheduler_ext.grpc_server import start_grpc
from scheduler_ext.http_server import DEFAULT_MAX_BODY, DEFAULT_PREFIX, build_app, start_http
from scheduler_ext.ledger import StaleData
from scheduler_ext.repack.service import (
    MODES,
    PlanRunner,
    RepackService,
    RepackSettings,
    RepackSource,
)
from scheduler_ext.service import ExtenderService, PodWatch, Settings
from scheduler_ext.shape import DEFAULT_WEIGHTS, ScoreShape, parse_shape, parse_weights

log = logging.getLogger("scheduler_ext")


def http_host(host: str | None, tls: bool) -> str:
    """The HTTP listen address: the one given, else every address with TLS and loopback without
    (the extender verbs carry no authentication of their own: docs/architecture.md#security).

    >>> http_host(None, False), http_host(None, True), http_host("10.0.0.5", False)
    ('127.0.0.1', '0.0.0.0', '10.0.0.5')
    """
    if host:
        return host
    return "0.0.0.0" if tls else "127.0.0.1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    net = parser.add_argument_group("listening")
    add_env_argument(
        net,
        "--host",
        help="HTTP listen address; unset: 0.0.0.0 with --tls-cert, else 127.0.0.1 (plain HTTP "
        "stays on loopback unless an address is given)",
    )
    add_env_argument(net, "--port", type=port, default=8888, help="HTTP port (0: any free)")
    add_env_argument(
        net,
        "--prefix",
        default=DEFAULT_PREFIX,
        help="URL prefix of the extender verbs (kube-scheduler's urlPrefix path)",
    )
    add_env_argument(
        net,
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY,
        help="largest accepted request body; larger requests get 413",
    )
    add_env_argument(net, "--grpc-host", default="0.0.0.0", help="CapacityIngest listen address")
    add_env_argument(
        net, "--grpc-port", type=port, default=9090, help="CapacityIngest port (0: any free)"
    )

    tls = parser.add_argument_group("TLS")
    add_env_argument(tls, "--tls-cert", help="serve HTTPS with this certificate (PEM)")
    add_env_argument(tls, "--tls-key", help="private key of --tls-cert (PEM)")
    add_env_argument(
        tls,
        "--tls-client-ca",
        help="require HTTPS clients (kube-scheduler's tlsConfig certFile) to present a "
        "certificate signed by this CA",
    )
    add_env_argument(tls, "--grpc-tls-cert", help="serve gRPC over TLS with this certificate")
    add_env_argument(tls, "--grpc-tls-key", help="private key of --grpc-tls-cert")
    add_env_argument(
        tls,
        "--grpc-tls-client-ca",
        help="require agent client certificates signed by this CA (mTLS)",
    )

    rules = parser.add_argument_group("decisions")
    add_env_argument(
        rules,
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="a node passes the filter when this many pods of the incoming pod's class fit "
        "(avail - reserved for a node without per-class data)",
    )
    add_env_argument(
        rules,
        "--stale-after",
        type=positive_float,
        default=10.0,
        help="seconds without a report after which a node's data is stale",
    )
    add_env_argument(
        rules,
        "--stale-policy",
        default=StaleData.FAIL_OPEN.value,
        choices=[p.value for p in StaleData],
        help="stale or missing data: fail-open passes the node with score 0, fail-closed fails it",
    )
    add_env_argument(
        rules,
        "--score-shape",
        default="",
        type=_shape_text,
        help="prioritize by this shape of each node's measured utilisation once the pod runs, "
        "as kube-scheduler's RequestedToCapacityRatio points: utilisation:score pairs, "
        "comma-separated, utilisation 0..100 (percent of the node's full level) strictly "
        "increasing, score 0..10; 0:0,100:10 packs, 0:10,100:0 spreads. Empty (the default): "
        "spread on the room left, scaled so the roomiest node scores 10 "
        "(docs/architecture.md#score-shape)",
    )
    add_env_argument(
        rules,
        "--score-weights",
        default=",".join(f"{k}={v}" for k, v in DEFAULT_WEIGHTS.items()),
        type=_weights_text,
        help="per-feature weights 1..100 of --score-shape, feature=weight comma-separated; "
        "features not named do not count",
    )
    add_env_argument(
        rules,
        "--excluded-namespaces",
        default=",".join(sorted(DEFAULT_EXCLUDED_NAMESPACES)),
        help="comma-separated namespaces whose pods pass every decision untouched",
    )
    add_env_argument(
        rules,
        "--managed-schedulers",
        default=",".join(sorted(DEFAULT_MANAGED_SCHEDULERS)),
        help="comma-separated spec.schedulerName values whose pods Carico decides for; pods of "
        "other profiles pass every verb untouched (kube-scheduler sends them too). "
        "Empty: manage every pod",
    )
    add_env_argument(
        rules,
        "--reservation-ttl",
        type=positive_float,
        default=300.0,
        help="seconds after which a reservation is dropped if the pod watch said nothing",
    )
    add_env_argument(
        rules,
        "--forget-after",
        type=positive_float,
        default=3600.0,
        help="seconds without a report after which a node is dropped from the table "
        "(deleted nodes); until then it is only stale",
    )
    add_env_argument(
        rules,
        "--explain-pods",
        type=int,
        default=1024,
        help="pods whose last decisions /api/v1/explain remembers",
    )
    add_env_argument(
        rules,
        "--max-nodes",
        type=positive_int,
        default=DEFAULT_MAX_NODES,
        help="nodes tracked at most (with a report or a reservation); reports and binds naming "
        "a further node are refused, so that no client can make the extender grow without end",
    )

    repack = parser.add_argument_group("repacking (docs/architecture.md#repack-execution)")
    add_env_argument(
        repack,
        "--repack-mode",
        default="dry-run",
        choices=list(MODES),
        help="dry-run: compute, log and show plans, change nothing; apply: also execute them; "
        "off: no repacker",
    )
    add_env_argument(
        repack,
        "--repack-debounce",
        type=non_negative_float,
        default=30.0,
        help="seconds a pod of the managed schedulers must stay Unschedulable before it "
        "triggers a repack",
    )
    add_env_argument(
        repack,
        "--repack-cooldown",
        type=non_negative_float,
        default=60.0,
        help="seconds after a repack run before the next automatic one; a cluster state "
        "already solved is never solved again",
    )
    add_env_argument(
        repack,
        "--repack-time-limit",
        type=positive_float,
        default=10.0,
        help="solve time budget of one repack run, seconds (POST /repack may ask for another)",
    )
    add_env_argument(
        repack,
        "--repack-workers",
        type=non_negative_int,
        default=0,
        help="CP-SAT search workers of a repack solve (0: every core of the machine; set it to "
        "the container's CPU limit so a solve does not crowd out kube-scheduler)",
    )
    # The balancing engine (docs/architecture.md#balancing); defaults as goal_spec.Limits.
    add_env_argument(
        repack,
        "--repack-balance-goal",
        default="balance",
        choices=list(GOALS),
        help="goal of the periodic balancing runs: balance (each node's mix of use), "
        "defragment (the largest free block) or consolidate (free whole nodes)",
    )
    add_env_argument(
        repack,
        "--repack-balance-period",
        type=non_negative_float,
        default=0.0,
        help="seconds between periodic balancing runs (0: only on demand, POST /repack with "
        '{"mode": goal}); a cluster state already balanced is not solved again',
    )
    add_env_argument(
        repack,
        "--repack-balance-max-moves",
        type=non_negative_int,
        default=Limits.max_moves,
        help="most pods one balancing plan moves",
    )
    add_env_argument(
        repack,
        "--repack-balance-max-share",
        type=positive_float,
        default=Limits.max_share,
        help="most nodes one balancing plan touches, as a share of the cluster (rounded up, "
        "at least 2)",
    )
    add_env_argument(
        repack,
        "--repack-balance-min-gain",
        type=non_negative_float,
        default=None,
        help="least gain worth a balancing plan (default per goal: balance 0.05 of the "
        "imbalance, defragment 0.05 of the largest node, consolidate 1 node)",
    )
    # Apply mode's executor (scheduler_ext/repack/executor.py); defaults as ExecutorOptions.
    for flag, default, what in (
        ("--repack-plan-timeout", 600.0, "a whole plan may take in apply mode before it aborts"),
        (
            "--repack-step-timeout",
            180.0,
            "one step may take (eviction, pod gone, replacement bound)",
        ),
        ("--repack-blocked-timeout", 120.0, "evictions refused with 429 may pause one step"),
    ):
        add_env_argument(repack, flag, type=positive_float, default=default, help=f"seconds {what}")

    kube = parser.add_argument_group("cluster")
    add_env_flag(
        kube,
        "--no-kube",
        help="run without an API server: bindings go to an in-memory cluster",
    )
    add_env_argument(
        kube, "--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)"
    )
    add_env_argument(
        kube,
        "--api-workers",
        type=int,
        default=16,
        help="connections for bindings and threads for the rarer API calls (evictions, lists)",
    )
    add_env_argument(
        parser,
        "--event-loop",
        default="uvloop",
        choices=list(EVENT_LOOPS),
        help="event loop implementation: uvloop (libuv, less CPU per request) or the stdlib's",
    )
    add_logging_arguments(parser)


def _shape_text(text: str) -> str:
    """A --score-shape value, checked (the points are parsed again into the settings)."""
    if text.strip():
        try:
            parse_shape(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _weights_text(text: str) -> str:
    try:
        parse_weights(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def settings_from(args: argparse.Namespace) -> Settings:
    namespaces = frozenset(n.strip() for n in args.excluded_namespaces.split(",") if n.strip())
    managed = frozenset(n.strip() for n in args.managed_schedulers.split(",") if n.strip())
    return Settings(
        managed_schedulers=managed,
        threshold=args.threshold,
        stale_after=args.stale_after,
        stale_policy=StaleData(args.stale_policy),
        excluded_namespaces=namespaces,
        reservation_ttl=args.reservation_ttl,
        forget_after=args.forget_after,
        explain_pods=args.explain_pods,
        max_nodes=args.max_nodes,
        score_shape=ScoreShape.parse(args.score_shape, args.score_weights)
        if args.score_shape.strip()
        else None,
    )


def repack_settings_from(args: argparse.Namespace, settings: Settings) -> RepackSettings:
    return RepackSettings(
        mode=args.repack_mode,
        debounce=args.repack_debounce,
        cooldown=args.repack_cooldown,
        time_limit=args.repack_time_limit,
        workers=args.repack_workers,
        max_time_limit=max(args.repack_time_limit, RepackSettings.max_time_limit),
        excluded_namespaces=settings.excluded_namespaces,
        managed_schedulers=settings.managed_schedulers,
        balance_goal=args.repack_balance_goal,
        balance_period=args.repack_balance_period,
        balance_limits=Limits(
            max_moves=args.repack_balance_max_moves,
            max_share=min(1.0, args.repack_balance_max_share),
            min_gain=args.repack_balance_min_gain,
        ),
    )


def plan_runner(
    args: argparse.Namespace, service: ExtenderService, cluster: Cluster
) -> PlanRunner | None:
    """The executor that ``--repack-mode apply`` hands each checked plan to (None otherwise:
    dry-run needs none). It evicts through ``cluster`` and steers pods with the service's slots."""
    if args.repack_mode != "apply":
        return None
    from scheduler_ext.repack.executor import ApplyCluster, ExecutorOptions, PlanExecutor

    if not isinstance(cluster, ApplyCluster):
        raise ValueError("this cluster cannot evict pods; --repack-mode apply needs one that can")

    options = ExecutorOptions(
        plan_timeout=args.repack_plan_timeout,
        step_timeout=args.repack_step_timeout,
        blocked_timeout=args.repack_blocked_timeout,
    )
    return PlanExecutor(
        cluster,
        service.slots,
        options,
        excluded_namespaces=service.settings.excluded_namespaces,
    )


def make_repack(
    args: argparse.Namespace, service: ExtenderService, cluster: Cluster
) -> RepackService | None:
    """The repacker for ``--repack-mode`` (None when off); ValueError when it cannot run."""
    settings = repack_settings_from(args, service.settings)
    if settings.mode == "off":
        return None
    if not isinstance(cluster, RepackSource):
        raise ValueError("this cluster cannot be listed for repacking; use --repack-mode off")
    table = service.table

    def footprints() -> dict[str, tuple[float, float]]:
        # the fleet's medians of what the agents measured, per workload class
        summary = table.fleet_summary(service.clock())
        return {name: (f.cpu, f.memory) for name, f in summary.classes.items()}

    return RepackService(
        settings,
        cluster.list_for_repack,
        service.metrics,
        runner=plan_runner(args, service, cluster),
        footprints=footprints,
    )


def _check_pairs(args: argparse.Namespace) -> str | None:
    if bool(args.tls_cert) != bool(args.tls_key):
        return "--tls-cert and --tls-key go together"
    if bool(args.grpc_tls_cert) != bool(args.grpc_tls_key):
        return "--grpc-tls-cert and --grpc-tls-key go together"
    if args.tls_client_ca and not args.tls_cert:
        return "--tls-client-ca needs --tls-cert and --tls-key"
    if args.grpc_tls_client_ca and not args.grpc_tls_cert:
        return "--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key"
    if args.max_body_bytes <= 0:
        return "--max-body-bytes must be positive"
    return None


async def serve(args: argparse.Namespace, cluster: Cluster | None = None) -> int:
    if cluster is None:
        if args.no_kube:
            cluster = InMemoryCluster()
        else:
            from scheduler_ext.kube import KubernetesCluster

            try:
                cluster = KubernetesCluster(args.kubeconfig, workers=args.api_workers)
            except Exception as exc:  # the client raises its own ConfigException, files errors...
                raise ValueError(
                    f"cannot load Kubernetes credentials ({exc}); "
                    "give --kubeconfig, run in a pod, or use --no-kube"
                ) from exc
    service = ExtenderService(cluster, settings_from(args))
    try:
        repack = make_repack(args, service, cluster)
    except ValueError:
        await cluster.close()
        raise
    ssl_context = (
        server_ssl_context(args.tls_cert, args.tls_key, args.tls_client_ca)
        if args.tls_cert
        else None
    )
    grpc_creds = (
        grpc_server_credentials(args.grpc_tls_cert, args.grpc_tls_key, args.grpc_tls_client_ca)
        if args.grpc_tls_cert
        else None
    )
    grpc_server = await start_grpc(service, f"{args.grpc_host}:{args.grpc_port}", grpc_creds)
    service.readiness.capacity_listening = True
    app = build_app(service, prefix=args.prefix, max_body=args.max_body_bytes, repack=repack)
    host = http_host(args.host, bool(args.tls_cert))
    http = await start_http(app, host, args.port, ssl_context)
    scheme = "https" if ssl_context else "http"
    print(
        f"carico extender: {scheme}://{host}:{http.port}{args.prefix.rstrip('/')}"
        f" · gRPC CapacityIngest on {args.grpc_host}:{grpc_server.port}"
        f"{' (TLS)' if grpc_creds else ''} · {'in-memory cluster' if args.no_kube else 'kube'}"
        f" · repack {args.repack_mode}",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    pod_watch: PodWatch | None = None
    if repack is not None:
        # One watch of every Pending pod feeds the ledger and the repack trigger: two would each
        # get an event for every binding (docs/architecture.md#pod-watches).
        assert isinstance(cluster, RepackSource)
        on_list, on_event = repack.on_unscheduled_list, repack.on_unscheduled_event
        source = cluster

        def pod_watch(ledger_list: OnList, ledger_event: OnEvent) -> Coroutine[Any, Any, None]:
            return source.run_pending_watch(ledger_list, ledger_event, on_list, on_event)

    background = asyncio.create_task(
        service.run_background(pod_watch=pod_watch), name="extender-background"
    )
    stopper = asyncio.create_task(stop.wait())
    tasks = {background, stopper}
    if repack is not None:
        tasks.add(asyncio.create_task(repack.run_background(None), name="repack-background"))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done - {stopper}:
            task.result()
        return 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if repack is not None:
            await repack.close()
        await http.close()
        await grpc_server.close()
        await cluster.close()


# How long a thread may hold the GIL while another waits for it (Python's default: 5 ms). gRPC's
# poller thread takes the GIL for every capacity report; at the default, a request from
# kube-scheduler arriving meanwhile could wait up to 5 ms for the event loop, twice per pod
# (filter, prioritize). At 1,000 nodes reporting every 5 s this cut kube-scheduler's throughput
# from 108 to about 75 pods/s; at 0.5 ms it stays at 108 (docs/benchmarks.md#throughput).
SWITCH_INTERVAL_S = 0.0005


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    problem = _check_pairs(args)
    if problem:
        print(f"carico extender: {problem}", file=sys.stderr)
        return 2
    # The modules loaded so far live as long as the process: keep them out of the collector's
    # generations, so collections triggered by request garbage do not walk them again and again.
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        with asyncio.Runner(loop_factory=event_loop_factory(args.event_loop)) as runner:
            return runner.run(serve(args))
    except (ValueError, OSError) as exc:
        print(f"carico extender: {exc}", file=sys.stderr)
        return 1
