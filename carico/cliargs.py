"""Command-line flags with environment-variable equivalents.

Every flag ``--foo-bar`` of a component can also be set as ``CARICO_FOO_BAR`` (a flag on the command
line wins). The environment value is parsed with the flag's own type and choices, so a bad value
fails at start-up with the flag's name in the message instead of deep inside the service.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

ENV_PREFIX = "CARICO_"


def env_name(flag: str) -> str:
    """``--proc-root`` -> ``CARICO_PROC_ROOT``."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r} (use true/false)")


def add_env_argument(
    parser: argparse.ArgumentParser | Any,
    flag: str,
    *,
    default: Any = None,
    type: Callable[[str], Any] | None = None,
    choices: Sequence[Any] | None = None,
    help: str,
    metavar: str | None = None,
) -> None:
    """Add ``flag`` whose default comes from ``CARICO_<FLAG>`` when that variable is set."""
    env = env_name(flag)
    value = default
    if env in os.environ:
        raw = os.environ[env]
        try:
            value = type(raw) if type is not None else raw
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise SystemExit(f"invalid {env}={raw!r} for {flag}: {exc}") from exc
        if choices is not None and value not in choices:
            raise SystemExit(f"invalid {env}={raw!r} for {flag}: choose from {list(choices)}")
    kwargs: dict[str, Any] = {"type": type} if type is not None else {}
    parser.add_argument(
        flag,
        default=value,
        choices=choices,
        **kwargs,
        metavar=metavar,
        help=f"{help} (env {env}; default: %(default)s)",
    )


def add_env_flag(parser: argparse.ArgumentParser | Any, flag: str, *, help: str) -> None:
    """A switch, off by default, turned on by the flag or by ``CARICO_<FLAG>=true``.

    A plain ``store_true``: argparse's BooleanOptionalAction would read a flag named ``--no-...``
    (such as ``--no-kube``) as "false" and add a confusing ``--no-no-...`` twin.
    """
    env = env_name(flag)
    try:
        default = parse_bool(os.environ.get(env, "false"))
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"invalid {env} for {flag}: {exc}") from exc
    parser.add_argument(flag, action="store_true", default=default, help=f"{help} (env {env})")


# -- argparse ``type=`` validators shared by every component's flags ------------------------


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text}")
    return value


EVENT_LOOPS = ("uvloop", "asyncio")


def event_loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The loop factory of an ``--event-loop`` choice: uvloop (libuv, less CPU per call) or the
    standard library's."""
    if kind == "uvloop":
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    return asyncio.new_event_loop
