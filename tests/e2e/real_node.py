"""One real node for the e2e control plane: containerd, runc and the kubelet on this machine.

:class:`RealNode` starts containerd (with the runc shim, runc and the CNI plugins built by
``gobuild/node-build.sh``) and the kubelet as child processes of the test run, registers the node
with the control plane of e2e_controlplane.py and imports the test images (node_images.py) into
containerd's ``k8s.io`` namespace, where the kubelet's CRI finds them (no registry: pods use
``imagePullPolicy: Never``). Pods run for real: runc containers in their own pod cgroups under
``kubepods`` (cgroupfs driver; cgroup v1 or v2), on a CNI bridge or on the host's network.

State lives under a temporary directory (the workdir: containerd's root, the kubelet's root,
pod logs, CNI) and a short directory under /run (sockets: a unix socket path is limited to 108
bytes, a shim's socket directory to 42; the kubelet's root directory, which holds its plugin
sockets and the pods' volumes, is there too). Cleaning up is as strict as for the control plane: the
kubelet and containerd lead their own process groups and die with the test run (parent-death
signal); :meth:`RealNode.stop` then kills every process left in the pod cgroups and the runc
shims of this node (found by their binary and socket address, never by name alone), unmounts
everything below the node's directories, removes the pod cgroups in every hierarchy, the CNI
bridge, the kubelet's few files outside its root and restores the kernel settings the kubelet
changed. A host runs one real node at a time (a lock under /run); a node whose test run was
killed outright is cleaned up by the next one from the state file it left.

What a kubelet 1.36 needs on these machines (cgroup v1 allowed, cgroupfs, no swap check, a
small eviction threshold, a non-loopback node IP, containerd clamping oom_score_adj) is set in
:meth:`RealNode._kubelet_config` and :meth:`RealNode._containerd_config`, each with its reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
from e2e_controlplane import Component, free_ports, wait_for

REPO = Path(__file__).resolve().parents[2]
NODE_BUILD = REPO / "tests" / "e2e" / "gobuild" / "node-build.sh"
NODE_BINARIES = (
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "kubelet",
    "workload",
    "cni/bridge",
    "cni/host-local",
    "cni/loopback",
)
LOCK_DIR = Path("/run/carico-real-node")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The kubelet's pod tree (cgroupRoot "/" with cgroupsPerQOS), the same in every hierarchy.
KUBEPODS = "kubepods"
BRIDGE = "carico-rn0"
# TEST-NET-2 (RFC 5737): addresses no network routes, for pods that never talk to anything.
POD_SUBNET = "198.51.100.0/24"
# The kernel settings the kubelet sets at start (protectKernelDefaults false); restored on stop.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# What the kubelet and the CNI library write outside the node's directories (paths fixed in
# their sources): removed on stop when this node created them, the files of this node always.
HOST_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet/device-plugins/kubelet.sock"),
    Path("/var/log/containers"),
    Path("/var/lib/cni"),
    Path("/var/lib/cni/results"),
)
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CNI_RESULTS = Path("/var/lib/cni/results")
NETWORK = "carico-real-node"

_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


class RealNodeError(RuntimeError):
    """The real node could not be built, found, started or cleaned up."""


def locate_node_binaries() -> Path:
    """The directory of the node's binaries for the current pins (``make e2e-bin`` builds it);
    ``CARICO_NODE_BIN`` overrides the lookup."""
    override = os.environ.get("CARICO_NODE_BIN")
    if override:
        directory = Path(override)
    else:
        done = subprocess.run(
            ["bash", str(NODE_BUILD), "--print-dir"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RealNodeError(f"{NODE_BUILD} --print-dir failed: {done.stderr.strip()}")
        directory = Path(done.stdout.strip())
        if not (directory / ".complete").exists():
            raise RealNodeError(
                f"the real node's binaries are not built ({directory}): run `make e2e-bin`"
            )
    missing = [b for b in NODE_BINARIES if not os.access(directory / b, os.X_OK)]
    if missing:
        raise RealNodeError(f"{directory} lacks {', '.join(missing)}: run `make e2e-bin`")
    return directory


def node_ip() -> str:
    """The address the node registers with: the kubelet refuses a loopback one, so the host's
    first global-scope IPv4 address (pods on the host's network are reached there)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            address = fields[fields.index("inet") + 1].split("/")[0]
            if not address.startswith("127."):
                return address
    raise RealNodeError("no global IPv4 address for the node (the kubelet refuses loopback)")


# ---- clean-up primitives (each idempotent, each safe on a host without any of it) -----------


def _mounts_below(paths: Iterable[Path]) -> list[str]:
    """Mount points at or below any of ``paths``, deepest first (from this namespace's table)."""
    roots = [str(p.resolve()) for p in paths]
    found: list[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if any(point == r or point.startswith(r + "/") for r in roots):
                found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def unmount_below(paths: Iterable[Path]) -> list[str]:
    """Lazily unmount everything below ``paths`` (overlay rootfs, volumes, network namespaces);
    returns what is still mounted afterwards."""
    paths = list(paths)
    for _ in range(5):
        points = _mounts_below(paths)
        if not points:
            return []
        for point in points:
            if _libc.umount2(point.encode(), _MNT_DETACH) != 0:
                err = ctypes.get_errno()
                if err not in (errno.EINVAL, errno.ENOENT):
                    raise RealNodeError(f"umount {point}: {os.strerror(err)}")
    return _mounts_below(paths)


def _pod_cgroup_dirs() -> list[Path]:
    """The kubepods tree's directories in every hierarchy, deepest first."""
    tops = [d / KUBEPODS for d in CGROUP_ROOT.iterdir() if (d / KUBEPODS).is_dir()]
    if (CGROUP_ROOT / KUBEPODS).is_dir():  # cgroup v2: one unified hierarchy at the root
        tops.append(CGROUP_ROOT / KUBEPODS)
    dirs: list[Path] = []
    for top in tops:
        for parent, subdirs, _ in os.walk(top):
            dirs.extend(Path(parent) / s for s in subdirs)
        dirs.append(top)
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def _cgroup_pids(dirs: Iterable[Path]) -> set[int]:
    pids: set[int] = set()
    for d in dirs:
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
    return pids


def kill_pod_processes(timeout_s: float = 20.0) -> None:
    """SIGKILL every process in the kubepods cgroups (the containers and their runc inits) until
    none is left."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = _cgroup_pids(_pod_cgroup_dirs())
        if not pids:
            return
        if time.monotonic() > deadline:
            raise RealNodeError(f"pod processes survive SIGKILL: {sorted(pids)}")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def remove_pod_cgroups(timeout_s: float = 10.0) -> list[Path]:
    """rmdir the kubepods tree in every hierarchy, deepest first; returns what remains."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for d in _pod_cgroup_dirs():
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left.append(d)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)  # a killed process leaves its cgroup a moment after it is reaped


def processes_of(binary: Path, marker: str) -> list[int]:
    """Live processes running ``binary`` whose command line contains ``marker`` (the shims of one
    containerd: they carry its socket address)."""
    target = str(binary.resolve())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{entry}/exe")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if exe.removesuffix(" (deleted)") == target and marker in cmdline:
            found.append(int(entry))
    return found


def kill_processes(pids: Iterable[int], timeout_s: float = 10.0) -> None:
    pids = list(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in pids):
        if time.monotonic() > deadline:
            raise RealNodeError(f"processes survive SIGKILL: {pids}")
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def delete_link(name: str) -> None:
    if Path(f"/sys/class/net/{name}").exists():
        subprocess.run(["ip", "link", "delete", name], check=False, capture_output=True)


def remove_log_links(workdir: Path) -> None:
    """The kubelet's /var/log/containers symlinks that point into this node's pod logs."""
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(str(workdir)):
                link.unlink()


def clean_up(state: dict[str, Any]) -> list[str]:
    """Undo everything a node with this ``state`` may have left; returns what could not be.

    Order matters: processes first (a live container pins its cgroup and its mounts), then the
    shims, mounts, cgroups, the bridge, the files outside the node's directories, the sysctls.
    """
    problems: list[str] = []
    for pid_key in ("kubelet_pid", "containerd_pid"):
        pid = state.get(pid_key)
        if pid and _state(pid) not in ("X", "Z") and processes_of_pid_match(pid, state):
            with contextlib.suppress(RealNodeError):
                kill_processes([pid])
    try:
        kill_pod_processes()
    except RealNodeError as exc:
        problems.append(str(exc))
    bin_dir, run_dir = Path(state["bin_dir"]), Path(state["run_dir"])
    try:
        kill_processes(processes_of(bin_dir / "containerd-shim-runc-v2", str(run_dir)))
    except RealNodeError as exc:
        problems.append(str(exc))
    workdir = Path(state["workdir"])
    try:
        left = unmount_below([workdir, run_dir])
        if left:
            problems.append(f"still mounted: {left}")
    except RealNodeError as exc:
        problems.append(str(exc))
    left_cgroups = remove_pod_cgroups()
    if left_cgroups:
        problems.append(f"cgroups left: {[str(p) for p in left_cgroups[:5]]}")
    delete_link(BRIDGE)
    remove_log_links(workdir)
    # The CNI library caches each sandbox's results: our network's, and the loopback's of our
    # sandboxes (named by sandbox id, which containerd's state directory lists).
    sandboxes = run_dir / "state" / "io.containerd.grpc.v1.cri" / "sandboxes"
    ids = {d.name for d in sandboxes.iterdir()} if sandboxes.is_dir() else set()
    for result in CNI_RESULTS.glob("*") if CNI_RESULTS.is_dir() else ():
        if result.name.startswith(f"{NETWORK}-") or any(i in result.name for i in ids):
            result.unlink(missing_ok=True)
    for path in sorted(map(Path, state.get("created_outside", [])), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):  # a directory something else now uses stays
            path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    for key, value in state.get("sysctls", {}).items():
        with contextlib.suppress(OSError):
            Path("/proc/sys", key).write_text(value)
    if not _mounts_below([run_dir]):
        shutil.rmtree(run_dir, ignore_errors=True)
    # containerd's content and snapshots (the unpacked images, hundreds of MB); logs stay.
    if not _mounts_below([workdir]):
        shutil.rmtree(workdir / "containerd" / "root", ignore_errors=True)
    return problems


def processes_of_pid_match(pid: int, state: dict[str, Any]) -> bool:
    """``pid`` still runs this node's kubelet or containerd (not a recycled pid)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return False
    return Path(exe).parent == Path(state["bin_dir"]).resolve()


# ---- the node ---------------------------------------------------------------------------------


class RealNode:
    """containerd + kubelet registered as ``name`` with the API server of ``kubeconfig``."""

    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path,
        bin_dir: Path | None = None,
        *,
        name: str = "carico-real-node",
        labels: dict[str, str] | None = None,
        max_pods: int = 110,
        verbosity: int = 1,
    ) -> None:
        self.workdir = workdir.resolve()
        self.kubeconfig = kubeconfig
        self.bin_dir = (bin_dir if bin_dir is not None else locate_node_binaries()).resolve()
        self.name = name
        self.labels = labels or {}
        self.max_pods = max_pods
        self.verbosity = verbosity
        self.log_dir = self.workdir / "logs"
        self.run_dir: Path | None = None
        self.node_ip = node_ip()
        self.kubelet_port, self.healthz_port = free_ports(2)
        self.containerd: Component | None = None
        self.kubelet: Component | None = None
        self._lock: int | None = None
        self._state: dict[str, Any] = {}

    # ---- paths ----------------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / "containerd.sock"

    def _env(self) -> dict[str, str]:
        # containerd starts the shim and ctr its helpers from PATH; runc comes from the config.
        return {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    # ---- configuration ----------------------------------------------------------------------
    def _containerd_config(self) -> str:
        assert self.run_dir is not None
        w, r, b = self.workdir, self.run_dir, self.bin_dir
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        return f"""version = 3
root = "{w}/containerd/root"
state = "{r}/state"
# Only what a kubelet uses: no btrfs/zfs/devmapper snapshotters, no tracing.
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins.'io.containerd.internal.v1.opt']
  path = "{w}/containerd/opt"

