"""A real Kubernetes control plane on 127.0.0.1 for the e2e tier.

Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built by
``make e2e-bin`` from the pinned modules in gobuild/) on free loopback ports, with a throw-away PKI
(e2e_certs.py), static-token authentication, RBAC authorization and a kubeconfig. kube-scheduler
runs the KubeSchedulerConfiguration from :mod:`carico_app.schedconfig`, the same definition the
deploy manifests use; :meth:`ControlPlane.restart_scheduler` swaps its extenders without
restarting the rest.

No process outlives the test run: every component runs in its own process group and is stopped
with SIGTERM then SIGKILL to the whole group by :meth:`ControlPlane.stop`, which the fixtures call
in their finalizers, which an ``atexit`` hook calls for anything still alive, and which the kernel
does for us (``PR_SET_PDEATHSIG``) if the Python process itself is killed outright.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import kubernetes
from e2e_certs import CertPaths, write_pki

from carico_app import schedconfig

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tests" / "e2e" / "gobuild" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SERVICE_CIDR = "10.0.0.0/24"
# Go clients (scheduler, controller-manager) get limits well above what the tests generate, so
# the control plane's client-side throttling never shapes a result.
CLIENT_QPS, CLIENT_BURST = 500.0, 1000


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, found or started."""


def locate_binaries() -> Path:
    """The directory holding the four binaries for the current pins.

    ``CARICO_E2E_BIN`` overrides the lookup. Otherwise build.sh names the directory (keyed on the
    pinned module files and the Go version); it must have been built by ``make e2e-bin``.
    """
    override = os.environ.get("CARICO_E2E_BIN")
    if override:
        directory = Path(override)
    else:
        if shutil.which("go") is None:
            raise ControlPlaneError(
                "the Go toolchain ('go' on PATH) is required by the e2e tier: it builds etcd and "
                "the Kubernetes control plane from pinned Go modules (make e2e-bin)"
            )
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--print-dir"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise ControlPlaneError(f"{BUILD_SCRIPT} --print-dir failed: {done.stderr.strip()}")
        directory = Path(done.stdout.strip())
        if not (directory / ".complete").exists():
            raise ControlPlaneError(
                f"control-plane binaries for the current pins are not built ({directory}): "
                "run `make e2e-bin` (make test and make e2e do it first)"
            )
    missing = [b for b in BINARIES if not os.access(directory / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{directory} lacks {', '.join(missing)}: run `make e2e-bin`")
    return directory


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports; sockets are held together so the kernel gives distinct ones."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: the kernel SIGKILLs it if pytest dies.

    Only a foreign call happens here (no imports, no locks), which keeps preexec_fn safe enough
    with the fake kubelet's threads running in the parent. The signal follows the *thread* that
    started the process, so start control planes from a thread that outlives them (the main
    thread, as pytest fixtures do).
    """
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Component:
    """One control-plane process in its own process group, logging to a file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_offset = 0  # where this start's output begins in the shared log file

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.log_offset = log.tell()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: killpg reaches any child it forks
                preexec_fn=_die_with_parent,
            )
        _LIVE.add(self)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        # Only this start's output: a restarted component appends to the same file, and the
        # previous process's last words would otherwise read as the new one's failure.
        try:
            with self.log_path.open("rb") as log:
                log.seek(self.log_offset)
                text = log.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the group, SIGKILL it after ``grace_s``; reap the leader."""
        proc = self.proc
        _LIVE.discard(self)
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait_s)
        # The leader is reaped; sweep the group for anything it left (the aggregator's worker
        # processes and multiprocessing's resource tracker, which ignores SIGTERM and leaves
        # only when the leader's pipe closes), and wait until SIGKILL has taken effect: on a
        # loaded machine a killed process can still run for a moment after killpg returns.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)


_LIVE: set[Component] = set()


@atexit.register
def _stop_everything() -> None:
    for component in list(_LIVE):
        component.stop(grace_s=1.0)


def _https_get(url: str, ca: Path, token: str | None, timeout_s: float = 5.0) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1."""

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path | None = None,
        *,
        extenders: Sequence[schedconfig.ExtenderConfig] = (),
        controllers: str = "*",
        node_monitor_grace_s: float | None = None,
        verbosity: int = 1,
    ) -> None:
        """``node_monitor_grace_s``: how long a node may go without a heartbeat before the node
        lifecycle controller marks it Unknown (None keeps kube-controller-manager's default)."""
        self.workdir = workdir
        self.bin_dir = bin_dir if bin_dir is not None else locate_binaries()
        self.controllers = controllers
        self.node_monitor_grace_s = node_monitor_grace_s
        self.verbosity = verbosity
        self.extenders = tuple(extenders)
        self.profiles: tuple[str, ...] = (schedconfig.DEFAULT_PROFILE, schedconfig.CARICO_PROFILE)
        self.log_dir = workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.certs: CertPaths = write_pki(workdir / "pki")
        self.admin_token = secrets.token_hex(16)
        (
            self.etcd_port,
            self.etcd_peer_port,
            self.apiserver_port,
            self.kcm_port,
            self.scheduler_port,
        ) = free_ports(5)
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.components: dict[str, Component] = {}

    # ---- configuration files -------------------------------------------------------------
    def _write_files(self) -> None:
        # token,user,uid,"groups": the admin is in system:masters, which RBAC always allows.
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.admin_token},carico-e2e-admin,1,"system:masters"\n')
        tokens.chmod(0o600)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.certs.ca_crt),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.admin_token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }
        # JSON is YAML: client-go and the Python client both read it.
        self.kubeconfig.write_text(json.dumps(kubeconfig, indent=2))
        self.kubeconfig.chmod(0o600)

    def _scheduler_config_path(self) -> Path:
        cfg = schedconfig.scheduler_configuration(
            kubeconfig=str(self.kubeconfig),
            extenders=self.extenders,
            qps=CLIENT_QPS,
            burst=CLIENT_BURST,
            leader_elect=False,
            profiles=self.profiles,
        )
        path = self.workdir / "kube-scheduler.json"
        path.write_text(schedconfig.render(cfg))
        return path

    # ---- components ----------------------------------------------------------------------
    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _serving_flags(self) -> list[str]:
        return [
            "--bind-address=127.0.0.1",
            f"--tls-cert-file={self.certs.serving_crt}",
            f"--tls-private-key-file={self.certs.serving_key}",
        ]

    def _etcd(self) -> Component:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        return Component(
            "etcd",
            [
                self._bin("etcd"),
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                # Throw-away data: no fsync keeps a loaded shared disk out of the latencies.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            self.log_dir,
        )

    def _apiserver(self) -> Component:
        return Component(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                f"--secure-port={self.apiserver_port}",
                *self._serving_flags(),
                # Loopback is not a valid Endpoints address, so the kubernetes service keeps no
                # endpoints (nothing in-cluster needs to reach the API through it here).
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--client-ca-file={self.certs.ca_crt}",
                # Front-proxy settings are published for the other components' delegated
                # authentication; without them each logs a missing-CA error every few seconds.
                f"--requestheader-client-ca-file={self.certs.ca_crt}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={self.server}",
                f"--service-account-key-file={self.certs.sa_pub}",
                f"--service-account-signing-key-file={self.certs.sa_key}",
                "--allow-privileged=true",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                f"--v={self.verbosity}",
            ],
            self.log_dir,
        )

    def _controller_manager(self) -> Component:
        return Component(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--secure-port={self.kcm_port}",
                *self._serving_flags(),
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--leader-elect=false",
                f"--controllers={self.controllers}",
                *(
                    [f"--node-monitor-grace-period={self.node_monitor_grace_s:g}s"]
                    if self.node_monitor_grace_s is not None
                    else []
                ),
                f"--service-account-private-key-file={self.certs.sa_key}",
                f"--root-ca-file={self.certs.ca_crt}",
                f"--kube-api-qps={CLIENT_QPS:g}",
                f"--kube-api-burst={CLIENT_BURST}",
                f"--v={self.verbosity}",
            ],
            self.log_dir,
        )

    def _scheduler(self) -> Component:
        return Component(
            "kube-scheduler",
            [
                self._bin("kube-scheduler"),
                f"--config={self._scheduler_config_path()}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--secure-port={self.scheduler_port}",
                *self._serving_flags(),
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
                f"--v={self.verbosity}",
            ],
            self.log_dir,
        )

    # ---- readiness -----------------------------------------------------------------------
    def _wait(
        self, component: Component, probe: Callable[[], bool], what: str, timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if not component.alive():
                raise ControlPlaneError(
                    f"{component.name} exited while waiting for {what}; log tail:\n"
                    f"{component.log_tail()}"
                )
            try:
                if probe():
                    return
            except (OSError, urllib.error.URLError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{component.name}: {what} not reached in {timeout_s:.0f} s; log tail:\n"
                    f"{component.log_tail()}"
                )
            time.sleep(0.2)

    def _probe(self, port: int, path: str, token: str | None) -> Callable[[], bool]:
        url = f"https://127.0.0.1:{port}{path}"
        return lambda: _https_get(url, self.certs.ca_crt, token)[0] == 200

    def _etcd_healthy(self) -> bool:
        url = f"http://127.0.0.1:{self.etcd_port}/health"
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(json.loads(response.read()).get("health") == "true")

    def _start(self, component: Component) -> Component:
        self.components[component.name] = component
        component.start()
        return component

    def start(self, timeout_s: float = 180.0) -> None:
        """Start all four and return once each reports ready. Stops what it started on failure.

        The timeout is generous on purpose: on a loaded 2-core machine the API server alone can
        take tens of seconds to install its APIs and run its post-start hooks.
        """
        try:
            self._write_files()
            etcd = self._start(self._etcd())
            self._wait(etcd, self._etcd_healthy, "/health", timeout_s)
            api = self._start(self._apiserver())
            self._wait(
                api,
                self._probe(self.apiserver_port, "/readyz", self.admin_token),
                "/readyz",
                timeout_s,
            )
            kcm = self._start(self._controller_manager())
            sched = self._start(self._scheduler())
            self._wait(kcm, self._probe(self.kcm_port, "/healthz", None), "/healthz", timeout_s)
            self._wait(
                sched, self._probe(self.scheduler_port, "/readyz", None), "/readyz", timeout_s
            )
        except BaseException:
            self.stop()
            raise

    def restart_scheduler(
        self,
        extenders: Sequence[schedconfig.ExtenderConfig],
        timeout_s: float = 120.0,
        *,
        profiles: Sequence[str] | None = None,
    ) -> None:
        """Run kube-scheduler again with other extenders (the rest keeps running); ``profiles``
        replaces its scheduler names (default: both, as at start), e.g. ``default-scheduler``
        alone while another scheduler serves ``carico-scheduler``."""
        old = self.components.pop("kube-scheduler", None)
        if old is not None:
            old.stop()
        self.extenders = tuple(extenders)
        self.profiles = (
            tuple(profiles)
            if profiles is not None
            else (schedconfig.DEFAULT_PROFILE, schedconfig.CARICO_PROFILE)
        )
        # A port from free_ports() is only free when it is picked: another process on the
        # machine can bind it before kube-scheduler does, which then exits at once. A fresh
        # port on a second or third try makes that race harmless; a real failure still raises.
        for attempt in range(3):
            self.scheduler_port = free_ports(1)[0]
            sched = self._start(self._scheduler())
            try:
                self._wait(
                    sched, self._probe(self.scheduler_port, "/readyz", None), "/readyz", timeout_s
                )
                return
            except ControlPlaneError:
                if sched.alive() or attempt == 2:
                    raise
                self.components.pop("kube-scheduler", None)

    def kill_and_restart(self, name: str, timeout_s: float = 120.0) -> None:
        """SIGKILL ``etcd`` or ``kube-apiserver`` (no graceful shutdown, as in a crash) and start
        it again on the same ports and data; returns once it reports ready. The other
        components and every client reconnect by themselves (the chaos soak's fault)."""
        component = self.components[name]
        if component.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.proc.pid, signal.SIGKILL)
        component.stop(grace_s=0.0)  # reaps the group
        component.start()
        if name == "etcd":
            self._wait(component, self._etcd_healthy, "/health", timeout_s)
        elif name == "kube-apiserver":
            probe = self._probe(self.apiserver_port, "/readyz", self.admin_token)
            self._wait(component, probe, "/readyz", timeout_s)
        else:
            raise ValueError(f"kill_and_restart serves etcd and kube-apiserver, not {name}")

    def stop_scheduler(self) -> None:
        """Stop the session's kube-scheduler (``restart_scheduler`` brings it back), so that a
        test can run another scheduler for the same profiles without the two racing."""
        old = self.components.pop("kube-scheduler", None)
        if old is not None:
            old.stop()

    def stop(self) -> None:
        """Stop in reverse order of dependency; safe to call more than once."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            component = self.components.get(name)
            if component is not None:
                component.stop()

    def pids(self) -> dict[str, int]:
        return {n: c.pid for n, c in self.components.items() if c.pid is not None}

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- clients -------------------------------------------------------------------------
    def api_client(self, pool_size: int = 32) -> kubernetes.client.ApiClient:
        """An official-client ApiClient as the admin. The Python client has no QPS limiter; its
        connection pool (default 4) is raised so concurrent callers do not queue on it."""
        cfg = kubernetes.client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.certs.ca_crt)
        cfg.api_key = {"authorization": f"Bearer {self.admin_token}"}
        cfg.connection_pool_maxsize = pool_size
        return kubernetes.client.ApiClient(cfg)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` names a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid`` (from /proc, so it sees grandchildren)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def wait_for(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    interval_s: float = 0.2,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll ``predicate`` until true; raise AssertionError naming ``what`` on timeout, with
    ``detail()`` (what the last poll saw) when given.

    Timeouts in the e2e tier are liveness bounds, not measurements: they are set far above the
    expected time so that a loaded 2-core machine cannot make a correct run fail.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            seen = f"; last seen: {detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{seen}")
        time.sleep(interval_s)


__all__ = [
    "BINARIES",
    "Component",
    "ControlPlane",
    "ControlPlaneError",
    "free_ports",
    "group_members",
    "locate_binaries",
    "pid_alive",
    "wait_for",
]
