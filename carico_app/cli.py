"""The ``carico`` command line: one entry point, one subcommand per component.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``.
Only the chosen subcommand's module is imported, so ``carico agent`` never loads OR-Tools and
``carico --help`` stays fast. A component that is not built yet says so and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from carico import __version__

# name -> (module implementing it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "agent": ("agent.cli", "run the node agent (from /proc to a capacity report)"),
    "aggregator": ("aggregator.cli", "run the gRPC model aggregator"),
    "extender": ("scheduler_ext.cli", "run the kube-scheduler extender"),
    "repack": ("carico_app.repack_cmd", "compute a CP-SAT repacking plan for a cluster"),
    "repack-bench": ("carico_app.repack_bench", "benchmark the repacker on generated instances"),
    "simulate": ("carico_app.simulate.cli", "compare schedulers on simulated workloads"),
    "demo": ("carico_app.demo", "run the whole stack on this machine"),
    "certs": ("carico_app.certs", "write mTLS certificates for the components"),
}


class NotBuiltError(Exception):
    """The module behind a subcommand does not exist yet."""


def _load(name: str) -> ModuleType:
    module_name = COMMANDS[name][0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a missing command module means "not built"; a missing dependency is a real error.
        if exc.name is not None and module_name.startswith(exc.name):
            raise NotBuiltError(
                f"carico {name}: not available yet ({module_name} is not built)"
            ) from exc
        raise


def build_parser(chosen: str | None) -> tuple[argparse.ArgumentParser, ModuleType | None]:
    parser = argparse.ArgumentParser(
        prog="carico", description="Carico: telemetry-driven scheduling for Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"carico {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    module = None
    for name, (_, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = _load(name)
            module.add_arguments(sub_parser)
    return parser, module


BROKEN_PIPE = 141  # 128 + SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_list if not a.startswith("-")), None)
    try:
        parser, module = build_parser(chosen if chosen in COMMANDS else None)
    except NotBuiltError as exc:
        print(exc, file=sys.stderr)
        return 2
    args = parser.parse_args(args_list)
    assert module is not None  # argparse exits on an unknown or missing command
    try:
        result: int = module.run(args)
        sys.stdout.flush()  # a pipe closed early fails here at the latest, not at exit
    except BrokenPipeError:
        # the reader left early (`carico repack ... | head`): no traceback; stdout now goes to
        # /dev/null so that the interpreter's last flush does not fail again, and the status is
        # the one a shell reports for a process ended by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    return result


if __name__ == "__main__":
    sys.exit(main())
