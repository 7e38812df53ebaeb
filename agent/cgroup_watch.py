"""An optional fast churn hint: inotify on the kubepods cgroup tree.

Design: docs/architecture.md#pod-counting.

The kubelet creates a cgroup directory for a pod before its containers start and removes it after
they stop, seconds before the API watch reports the pod Running or gone. Watching those
directories lets the agent start the churn hold at once. Off by default (``--churn-hint cgroup``);
enabling it where it cannot work (no inotify, no kubepods tree under ``--cgroup-root``) is a clear
start-up error, never a silent no-op. The API watch stays the authoritative pod count.

Layouts: systemd driver ``kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice`` and
cgroupfs driver ``kubepods/<qos>/pod<uid>`` (Guaranteed pods sit directly under kubepods), on
cgroup v2 at the root or on v1 under a controller such as ``cpu``. Uses asyncinotify (a thin,
maintained ctypes binding of inotify(7) for asyncio).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

log = logging.getLogger(__name__)

KUBEPODS_NAMES = ("kubepods.slice", "kubepods")
V1_CONTROLLERS = ("", "cpu", "cpu,cpuacct", "memory", "systemd", "unified")
QOS_NAMES = (
    "kubepods-burstable.slice",
    "kubepods-besteffort.slice",
    "burstable",
    "besteffort",
)
# kubepods-burstable-pod1b2c..._.slice (uid with '_' for '-') or pod1b2c...-... (cgroupfs)
_POD_DIR = re.compile(r"(?:^|-)pod[0-9a-fA-F][0-9a-fA-F_-]{7,}(?:\.slice)?$")


class HintUnavailable(RuntimeError):
    """The churn hint was asked for but cannot work here."""


def is_pod_cgroup(name: str) -> bool:
    """
    >>> is_pod_cgroup("kubepods-burstable-pod3f1c2a4e_5b6d_4c7e_8f9a_0b1c2d3e4f5a.slice")
    True
    >>> is_pod_cgroup("pod3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a"), is_pod_cgroup("burstable")
    (True, False)
    >>> is_pod_cgroup("cri-containerd-0123456789abcdef.scope")
    False
    """
    return bool(_POD_DIR.search(name))


def locate(cgroup_root: str) -> list[str]:
    """The kubepods directory and its QoS subdirectories under ``cgroup_root``."""
    for controller in V1_CONTROLLERS:
        for name in KUBEPODS_NAMES:
            top = os.path.join(cgroup_root, controller, name)
            if os.path.isdir(top):
                qos = [
                    os.path.join(top, q) for q in QOS_NAMES if os.path.isdir(os.path.join(top, q))
                ]
                return [top, *qos]
    raise HintUnavailable(
        f"--churn-hint cgroup: no kubepods cgroup under {cgroup_root} "
        f"(looked for {'/'.join(KUBEPODS_NAMES)}; mount the host's /sys/fs/cgroup and set "
        "--cgroup-root, or use --churn-hint none)"
    )


class CgroupChurnHint:
    """Calls ``on_churn(name)`` whenever a pod cgroup directory appears or disappears."""

    def __init__(self, cgroup_root: str, on_churn: Callable[[str], None]) -> None:
        self.directories = locate(cgroup_root)
        self._on_churn = on_churn
        self.events = 0
        try:
            from asyncinotify import Inotify, Mask
        except (ImportError, OSError) as exc:  # the binding loads libc's inotify at import
            raise HintUnavailable(f"--churn-hint cgroup: inotify is not available: {exc}") from exc
        try:
            self._inotify = Inotify()
            for directory in self.directories:
                self._inotify.add_watch(directory, Mask.CREATE | Mask.DELETE | Mask.ONLYDIR)
        except OSError as exc:
            raise HintUnavailable(
                f"--churn-hint cgroup: cannot watch {self.directories}: {exc}"
            ) from exc
        self._mask = Mask

    async def run(self) -> None:
        mask = self._mask
        try:
            async for event in self._inotify:
                if event.mask & mask.Q_OVERFLOW:  # events were lost: assume churn
                    self.events += 1
                    self._on_churn("(overflow)")
                elif event.mask & mask.ISDIR and event.name and is_pod_cgroup(str(event.name)):
                    self.events += 1
                    self._on_churn(str(event.name))
        finally:
            self._inotify.close()
