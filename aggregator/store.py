"""The aggregator's node-model store and the global model: pure, clock passed in.

Design: docs/architecture.md#aggregation.

The store keeps each sender's **latest** model (a node that reports often replaces its own entry,
it never outweighs the others) and computes the global model as the weighted mean of their second
moments, ``C = Σ wᵢ Cᵢ / Σ wᵢ`` with wᵢ = 1 for an agent and wᵢ = N for a child aggregator standing
for N nodes, so that a tree of aggregators gives the same mean as a flat one. Entries older than a
TTL (by the aggregator's own clock, never the sender's) drop out; entries are kept in order of
arrival so that expiry only looks at the expired ones (should the clock step back, an entry may
outlive its TTL until those that arrived before it have expired).

The global factor is the eigendecomposition of that d×d mean: U is d×d and σᵢ = √λᵢ, i.e. full
rank, so the mean is represented exactly and a parent aggregator averaging children's factors gets
the flat mean to rounding. Each entry's weighted moment wᵢCᵢ lives in a row of one array, written
only when the entry changes; a recompute then costs one sum over N·d² numbers plus a d×d eigh.

The global view also holds the fleet's per-class medians (one vote per sender and class, at most
``MAX_FLEET_CLASSES`` classes: those learned by the most senders), from ``classes``: each changed
entry's classes are turned into arrays with its moment, and the summary itself is a few numpy
sorts. A learning node's footprints change with every report, so the summary is rebuilt only when
a sender's classes changed and at most once per ``class_interval`` (1 s; the agents fetch it every
few seconds); in between the last one is served.

Neighbours: ``validate`` builds the entries, ``service`` drives this store, ``checkpoint`` saves
and restores its entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from aggregator.classes import ClassVotes
from aggregator.validate import MAX_FLEET_CLASSES, NodeEntry, ValidationError
from carico.footprint import EMPTY_FLEET, FleetSummary
from carico.pods import Requests
from carico.subspace import FloatArray

OUTCOME_ACCEPTED = "accepted"
OUTCOME_STALE = "stale"  # older than the entry already held for that node: ignored
OUTCOME_OVER_CAPACITY = "over_capacity"  # a new sender while the store is full: refused


@dataclass(frozen=True)
class GlobalView:
    """The global model at one moment."""

    u: FloatArray  # d×d, orthonormal columns
    sigma: FloatArray  # d, descending
    feature_names: tuple[str, ...]
    contributing_nodes: int  # leaf nodes represented (Σ weights)
    senders: int  # entries (agents and child aggregators)
    median_per_pod_cost: float | None
    nodes_with_cost: int
    all_costs: FloatArray  # every member's per-pod cost, for forwarding to a parent
    computed_at: float
    # Per class, the median footprint over the senders that learned it, and the fleet's ratios of
    # footprint to requests; with each class's requests (those of its latest sender).
    fleet: FleetSummary = EMPTY_FLEET
    class_requests: Mapping[str, Requests] = field(default_factory=dict)

    def second_moment(self) -> FloatArray:
        scaled = self.u * self.sigma
        result: FloatArray = scaled @ scaled.T
        return result


class ModelStore:
    """Latest model per sender, TTL expiry and the weighted-mean global model."""

    def __init__(
        self,
        ttl: float,
        feature_names: tuple[str, ...] | None = None,
        class_interval: float = 1.0,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        if not class_interval >= 0:
            raise ValueError(f"class_interval must be >= 0, got {class_interval}")
        self.ttl = float(ttl)
        self.class_interval = float(class_interval)
        self._configured_features = feature_names
        self._features = feature_names
        self._entries: dict[str, NodeEntry] = {}
        self._pending: set[str] = set()  # entries whose moment row is not written yet
        self._slot: dict[str, int] = {}
        self._slot_nodes: list[str] = []
        self._moments: FloatArray = np.zeros((0, 0, 0))
        self._weights: FloatArray = np.zeros(0)
        # An agent's per-pod cost (NaN: not known yet) sits in its row; the member costs of a
        # child aggregator (more than one) are kept aside. Both keep the median an O(N) C call.
        self._costs: FloatArray = np.zeros(0)
        self._member_costs: dict[str, tuple[float, ...]] = {}
        self._dirty = False
        # The per-class summary, rebuilt when a sender's classes changed (at most once per
        # class_interval: see the module's docstring).
        self._classes_changed = False
        self._classes_at = -np.inf
        self._votes = ClassVotes()
        self._fleet: FleetSummary = EMPTY_FLEET
        self._class_requests: dict[str, Requests] = {}

    # -- state --------------------------------------------------------------------------------

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        """The feature set every model must have: configured, or learned from the first model."""
        return self._features

    @property
    def dirty(self) -> bool:
        """Whether the global model must be recomputed."""
        return self._dirty

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, node: object) -> bool:
        return node in self._entries

    def entries(self) -> list[NodeEntry]:
        return list(self._entries.values())

    def get(self, node: str) -> NodeEntry | None:
        return self._entries.get(node)

    # -- changes ------------------------------------------------------------------------------

    @property
    def known(self) -> Mapping[str, NodeEntry]:
        """The entries by sender name (a live read-only view)."""
        return self._entries

    def offer(
        self, entry: NodeEntry, feature_names: tuple[str, ...], max_senders: int | None = None
    ) -> str:
        """Keep ``entry`` if it is newer than what ``entry.node`` sent before.

        A report is older when both its sequence number and its timestamp are not above the held
        one's; an agent that restarts (sequence back to 0, later timestamp) is therefore accepted.
        A new sender is refused while ``max_senders`` are held. Raises ``ValidationError`` (and
        changes nothing) on a different feature set.
        """
        if self._features is None:
            self._features = feature_names
        elif feature_names != self._features:
            raise ValidationError(
                f"feature set {list(feature_names)} differs from this aggregator's "
                f"{list(self._features)}"
            )
        held = self._entries.get(entry.node)
        if held is None:
            if max_senders is not None and len(self._entries) >= max_senders:
                return OUTCOME_OVER_CAPACITY
        elif entry.sequence <= held.sequence and entry.sent_at <= held.sent_at:
            return OUTCOME_STALE
        if held is not None:
            del self._entries[entry.node]  # re-insert: the dict stays in order of arrival
        self._entries[entry.node] = entry
        self._pending.add(entry.node)
        self._dirty = True
        return OUTCOME_ACCEPTED

    def expire(self, now: float) -> list[str]:
        """Drop the entries received more than ``ttl`` before ``now``; return their names."""
        cutoff = now - self.ttl
        # Entries are kept in order of arrival, so the expired ones are a prefix: the scan stops
        # at the first live entry instead of visiting all N every second.
        gone = []
        for node, entry in self._entries.items():
            if entry.received_at >= cutoff:
                break
            gone.append(node)
        for node in gone:
            self._remove(node)
        return gone

    def restore(
        self, entries: Iterable[NodeEntry], feature_names: tuple[str, ...], now: float
    ) -> int:
        """Load saved entries (dropping those past the TTL); return how many were kept."""
        kept = 0
        for entry in sorted(entries, key=lambda e: e.received_at):  # keep arrival order
            if entry.received_at >= now - self.ttl and self.offer(entry, feature_names) == (
                OUTCOME_ACCEPTED
            ):
                kept += 1
        return kept

    def _remove(self, node: str) -> None:
        del self._entries[node]
        if self._votes.remove(node):
            self._classes_changed = True
        self._pending.discard(node)
        self._member_costs.pop(node, None)
        self._dirty = True
        if not self._entries and self._configured_features is None:
            self._features = None  # an empty aggregator may learn a new feature set
        slot = self._slot.pop(node, None)
        if slot is None:
            return
        last = len(self._slot_nodes) - 1
        if slot != last:  # move the last row into the hole
            moved = self._slot_nodes[last]
            self._slot_nodes[slot] = moved
            self._slot[moved] = slot
            self._moments[slot] = self._moments[last]
            self._weights[slot] = self._weights[last]
            self._costs[slot] = self._costs[last]
        self._slot_nodes.pop()

    # -- the global model ---------------------------------------------------------------------

    def _flush_pending(self) -> None:
        if not self._pending:
            return
        nodes = list(self._pending)
        self._pending.clear()
        d = self._entries[nodes[0]].d
        needed = len(self._slot_nodes) + sum(1 for n in nodes if n not in self._slot)
        if self._moments.shape[1:] != (d, d):
            self._moments = np.zeros((max(16, needed * 2), d, d))
            self._weights = np.zeros(self._moments.shape[0])
            self._costs = np.full(self._moments.shape[0], np.nan)
        elif needed > self._moments.shape[0]:
            grow = max(needed, 2 * self._moments.shape[0])
            self._moments = np.concatenate(
                (self._moments, np.zeros((grow - len(self._moments), d, d)))
            )
            self._weights = np.concatenate((self._weights, np.zeros(grow - len(self._weights))))
            self._costs = np.concatenate((self._costs, np.full(grow - len(self._costs), np.nan)))
        by_rank: dict[int, list[NodeEntry]] = {}
        votes = self._votes
        for node in nodes:
            entry = self._entries[node]
            if votes.update(node, entry.classes):
                self._classes_changed = True
            by_rank.setdefault(entry.r, []).append(entry)
            if node not in self._slot:
                self._slot[node] = len(self._slot_nodes)
                self._slot_nodes.append(node)
        for r, group in by_rank.items():
            u = np.array([e.u for e in group]).reshape(len(group), d, r)
            sigma = np.array([e.sigma for e in group])
            weight = np.array([float(e.weight) for e in group])
            scaled = u * sigma[:, None, :]
            rows = [self._slot[e.node] for e in group]
            self._moments[rows] = (scaled @ scaled.transpose(0, 2, 1)) * weight[:, None, None]
            self._weights[rows] = weight
            for e, row in zip(group, rows, strict=True):
                if len(e.per_pod_costs) > 1:
                    self._member_costs[e.node] = e.per_pod_costs
                    self._costs[row] = np.nan
                else:
                    self._member_costs.pop(e.node, None)
                    self._costs[row] = e.per_pod_costs[0] if e.per_pod_costs else np.nan

    def _summarise_classes(self, now: float) -> None:
        """Rebuild the per-class summary if a sender's classes changed and it is due."""
        if not self._classes_changed:
            return
        if self._classes_at <= now < self._classes_at + self.class_interval:
            self._dirty = (
                True  # withheld: a later recompute (the next expiry at the latest) does it
            )
            return
        self._classes_changed = False
        self._classes_at = now
        # In order of arrival: a class's requests are those of its latest sender.
        self._fleet, self._class_requests = self._votes.summary(self._entries, MAX_FLEET_CLASSES)

    def compute(self, now: float) -> GlobalView | None:
        """The global model of the entries held now (None when there are none); clears dirty
        (unless a changed per-class summary is withheld until its interval has passed)."""
        self._dirty = False
        self._flush_pending()
        self._summarise_classes(now)
        if not self._entries or self._features is None:
            return None
        n = len(self._slot_nodes)
        total_weight = float(self._weights[:n].sum())
        mean = self._moments[:n].sum(axis=0) / total_weight
        mean = (mean + mean.T) / 2.0  # exact symmetry for eigh
        eigenvalues, vectors = np.linalg.eigh(mean)
        order = np.argsort(eigenvalues)[::-1]
        sigma = np.sqrt(np.clip(eigenvalues[order], 0.0, None))
        u = np.ascontiguousarray(vectors[:, order])
        row_costs = self._costs[:n]
        costs = row_costs[~np.isnan(row_costs)]
        if self._member_costs:
            costs = np.concatenate((costs, *(np.array(c) for c in self._member_costs.values())))
        median = float(np.median(costs)) if len(costs) else None
        return GlobalView(
            u=u,
            sigma=sigma,
            feature_names=self._features,
            contributing_nodes=int(round(total_weight)),
            senders=n,
            median_per_pod_cost=median,
            nodes_with_cost=len(costs),
            all_costs=costs,
            computed_at=now,
            fleet=self._fleet,
            class_requests=self._class_requests,
        )
