"""``carico agent``: the node agent's flags (each also an environment variable) and its start-up.

``carico agent --standalone`` runs the whole pipeline on this machine without any server and prints
one JSON object per report to stdout. Otherwise the agent exchanges its model with ``--aggregator``,
streams capacity reports to ``--extender`` and counts its node's pods with a Kubernetes API watch
(unless ``--no-kube``).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys

from carico.cliargs import (
    add_env_argument,
    add_env_flag,
    non_negative_float,
    port,
    positive_float,
    positive_int,
)
from carico.logs import add_logging_arguments, configure_logging

log = logging.getLogger("agent")

DEFAULT_METRICS_PORT = 9464


def _single_threaded_blas() -> None:
    """One BLAS thread unless the operator says otherwise; must run before numpy is imported.

    The agent's linear algebra is on d×d matrices with d ≤ 5, far below what a second thread could
    speed up, while OpenBLAS starts one thread (with its own buffers) per core when it loads: on a
    2-core host that was a quarter of the agent's start-up CPU, and on a large node it is dozens of
    idle threads in every DaemonSet pod.
    """
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")


def _level(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def _features(text: str) -> tuple[str, ...]:
    from agent.telemetry import parse_features

    try:
        return parse_features(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Building the parser is the first thing ``carico agent`` does, and the defaults below come
    # from the pipeline's own configuration, whose module loads numpy: set BLAS up before that.
    _single_threaded_blas()
    from agent.pipeline import PipelineConfig
    from agent.proc_source import DEFAULT_POD_USAGE_INTERVAL
    from agent.report_gate import DEFAULT_KEEPALIVE_S
    from agent.service import ServiceConfig

    pipe = PipelineConfig()
    svc = ServiceConfig(node="")
    parser.epilog = (
        "Every flag can also be set with the environment variable named after it; --node-name "
        "also falls back to NODE_NAME (the downward API), then to the host name."
    )
    g = parser.add_argument_group("node and telemetry")
    add_env_argument(g, "--node-name", default="", help="this node's name", metavar="NAME")
    add_env_argument(
        g, "--proc-root", default="/proc", help="procfs to read (the host's /proc in a pod)"
    )
    add_env_argument(
        g,
        "--features",
        default="cpu,memory",
        type=_features,
        help="comma-separated features: cpu, memory, cpu_pressure, memory_pressure, io_pressure",
    )
    add_env_argument(
        g, "--sample-hz", default=pipe.sample_hz, type=positive_float, help="sampling rate"
    )
    add_env_argument(
        g,
        "--batch",
        default=pipe.batch,
        type=positive_int,
        help="samples per batch (one model update)",
    )
    add_env_argument(
        g,
        "--half-life",
        default=pipe.half_life_s,
        type=positive_float,
        help="seconds after which old telemetry weighs half in the local model",
    )
    add_env_argument(
        g, "--k-max", default=pipe.k_max, type=positive_float, help="upper clamp of the signal k"
    )
    add_env_argument(
        g,
        "--churn-hold",
        default=pipe.hold_s,
        type=non_negative_float,
        help="seconds estimation halts after the last pod event",
    )
    add_env_argument(
        g,
        "--full-level",
        default=pipe.full_level,
        type=_level,
        help="level of a feature (0-1] at which the node counts as full: lower keeps pods "
        "faster, higher packs more per node",
    )
    add_env_argument(
        g,
        "--max-classes",
        default=pipe.max_classes,
        type=positive_int,
        help="workload classes whose cost the node keeps (least recently seen dropped)",
    )
    add_env_argument(
        g,
        "--prior-per-pod-cost",
        default=pipe.prior_per_pod_cost,
        type=positive_float,
        help="per-pod cost before the node learns its own and without a fleet prior",
    )
    add_env_argument(
        g,
        "--max-pods",
        default=pipe.max_pods,
        type=positive_int,
        help="the most pods the node runs (the kubelet's --max-pods): the one-cost avail "
        "never passes it",
    )

    g = parser.add_argument_group("modes")
    add_env_flag(
        g, "--standalone", help="run on this machine without servers; print JSON reports to stdout"
    )
    add_env_flag(
        g,
        "--no-kube",
        help="do not watch pods in Kubernetes (pod count from the source or 0)",
    )
    add_env_argument(g, "--kubeconfig", default="", help="kubeconfig file (default: in-cluster)")
    add_env_argument(
        g,
        "--churn-hint",
        default=svc.churn_hint,
        choices=["none", "cgroup"],
        help="fast churn hint: 'cgroup' watches pod cgroups with inotify (the pod watch stays "
        "authoritative)",
    )
    add_env_argument(
        g,
        "--cgroup-root",
        default=svc.cgroup_root,
        help="cgroup filesystem holding the kubepods tree (the host's, in a pod): each pod's own "
        "usage for the per-class costs, and --churn-hint cgroup",
    )
    add_env_argument(
        g,
        "--pod-usage-interval",
        default=DEFAULT_POD_USAGE_INTERVAL,
        type=non_negative_float,
        help="seconds between reads of the pods' cgroup usage (0: never; then no per-class data)",
    )
    add_env_argument(
        g,
        "--duration",
        default=0.0,
        type=non_negative_float,
        help="stop after this many seconds (0: run until stopped)",
    )

    g = parser.add_argument_group("servers")
    add_env_argument(g, "--aggregator", default="", help="aggregator gRPC address host:port")
    add_env_argument(g, "--extender", default="", help="extender gRPC address host:port")
    add_env_argument(
        g,
        "--exchange-interval",
        default=svc.exchange_interval,
        type=positive_float,
        help="seconds between model exchanges with the aggregator",
    )
    add_env_argument(
        g,
        "--report-keepalive",
        default=DEFAULT_KEEPALIVE_S,
        type=non_negative_float,
        help="seconds after which an unchanged capacity report is sent anyway (a changed one goes "
        "at once); keep it well below the extender's --stale-after; 0 sends every report",
    )
    add_env_argument(
        g,
        "--global-ttl",
        default=pipe.global_ttl_s,
        type=positive_float,
        help="seconds a global model is merged after it arrived; older, the local model is used",
    )
    add_env_argument(
        g,
        "--rpc-timeout",
        default=svc.rpc_timeout,
        type=positive_float,
        help="seconds per gRPC call/connect",
    )
    add_env_argument(
        g,
        "--backoff-max",
        default=svc.backoff_max,
        type=positive_float,
        help="longest retry delay, seconds",
    )
    add_env_argument(g, "--tls-ca", default="", help="CA bundle: use TLS to the servers")
    add_env_argument(g, "--tls-cert", default="", help="client certificate for mTLS")
    add_env_argument(g, "--tls-key", default="", help="client key for mTLS")

    g = parser.add_argument_group("operations")
    add_env_argument(
        g, "--metrics-host", default=svc.metrics_host, help="address of /metrics, /healthz"
    )
    add_env_argument(
        g,
        "--metrics-port",
        default=None,
        type=port,
        help=f"port of /metrics, /healthz, /readyz; 0 turns them off "
        f"(unset: {DEFAULT_METRICS_PORT}, or off with --standalone)",
    )
    add_logging_arguments(parser)


class Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler; a KeyboardInterrupt so that asyncio.run cancels cleanly."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _node_name(args: argparse.Namespace) -> str:
    return args.node_name or os.environ.get("NODE_NAME", "") or socket.gethostname()


def run(args: argparse.Namespace) -> int:
    # SIGTERM (a pod being stopped) ends the agent like Ctrl-C: tasks cancelled, servers closed.
    # The handler is installed first and everything after it sits inside the try, so a signal
    # arriving at any point (even while a log line is written) ends the agent cleanly.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run(args)
    except Terminated:
        return 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # standalone output piped into a reader that quit (| head)
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    if args.standalone and (args.aggregator or args.extender):
        print(
            "carico agent: --standalone runs without servers; drop --aggregator/--extender",
            file=sys.stderr,
        )
        return 2
    if bool(args.tls_cert) != bool(args.tls_key):
        print("carico agent: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    _single_threaded_blas()
    from agent.cgroup_watch import HintUnavailable
    from agent.pipeline import PipelineConfig
    from agent.proc_source import ProcSource
    from agent.report_gate import GateConfig
    from agent.service import AgentService, ServiceConfig

    metrics_port = args.metrics_port
    if metrics_port is None:
        metrics_port = 0 if args.standalone else DEFAULT_METRICS_PORT
    kube = not (args.standalone or args.no_kube)
    node = _node_name(args)
    if kube and not (args.node_name or os.environ.get("NODE_NAME")):
        print(
            "carico agent: the pod watch needs --node-name or NODE_NAME (or use --no-kube)",
            file=sys.stderr,
        )
        return 2
    try:
        pipeline = PipelineConfig(
            sample_hz=args.sample_hz,
            batch=args.batch,
            half_life_s=args.half_life,
            k_max=args.k_max,
            hold_s=args.churn_hold,
            prior_per_pod_cost=args.prior_per_pod_cost,
            global_ttl_s=args.global_ttl,
            full_level=args.full_level,
            max_classes=args.max_classes,
            max_pods=args.max_pods,
        )
    except ValueError as exc:
        print(f"carico agent: {exc}", file=sys.stderr)
        return 2
    if not os.path.isdir(args.proc_root):
        print(f"carico agent: --proc-root {args.proc_root} is not a directory", file=sys.stderr)
        return 2
    config = ServiceConfig(
        node=node,
        pipeline=pipeline,
        standalone=args.standalone,
        aggregator=args.aggregator,
        extender=args.extender,
        exchange_interval=args.exchange_interval,
        rpc_timeout=args.rpc_timeout,
        backoff_max=args.backoff_max,
        metrics_host=args.metrics_host,
        metrics_port=metrics_port,
        duration=args.duration,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        kube=kube,
        kubeconfig=args.kubeconfig,
        churn_hint=args.churn_hint,
        cgroup_root=args.cgroup_root,
        report_gate=GateConfig(keepalive_s=args.report_keepalive),
    )
    source = ProcSource(
        args.proc_root,
        args.features,
        cgroup_root=args.cgroup_root,
        pod_usage_interval=args.pod_usage_interval,
    )
    service = AgentService(config, source, out=sys.stdout if args.standalone else None)
    if not (args.standalone or args.aggregator or args.extender):
        log.warning("no --aggregator and no --extender: computing capacity without reporting it")
    # Everything loaded so far lives as long as the process: keep it out of the cyclic GC's scans.
    gc.freeze()
    try:
        if args.standalone and not metrics_port and args.churn_hint == "none":
            return service.run_blocking()
        import asyncio

        return asyncio.run(service.run())
    except (ValueError, HintUnavailable) as exc:  # bad TLS files, an unavailable churn hint
        print(f"carico agent: {exc}", file=sys.stderr)
        return 2
