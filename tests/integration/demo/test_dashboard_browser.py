"""The dashboard in a real headless browser (Debian's Chromium driven by Selenium) against a running
``carico demo``: rows appear for every node, values update, the global model's expected-workload
vector shows, an explained decision shows, and a node whose agent is stopped turns stale.

Chromium comes from ``make browser`` (``make test`` runs it first). Without it this test fails with
that instruction rather than skipping: a dashboard nobody has loaded is not tested.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Generous waits for a loaded 2-core machine; they bound how long a failure takes to show, they
# are not what the test measures.
WAIT = 60.0


def _wait(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # the page is mid-redraw: an element went away under us
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


@pytest.fixture
def demo() -> Iterator[dict[str, Any]]:
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "carico_app.cli", "demo", "--nodes", "2", "--stale-after", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "CARICO_TEST_MARKER": marker},
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
    nodes_line = proc.stdout.readline()
    found = re.search(r"(\S+) \(this machine, pid (\d+)\)", nodes_line)
    assert url.startswith("http://127.0.0.1:") and found, (url, nodes_line)
    try:
        yield {"url": url, "real_node": found.group(1), "real_pid": int(found.group(2))}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail(f"{CHROMIUM} and {CHROMEDRIVER} are needed: run `make browser` (as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="carico-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1400,1300",
        ):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        try:
            yield driver
        finally:
            driver.quit()


# Read in one script call: the page redraws its rows at every poll, so element handles kept
# across several calls would go stale under the test.
ROWS_JS = """
const rows = {};
for (const tr of document.querySelectorAll('#nodes tbody tr[data-node]')) {
  const cells = {row: tr.className};
  for (const td of tr.querySelectorAll('td')) cells[td.className] = td.textContent;
  rows[tr.dataset.node] = cells;
}
return rows;
"""


def _rows(driver: Any) -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = driver.execute_script(ROWS_JS)
    return rows


WORKLOAD_JS = """
const box = document.getElementById('global');
if (box.className !== 'fresh') return null;
const out = {};
for (const tr of box.querySelectorAll('#workload tr[data-feature]')) {
  const bar = tr.querySelector('.fill');
  if (!bar || !bar.style.width) return null;
  out[tr.dataset.feature] = tr.querySelector('td.value').textContent;
}
return Object.keys(out).length ? out : null;
"""


def _workload(driver: Any) -> dict[str, str] | None:
    found: dict[str, str] | None = driver.execute_script(WORKLOAD_JS)
    if found and all(re.fullmatch(r"\d+\.\d{3}", v) for v in found.values()):
        return found
    return None


def test_dashboard_shows_live_nodes_and_marks_a_stopped_one_stale(
    demo: dict[str, Any], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    real = demo["real_node"]
    expected = {"sim-1", "sim-2", real}
    browser.get(demo["url"])
    assert "Carico" in browser.title

    def all_reporting() -> dict[str, dict[str, str]] | None:
        rows = _rows(browser)
        ok = set(rows) == expected and all(
            re.fullmatch(r"-?\d+\.\d+", r["avail"]) and r["row"] == "fresh" for r in rows.values()
        )
        return rows if ok else None

    first = _wait("a fresh row with a number for every node", all_reporting)
    assert set(first) == expected
    # The simulated nodes' agents report per class and the table says the filter decides them
    # so, their one-cost avail carrying a note that it does not decide; the real node's agent
    # runs without the API (--no-kube), knows no pod's class and is decided by avail.
    decided = {n: r["decided"] for n, r in first.items()}
    assert decided == {"sim-1": "per class", "sim-2": "per class", real: "avail"}, first
    notes = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#nodes tbody tr[data-node]')]"
        ".map((tr) => [tr.dataset.node, tr.querySelector('td.avail').title]))"
    )
    assert "not used" in notes["sim-1"] and notes[real] == "", notes

    # Live: the page polls, so the rows change without a reload (data ages move every report).
    def changed() -> bool:
        now = _rows(browser)
        return any(
            now[n]["age"] != first[n]["age"] or now[n]["avail"] != first[n]["avail"]
            for n in expected
            if n in now
        )

    _wait("the node table to update", changed)
    charts = browser.execute_script(
        "return [...document.querySelectorAll('#charts .chart')].map((c) => c.dataset.node)"
    )
    assert set(charts) == expected
    # The global model's expected-workload vector: one bar per feature, a number in [0, √2].
    workload = _wait("the global model's expected-workload vector", lambda: _workload(browser))
    assert set(workload) == {"cpu", "memory"}
    assert all(0 <= float(v) <= 2**0.5 for v in workload.values()), workload
    assert any(float(v) > 0 for v in workload.values()), workload
    assert _wait(
        "the repack panel",
        lambda: browser.find_element(By.ID, "repack").text == "repacker not connected",
    )

    # The explain view for a pod the demo workload has scheduled.
    box = browser.find_element(By.ID, "explain-pod")
    box.send_keys("demo/pod-00000")
    browser.find_element(By.CSS_SELECTOR, "#explain-form button").click()
    explained = _wait(
        "an explained decision", lambda: "passed" in browser.find_element(By.ID, "explain").text
    )
    assert explained

    # Stop the real node's agent: its row must turn stale and say how it is handled.
    os.kill(demo["real_pid"], signal.SIGTERM)

    def real_is_stale() -> bool:
        row = _rows(browser).get(real)
        return row is not None and row["row"] == "stale" and "STALE" in row["flags"]

    _wait(f"{real} to turn stale", real_is_stale)
    row = _rows(browser)[real]
    assert "fail-open" in row["flags"]
    assert all(_rows(browser)[n]["row"] == "fresh" for n in ("sim-1", "sim-2"))
    browser.save_screenshot(os.path.join(tempfile.gettempdir(), "carico-dashboard-test.png"))

    errors = [
        e
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and "repack/plans" not in e["message"]
    ]
    assert errors == []
