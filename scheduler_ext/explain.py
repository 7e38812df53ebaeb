"""The "why" memory: the last filter and prioritize decisions per pod, bounded.

Design: docs/architecture.md#observability.

Each entry keeps the encoded decision (the reply bytes when they are small, a names-only summary
otherwise), so recording costs nothing beyond what the reply already cost and memory is bounded both
by the number of pods and by total bytes — the bodies, the pod keys and a fixed overhead per entry
(``ENTRY_BYTES``), so that the bound holds whatever the decisions or names weigh; the least
recently decided pods are dropped first.
Decoding happens only when someone asks (``GET /api/v1/explain``), and so does the encoding of a
per-class filter's costs on every candidate (``record_deferred``: the fits are kept, reckoned at
a fixed size per node). Pure: times are passed in.
Neighbours: ``service`` records, ``http_server`` serves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

# What a pod's entry costs beside its bodies: the key string's header, the dict of verbs and the
# Entry objects with their bytes headers (measured with sys.getsizeof, rounded up).
POD_BYTES = 400
ENTRY_BYTES = 200


@dataclass(frozen=True, slots=True)
class Entry:
    verb: str
    at: float  # wall-clock time of the decision (unix seconds)
    body: bytes  # JSON: a FilterResultNames-shaped object or a HostPriority list
    exempt: str | None
    # A body encoded only when asked for (``record_deferred``), with what it is reckoned to cost.
    render: Callable[[], bytes] | None = None
    size: int = 0

    def json(self) -> Any:
        return msgspec.json.decode(self.render() if self.render is not None else self.body)


class ExplainLog:
    def __init__(self, max_pods: int = 1024, max_bytes: int = 64 << 20) -> None:
        self.max_pods = max_pods
        self.max_bytes = max_bytes
        self._pods: OrderedDict[str, dict[str, Entry]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._pods)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def record(self, pod: str, verb: str, at: float, body: bytes, exempt: str | None) -> None:
        self._keep(pod, Entry(verb, at, body, exempt))

    def record_deferred(
        self, pod: str, verb: str, at: float, render: Callable[[], bytes], size: int
    ) -> None:
        """Keep a decision encoded only if someone asks: ``render`` makes its body, ``size``
        is what it is reckoned to hold meanwhile (counted against ``max_bytes``)."""
        self._keep(pod, Entry(verb, at, b"", None, render, size))

    def _keep(self, pod: str, entry: Entry) -> None:
        verb = entry.verb
        cost = self._cost(entry)
        if self.max_pods <= 0 or POD_BYTES + len(pod) + cost > self.max_bytes:
            return
        entries = self._pods.get(pod)
        if entries is None:
            entries = self._pods[pod] = {}
            self._bytes += POD_BYTES + len(pod)
        else:
            self._pods.move_to_end(pod)
            old = entries.get(verb)
            if old is not None:
                self._bytes -= self._cost(old)
        entries[verb] = entry
        self._bytes += cost
        while len(self._pods) > self.max_pods or self._bytes > self.max_bytes:
            key, dropped = self._pods.popitem(last=False)
            self._bytes -= POD_BYTES + len(key)
            self._bytes -= sum(self._cost(e) for e in dropped.values())

    @staticmethod
    def _cost(entry: Entry) -> int:
        exempt = entry.exempt
        return ENTRY_BYTES + len(entry.body) + entry.size + (len(exempt) if exempt else 0)

    def explain(self, pod: str, now: float) -> dict[str, Any] | None:
        entries = self._pods.get(pod)
        if entries is None:
            return None
        out: dict[str, Any] = {"pod": pod}
        f = entries.get("filter")
        if f is not None:
            body = f.json()
            out["filter"] = {
                "at": f.at,
                "age_seconds": round(max(0.0, now - f.at), 3),
                "exempt": f.exempt,
                "passed": body.get("NodeNames") or [],
                "failed": body.get("FailedNodes") or {},
                "unresolvable": body.get("FailedAndUnresolvableNodes") or {},
            }
        c = entries.get("class")
        if c is not None:
            out["class"] = c.json()
        s = entries.get("shape")
        if s is not None:
            # per node: utilisation per feature (%) once the pod runs, and the shape's score
            out["shape"] = s.json()
        p = entries.get("prioritize")
        if p is not None:
            scores = p.json()
            ranked = sorted(scores, key=lambda s: (-s["Score"], s["Host"]))
            out["prioritize"] = {
                "at": p.at,
                "age_seconds": round(max(0.0, now - p.at), 3),
                "exempt": p.exempt,
                "scores": {s["Host"]: s["Score"] for s in ranked},
            }
        return out
