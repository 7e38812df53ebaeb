"""The fuzz tier: hypothesis budgets, a count of the inputs tried per surface, real servers.

Two budgets (hypothesis settings profiles): ``fuzz`` keeps the whole tier within about a minute
on two cores and is derandomised, so ``make test`` tries the same inputs every run; ``fuzz-long``
(``CARICO_FUZZ=long``, what ``make fuzz`` sets) tries many more, freshly drawn each run.
``CARICO_FUZZ_EXAMPLES`` overrides the number of examples of the long budget.

Every fuzz test counts the inputs it sends through :func:`tried`; the run ends with a table of
inputs and seconds per surface (collected from the test workers under pytest-xdist).

The servers run on an event loop in a thread of their own (:class:`LoopThread`), so that the
hypothesis tests stay plain functions and talk to them as any client would: over sockets.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from .servers import ErrorRecords, Extender, LoopThread, start_extender, stop_extender

LONG = os.environ.get("CARICO_FUZZ", "") == "long"
_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "fuzz",
    # Derandomised: make test tries the same inputs every run; the seeds below were found and
    # fixed, any new failure comes from a change of the code, not from luck.
    derandomize=True,
    database=None,
    deadline=None,  # real servers on a shared, loaded machine: a deadline would measure noise
    suppress_health_check=_CHECKS,
    max_examples=40,
    print_blob=True,
)
settings.register_profile(
    "fuzz-long",
    derandomize=False,
    deadline=None,
    suppress_health_check=_CHECKS,
    max_examples=int(os.environ.get("CARICO_FUZZ_EXAMPLES", "1500")),
    print_blob=True,
)
PROFILE = settings.get_profile("fuzz-long" if LONG else "fuzz")


def budget(examples: int | None = None) -> settings:
    """The settings of one fuzz test: ``examples`` (its share of the quick budget) in ``make
    test``; the long budget's count under ``make fuzz``."""
    if LONG or examples is None:
        return settings(PROFILE)
    return settings(PROFILE, max_examples=examples)


# -- inputs tried per surface -----------------------------------------------------------------

TRIED: Counter[str] = Counter()
SECONDS: Counter[str] = Counter()
_STARTED = time.monotonic()


def tried(surface: str, n: int = 1) -> None:
    TRIED[surface] += n


@pytest.fixture(autouse=True)
def _time_surface(request: pytest.FixtureRequest) -> Iterator[None]:
    marker = request.node.get_closest_marker("fuzz")
    start = time.monotonic()
    yield
    if marker is not None and marker.args:
        SECONDS[str(marker.args[0])] += time.monotonic() - start


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # a pytest-xdist worker: hand the counts to the controller
        output["fuzz_tried"] = json.dumps([dict(TRIED), dict(SECONDS)])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    raw = getattr(node, "workeroutput", {}).get("fuzz_tried")
    if raw:
        counts, seconds = json.loads(raw)
        TRIED.update(counts)
        SECONDS.update(seconds)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TRIED:
        return
    write = terminalreporter.write_line
    if LONG:
        write(f"fuzz budget: fuzz-long, up to {PROFILE.max_examples} examples per test, random")
    else:
        write("fuzz budget: fuzz, each test's own small budget, derandomised")
    write(f"{'surface':<28} {'inputs':>8} {'seconds':>9}")
    for surface in sorted(TRIED):
        write(f"{surface:<28} {TRIED[surface]:>8} {SECONDS.get(surface, 0.0):>9.1f}")
    write(
        f"{'total':<28} {sum(TRIED.values()):>8} {sum(SECONDS.values()):>9.1f}"
        f"   (wall {time.monotonic() - _STARTED:.1f} s)"
    )


# -- servers on a loop of their own (servers.py) ---------------------------------------------


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def error_log() -> Iterator[ErrorRecords]:
    handler = ErrorRecords()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


@pytest.fixture(scope="module")
def extender(loop_thread: LoopThread, error_log: ErrorRecords) -> Iterator[Extender]:
    ext = loop_thread.run(start_extender(error_log))
    yield ext
    loop_thread.run(stop_extender(ext))