[plugins.'io.containerd.shim.v1.manager']
  # A shim's socket directory may be 42 bytes at most.
  socket_dir = "{r}/s"

[{runtime}]
  # root here lacks CAP_SYS_RESOURCE: it may raise oom_score_adj but not lower it, and the
  # sandbox asks for -998; scores are clamped to containerd's own instead of failing the pod.
  restrict_oom_score_adj = true
  # network namespaces are bind-mounted below the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true

[{runtime}.cni]
  bin_dirs = ["{b}/cni"]
  conf_dir = "{w}/cni/net.d"
  max_conf_num = 1

[{runtime}.containerd]
  default_runtime_name = "runc"

[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{runtime}.containerd.runtimes.runc.options]
  BinaryName = "{b}/runc"
  Root = "{r}/runc"
  # No systemd here: the cgroupfs driver, like the kubelet's.
  SystemdCgroup = false

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "carico.local/pause:1"
"""

    def _cni_config(self) -> dict[str, Any]:
        # A bridge of its own with host-local addresses, nothing routed or masqueraded (no
        # iptables needed): the test pods talk to nobody. hostNetwork pods skip CNI altogether.
        return {
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET}]],
                        "dataDir": str(self.workdir / "cni" / "ipam"),
                    },
                }
            ],
        }

    def _kubelet_config(self) -> dict[str, Any]:
        endpoint = f"unix://{self.socket}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # kubelet 1.36 refuses cgroup v1 unless told otherwise (these hosts are v1 hybrids).
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": "/",
            "cgroupsPerQOS": True,
            "failSwapOn": False,
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "podLogsDir": str(self.workdir / "pod-logs"),
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            # Nobody but this test talks to the kubelet's API.
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "maxPods": self.max_pods,
            # A shared disk nearly full must not evict the test pods, nor collect their images.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": False,
            # Status every 2 s (as the fake kubelet beats): the bed's node grace is 20 s.
            "nodeStatusUpdateFrequency": "2s",
            "nodeStatusReportFrequency": "10s",
        }

    def _write_files(self) -> None:
        for d in ("containerd", "cni/net.d", "kubelet", "pod-logs", "logs"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        (self.workdir / "containerd" / "config.toml").write_text(self._containerd_config())
        (self.workdir / "cni" / "net.d" / "10-carico-real-node.conflist").write_text(
            json.dumps(self._cni_config(), indent=2)
        )
        (self.workdir / "kubelet" / "config.json").write_text(
            json.dumps(self._kubelet_config(), indent=2)
        )

    # ---- lock and state ---------------------------------------------------------------------
    def _acquire(self) -> None:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_DIR / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = (
                (LOCK_DIR / "state.json").read_text() if (LOCK_DIR / "state.json").exists() else "?"
            )
            raise RealNodeError(
                f"another real node runs on this host (one at a time: they share the kubepods "
                f"cgroups); its state: {holder}"
            ) from None
        self._lock = fd
        leftover = LOCK_DIR / "state.json"
        if leftover.exists():  # a node whose run was killed before it could clean up
            with contextlib.suppress(ValueError, KeyError, OSError):
                problems = clean_up(json.loads(leftover.read_text()))
                if problems:
                    raise RealNodeError(f"could not clean up a previous real node: {problems}")
            leftover.unlink()
        stray = _cgroup_pids(_pod_cgroup_dirs())
        if stray:
            raise RealNodeError(
                f"processes run in {CGROUP_ROOT}/*/{KUBEPODS} without a real node of this bed "
                f"(another kubelet on this host?): {sorted(stray)[:10]}"
            )

    def _save_state(self) -> None:
        assert self.run_dir is not None
        self._state.update(
            workdir=str(self.workdir),
            run_dir=str(self.run_dir),
            bin_dir=str(self.bin_dir),
            containerd_pid=self.containerd.pid if self.containerd else None,
            kubelet_pid=self.kubelet.pid if self.kubelet else None,
        )
        (LOCK_DIR / "state.json").write_text(json.dumps(self._state))

    def _record_host(self) -> None:
        sysctls = {}
        for key in KUBELET_SYSCTLS:
            with contextlib.suppress(OSError):
                sysctls[key] = Path("/proc/sys", key).read_text().strip()
        self._state["sysctls"] = sysctls
        self._state["created_outside"] = [str(p) for p in HOST_PATHS if not p.exists()]

    # ---- start ------------------------------------------------------------------------------
    def start(self, timeout_s: float = 180.0) -> None:
        """Start containerd, import nothing yet, start the kubelet and wait for the node Ready."""
        self._acquire()
        try:
            self.run_dir = Path(tempfile.mkdtemp(prefix="crn-", dir="/run"))
            self._record_host()
            self._write_files()
            self._save_state()
            self.containerd = Component(
                "containerd",
                [
                    str(self.bin_dir / "containerd"),
                    f"--config={self.workdir / 'containerd' / 'config.toml'}",
                    "--log-level=warn",
                ],
                self.log_dir,
                env=self._env(),
            )
            self.containerd.start()
            self._save_state()
            self._wait(self.containerd, self._containerd_up, "containerd's socket", timeout_s)
        except BaseException:
            self.stop()
            raise

    def start_kubelet(self, timeout_s: float = 180.0) -> None:
        try:
            node_labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
            self.kubelet = Component(
                "kubelet",
                [
                    str(self.bin_dir / "kubelet"),
                    f"--config={self.workdir / 'kubelet' / 'config.json'}",
                    f"--kubeconfig={self.kubeconfig}",
                    # Below /run with the sockets: the kubelet puts its plugin and pod-resources
                    # sockets in its root directory, and a pytest temporary path is too long.
                    f"--root-dir={self.run_dir / 'kubelet'}",
                    f"--cert-dir={self.workdir / 'kubelet' / 'pki'}",
                    f"--hostname-override={self.name}",
                    f"--node-ip={self.node_ip}",
                    *([f"--node-labels={node_labels}"] if node_labels else []),
                    f"--v={self.verbosity}",
                ],
                self.log_dir,
                env=self._env(),
            )
            self.kubelet.start()
            self._save_state()
            self._wait(self.kubelet, self._kubelet_healthy, "the kubelet's /healthz", timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait(self, component: Component, probe: Any, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not probe():
            if not component.alive():
                raise RealNodeError(
                    f"{component.name} exited while waiting for {what}; log tail:\n"
                    f"{component.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RealNodeError(
                    f"{component.name}: {what} not reached in {timeout_s:.0f} s; log tail:\n"
                    f"{component.log_tail()}"
                )
            time.sleep(0.2)

    def _containerd_up(self) -> bool:
        if not self.socket.exists():
            return False
        done = self.ctr("version", check=False)
        return done.returncode == 0

    def _kubelet_healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.healthz_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def wait_ready(self, api: kubernetes.client.ApiClient, timeout_s: float = 120.0) -> None:
        core = kubernetes.client.CoreV1Api(api)

        def ready() -> bool:
            try:
                node = core.read_node(self.name)
            except kubernetes.client.ApiException:
                return False
            conditions = {c.type: c.status for c in node.status.conditions or []}
            return conditions.get("Ready") == "True"

        def detail() -> str:
            try:
                node = core.read_node(self.name)
            except kubernetes.client.ApiException as exc:
                return f"no node ({exc.status}); kubelet log:\n{self.kubelet_log_tail()}"
            conditions = [(c.type, c.status, c.message) for c in node.status.conditions or []]
            return f"{conditions}; kubelet log:\n{self.kubelet_log_tail()}"

        wait_for(ready, timeout_s, f"node {self.name} Ready", detail=detail)

    def kubelet_log_tail(self, lines: int = 20) -> str:
        return self.kubelet.log_tail(lines) if self.kubelet else "(no kubelet)"

    # ---- images -----------------------------------------------------------------------------
    def ctr(
        self, *args: str, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run(
            [str(self.bin_dir / "ctr"), f"--address={self.socket}", "--namespace=k8s.io", *args],
            input=stdin,
            capture_output=True,
            env=self._env(),
            check=False,
            timeout=600,
        )
        if check and done.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)} failed: {done.stderr.decode().strip()}")
        return done

    def import_archive(self, tar: Path) -> None:
        """Import a docker-archive or OCI tar (unpacked for the CRI's overlayfs snapshotter)."""
        self.ctr("images", "import", "--local", "--snapshotter=overlayfs", str(tar))

    def import_oci_layout(self, layout: Path, repository: str) -> None:
        """Import an OCI image layout directory; its tags become ``repository:tag``."""
        tar = self.workdir / f"{layout.name}-{abs(hash(repository))}.tar"
        with tarfile.open(tar, "w") as out:
            for entry in sorted(layout.iterdir()):
                out.add(entry, arcname=entry.name)
        try:
            self.ctr(
                "images",
                "import",
                "--local",
                "--snapshotter=overlayfs",
                f"--base-name={repository}",
                str(tar),
            )
        finally:
            tar.unlink()

    def images(self) -> list[str]:
        out = self.ctr("images", "list", "--quiet").stdout.decode()
        return [line for line in out.splitlines() if line and not line.startswith("sha256:")]

    # ---- inspection -------------------------------------------------------------------------
    def pod_cgroups(self) -> list[Path]:
        return _pod_cgroup_dirs()

    def pod_log(self, namespace: str, pod: str) -> str:
        """The containers' output of a pod, read from the kubelet's pod log files (the API server
        reaches no kubelet here)."""
        texts = []
        for path in sorted((self.workdir / "pod-logs").glob(f"{namespace}_{pod}_*/*/*.log")):
            with contextlib.suppress(OSError):
                for line in path.read_text(errors="replace").splitlines():
                    # CRI log format: <time> <stream> <P|F> <text>
                    parts = line.split(" ", 3)
                    texts.append(parts[3] if len(parts) == 4 else line)
        return "\n".join(texts)

    # ---- stop -------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop the kubelet, every pod and containerd; remove what they left. Returns the
        problems that remain (empty when clean); safe to call more than once."""
        if self.kubelet is not None:
            self.kubelet.stop(grace_s=10.0)
        problems: list[str] = []
        if self._state.get("run_dir"):
            # Pods first, while containerd still runs: its shims then see their tasks end.
            with contextlib.suppress(RealNodeError):
                kill_pod_processes()
            if self.containerd is not None:
                self.containerd.stop(grace_s=10.0)
            problems = clean_up(self._state)
        elif self.containerd is not None:
            self.containerd.stop()
        if self._lock is not None:
            if not problems:
                with contextlib.suppress(FileNotFoundError):
                    (LOCK_DIR / "state.json").unlink()
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = None
        return problems

    def release_lock(self) -> None:
        """Let go of the host's lock without cleaning up, as a killed test run does (tests of the
        clean-up after a crash)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def leftovers(self) -> dict[str, list[str]]:
        """What of this node is still on the host (the teardown test asserts it is nothing)."""
        run_dir = Path(self._state.get("run_dir", "/nonexistent"))
        pids = [
            str(p)
            for p in processes_of(self.bin_dir / "containerd-shim-runc-v2", str(run_dir))
            + processes_of(self.bin_dir / "containerd", str(self.workdir))
            + processes_of(self.bin_dir / "kubelet", str(self.workdir))
        ]
        return {
            "processes": pids,
            "mounts": _mounts_below([self.workdir, run_dir]),
            "cgroups": [str(p) for p in _pod_cgroup_dirs()],
            "links": [BRIDGE] if Path(f"/sys/class/net/{BRIDGE}").exists() else [],
            "host_paths": [p for p in self._state.get("created_outside", []) if Path(p).exists()]
            + [str(p) for p in CNI_RESULTS.glob(f"{NETWORK}-*")],
        }


@contextlib.contextmanager
def running_node(node: RealNode) -> Iterator[RealNode]:
    try:
        node.start()
        yield node
    finally:
        problems = node.stop()
        if problems:
            raise RealNodeError(f"the real node left things behind: {problems}")


__all__ = [
    "RealNode",
    "RealNodeError",
    "clean_up",
    "locate_node_binaries",
    "node_ip",
    "running_node",
]
