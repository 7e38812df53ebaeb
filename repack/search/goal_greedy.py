"""The balancing engine's greedy starts, one per goal: the incumbent CP-SAT is hinted with.

* balance: repeated best single moves and two-pod swaps between the most imbalanced nodes
  (the swap idea of the fragmentation article), each step the largest fall of the imbalance per
  pod moved, until no step helps or the bounds are reached;
* consolidate: nodes drained one at a time, fewest pods first, their pods best-fit onto nodes
  already touched where possible, a drain kept only if every pod found room within the bounds;
* defragment: for each of the nodes with the largest free block, its pods moved off largest first
  (best fit elsewhere), keeping the prefix that frees the largest block.

Every result respects fit, eligibility and the run's bounds (``goals.within``). Pure; the clock
is a parameter and the search stops at ``until``. Neighbours: ``problem.goals`` (the measures),
``driver.balance`` (which calls ``greedy``).
"""

from __future__ import annotations

from collections.abc import Callable

from repack.problem.goals import GoalView, block, loads, node_imbalance, uses

Clock = Callable[[], float]
_EPS = 1e-12
_SIDE = 6  # the most imbalanced nodes a balance step moves pods between
_TARGETS = 16  # the nodes leaning furthest either way a balance step may move one pod to


class _State:
    def __init__(self, view: GoalView, where: list[int]) -> None:
        self.view = view
        self.where = where
        self.load = loads(view, where)
        self.cap = view.spec.limits.nodes_cap(view.nodes)
        self.max_moves = view.spec.limits.max_moves
        self.by_node: list[list[int]] = [[] for _ in range(view.nodes)]
        for p, n in enumerate(where):
            self.by_node[n].append(p)
        self.moves = sum(1 for p, n in enumerate(where) if n != view.home[p])
        self.touched = self._touched()

    def _touched(self) -> set[int]:
        out: set[int] = set()
        for p, n in enumerate(self.where):
            if n != self.view.home[p]:
                out.update((n, self.view.home[p]))
        return out

    def on(self, n: int) -> list[int]:
        return self.by_node[n]

    def room(self, p: int, n: int, leaving: int | None = None) -> bool:
        """Pod p fits on node n (with pod ``leaving`` gone from n first)."""
        v = self.view
        if n not in v.eligible[p] or not (v.open[n] or n == v.home[p]):
            return False
        row, alloc = self.load[n], v.alloc[n]
        out = v.req[leaving] if leaving is not None else None
        for r, need in enumerate(v.req[p]):
            have = row[r] - (out[r] if out is not None else 0)
            if need and have + need > alloc[r]:
                return False
        return True

    def moves_after(self, changes: list[tuple[int, int]]) -> int:
        home = self.view.home
        return self.moves + sum((n != home[p]) - (self.where[p] != home[p]) for p, n in changes)

    def allowed(self, changes: list[tuple[int, int]]) -> bool:
        """Within the bounds (the nodes touched counted as if no pod went back home)."""
        if self.moves_after(changes) > self.max_moves:
            return False
        extra = {m for p, n in changes for m in (n, self.where[p], self.view.home[p])}
        extra -= self.touched
        return len(self.touched) + len(extra) <= self.cap or (
            len(self.touched_after(changes)) <= self.cap
        )

    def touched_after(self, changes: list[tuple[int, int]]) -> set[int]:
        saved = list(self.where)
        for p, n in changes:
            self.where[p] = n
        out = self._touched()
        self.where = saved
        return out

    def apply(self, changes: list[tuple[int, int]]) -> None:
        v = self.view
        for p, n in changes:
            old = self.where[p]
            for r, need in enumerate(v.req[p]):
                self.load[old][r] -= need
                self.load[n][r] += need
            self.by_node[old].remove(p)
            self.by_node[n].append(p)
            self.moves += (n != v.home[p]) - (old != v.home[p])
            self.where[p] = n
        self.touched = self._touched()


def greedy(view: GoalView, until: float, clock: Clock) -> list[int]:
    """The goal's greedy placement of the movable pods (``view.home`` when nothing helps)."""
    where = list(view.home)
    if not view.keys or view.spec.limits.max_moves == 0:
        return where
    if view.spec.goal == "balance":
        return _balance(view, where, until, clock)
    if view.spec.goal == "consolidate":
        return _consolidate(view, where, until, clock)
    return _defragment(view, where, until, clock)


def _balance(view: GoalView, where: list[int], until: float, clock: Clock) -> list[int]:
    st = _State(view, where)
    w = view.balance_weights
    use = uses(view, where)
    imb = [node_imbalance(w[n], use[n]) for n in range(view.nodes)]

    def after(n: int, out: int | None, into: int | None) -> float:
        row = list(use[n])
        if out is not None:
            row = [a - b for a, b in zip(row, view.use[out], strict=True)]
        if into is not None:
            row = [a + b for a, b in zip(row, view.use[into], strict=True)]
        return node_imbalance(w[n], row)

    def skew(n: int) -> float:
        # how far the node leans to the first goal resource against its mean (0: no lean)
        rel = [a * b for a, b in zip(w[n], use[n], strict=True) if a > 0]
        return rel[0] - sum(rel) / len(rel) if rel else 0.0

    while clock() < until:
        # the nodes leaning furthest either way (the swap article's two ends), and the most
        # imbalanced ones whatever their lean
        lean = sorted(range(view.nodes), key=skew)
        worst = list(
            dict.fromkeys(
                lean[: _SIDE // 2]
                + lean[-(_SIDE // 2) :]
                + sorted(range(view.nodes), key=lambda n: -imb[n])[:_SIDE]
            )
        )
        targets = list(dict.fromkeys(lean[:_TARGETS] + lean[-_TARGETS:] + worst))
        best: tuple[float, list[tuple[int, int]]] | None = None
        for s in worst:
            for p in list(st.on(s)):
                for t in targets:  # a single move, to a node leaning either way
                    if t == s or not st.room(p, t):
                        continue
                    delta = imb[s] + imb[t] - after(s, p, None) - after(t, None, p)
                    step = [(p, t)]
                    if delta > _EPS and (best is None or delta > best[0]) and st.allowed(step):
                        best = (delta, step)
                for t in worst:  # a swap with a pod of another imbalanced node
                    if t == s:
                        continue
                    for q in list(st.on(t)):
                        if not (st.room(p, t, leaving=q) and st.room(q, s, leaving=p)):
                            continue
                        gain = imb[s] + imb[t] - after(s, p, q) - after(t, q, p)
                        step = [(p, t), (q, s)]
                        added = max(1, st.moves_after(step) - st.moves_after([]))
                        delta = gain / added
                        if delta > _EPS and (best is None or delta > best[0]) and st.allowed(step):
                            best = (delta, step)
        if best is None:
            break
        for p, n in best[1]:
            old = st.where[p]
            use[old] = [a - b for a, b in zip(use[old], view.use[p], strict=True)]
            use[n] = [a + b for a, b in zip(use[n], view.use[p], strict=True)]
        st.apply(best[1])
        imb = [node_imbalance(w[n], use[n]) for n in range(view.nodes)]
    return st.where


def _size(view: GoalView, p: int) -> float:
    """A pod's requests as shares of the largest node, summed over the goal's resources."""
    biggest = view.__dict__.get("_biggest")
    if biggest is None:  # once per view (frozen: kept in its __dict__, like a cached property)
        biggest = view.__dict__["_biggest"] = [
            max(row[r] for row in view.alloc) or 1 for r in range(len(view.resources))
        ]
    return sum(view.req[p][r] / biggest[r] for r in view.measured)


def _best_fit(st: _State, p: int, avoid: set[int], prefer: set[int]) -> int | None:
    """The node with least room left after p lands, among those already touched first."""
    v = st.view
    choices = [n for n in range(v.nodes) if n not in avoid and n != st.where[p] and st.room(p, n)]
    if not choices:
        return None

    def slack(n: int) -> float:
        return sum(
            (v.alloc[n][r] - st.load[n][r] - v.req[p][r]) / (v.alloc[n][r] or 1) for r in v.measured
        )

    return min(choices, key=lambda n: (n not in prefer, slack(n), n))


def _consolidate(view: GoalView, where: list[int], until: float, clock: Clock) -> list[int]:
    st = _State(view, where)
    drained: set[int] = set()
    candidates = [n for n in range(view.nodes) if view.freeable[n] and st.on(n)]
    candidates.sort(key=lambda n: (len(st.on(n)), sum(_size(view, p) for p in st.on(n)), n))
    for c in candidates:
        if clock() >= until:
            break
        trial = _State(view, list(st.where))
        ok = True
        for p in sorted(list(trial.on(c)), key=lambda p: -_size(view, p)):
            prefer = trial.touched
            t = _best_fit(trial, p, drained | {c}, prefer)
            if t is None or not trial.allowed([(p, t)]):
                ok = False
                break
            trial.apply([(p, t)])
        if ok:
            st = trial
            drained.add(c)
    return st.where


def _defragment(view: GoalView, where: list[int], until: float, clock: Clock) -> list[int]:
    start = block(view, where)
    best_where, best_key = list(where), (start, 0)
    base = loads(view, where)
    order = sorted(
        (n for n in range(view.nodes) if view.open[n]),
        key=lambda n: (
            -min((view.alloc[n][r] - base[n][r]) / (view.alloc[n][r] or 1) for r in view.measured)
            if view.measured
            else 0
        ),
    )
    for c in order[:8]:
        if clock() >= until:
            break
        st = _State(view, list(where))
        for p in sorted(list(st.on(c)), key=lambda p: -_size(view, p)):
            t = _best_fit(st, p, {c}, st.touched)
            if t is None or not st.allowed([(p, t)]):
                break
            st.apply([(p, t)])
            key = (block(view, st.where), -st.moves)
            if key > best_key:
                best_where, best_key = list(st.where), key
    return best_where
