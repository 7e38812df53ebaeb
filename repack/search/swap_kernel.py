"""The compiled inner loops of the swap search (``swap_search``): one step, one insertion, and
whole rounds of the undoing of moves, on a state held in numpy arrays.

Compiled with numba because the search lives on the number of steps it makes: a step weighs
every shift, swap and trade of the pods on one overloaded node, a few thousand candidate moves
on 32 nodes with eight pods each. Evaluated with numpy calls a step cost 0.6-0.7 ms, almost all
of it call overhead; as loops compiled here it costs 35-50 us. The functions are compiled at
import for their explicit signatures and cached on disk where that is possible (``compiled``),
so no solve ever pays for compilation inside its time limit.

The state is two tuples of arrays (``FIXED`` and ``STATE``), indexed by class in play i, node
in play b and resource r: demand[i, r], capacity[b, r] (what the classes not in play leave),
current[i, b] (pods running there now), eligible[i, b], own[i] (the tier's classes),
may_leave[i] (may lose placed pods: the tier's, without a disruption budget), running[i] and
total[i] (counted on the nodes in play), scale[r] (1 / mean request), and the mutable
counts[i, b], load[b, r], pinned[i, b] (pods that never move), weight[b, r] (breakout weights),
tabu[i, b] (the step until which class i may not return to node b) and meta (steps taken,
random state). The random numbers are a splitmix64 sequence kept in ``meta`` (numba's own
generator is one per thread and process: a seeded search must not depend on what ran before
it).
"""

from __future__ import annotations

import numpy as np
from numba import types

from repack.search.compiled import compiled

# the argument types: every array C-contiguous, so each function compiles once, at import
I1, I2 = types.int64[::1], types.int64[:, ::1]
F1, F2 = types.float64[::1], types.float64[:, ::1]
B1, B2 = types.boolean[::1], types.boolean[:, ::1]
i64, f64, b1 = types.int64, types.float64, types.boolean
PAIR = types.UniTuple(types.int64, 2)
# the state, as two tuples: the fixed arrays (demand, capacity, current, eligible, own,
# may_leave, running, total, scale) and the mutable ones (counts, load, pinned, weight, tabu,
# meta)
FIXED = types.Tuple((I2, I2, I2, B2, B1, B1, I1, I1, F1))
STATE = types.Tuple((I2, I2, I2, F2, I2, I1))

# tabu tenure: a class that left a node may not return there for this many steps (plus a random
# part up to the same again, so that cycles of the same length do not repeat); set by hand
TENURE = 7
# a breakout adds this to the weight of each overloaded node resource; set by hand
BUMP = 1.0
# a step's cost change at or above this is no improvement (float round-off)
EPS = 1e-9
# what ``advance`` reports
FITS, STUCK, BUDGET = 0, 1, 2
# meta's slots: steps taken, random state
STEPS, RANDOM = 0, 1

_MASK = (1 << 64) - 1


def seed_state(seed: int) -> int:
    """The random state for ``seed`` (a signed 64-bit value, as ``meta`` holds it)."""
    value = (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


@compiled(i64(I1, i64))
def _random(meta: np.ndarray, n: int) -> int:
    """A random integer in [0, n) from meta's splitmix64 state."""
    z = np.uint64(meta[RANDOM]) + np.uint64(0x9E3779B97F4A7C15)
    meta[RANDOM] = np.int64(z)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return int(z % np.uint64(n))


@compiled(b1(I2, I2, i64))
def _over(load: np.ndarray, capacity: np.ndarray, b: int) -> bool:
    # loops, not any() over a generator: numba compiles loops
    for r in range(load.shape[1]):  # noqa: SIM110
        if load[b, r] > capacity[b, r]:
            return True
    return False


@compiled(b1(I2, I2))
def fits(load: np.ndarray, capacity: np.ndarray) -> bool:
    for b in range(load.shape[0]):  # noqa: SIM110
        if _over(load, capacity, b):
            return False
    return True


@compiled(i64(I2, I2, I2, F1, F2, I2, F2, I1))
def _rooms(
    demand: np.ndarray,
    capacity: np.ndarray,
    load: np.ndarray,
    scale: np.ndarray,
    weight: np.ndarray,
    room: np.ndarray,
    unit: np.ndarray,
    active: np.ndarray,
) -> int:
    """Fills room[b, r] (capacity left), unit[b, r] (the weighted cost of a unit of overload)
    and ``active``, the resources a step may overload: those where some node has less room
    than the largest request (elsewhere no shift, swap or trade can overload, and no node is
    overloaded: the pods resource, mostly). Returns how many are active."""
    n_active = 0
    for r in range(demand.shape[1]):
        largest = 0
        for i in range(demand.shape[0]):
            largest = max(largest, demand[i, r])
        tight = False
        for b in range(load.shape[0]):
            room[b, r] = capacity[b, r] - load[b, r]
            unit[b, r] = scale[r] * weight[b, r]
            tight = tight or room[b, r] < largest
        if tight:
            active[n_active] = r
            n_active += 1
    return n_active


@compiled(f64(I2, I2, F2, I1, i64, i64, i64, i64))
def _penalty(
    demand: np.ndarray,
    room: np.ndarray,
    unit: np.ndarray,
    active: np.ndarray,
    n_active: int,
    b: int,
    add: int,
    sub: int,
) -> float:
    """Weighted overload of node b with a pod of class ``add`` more on it and one of class
    ``sub`` off it (-1: none; class indices rather than request rows, so the inner loops make
    no array views), on the active resources (``_rooms``)."""
    out = 0.0
    for j in range(n_active):
        r = active[j]
        excess = -room[b, r]
        if add >= 0:
            excess += demand[add, r]
        if sub >= 0:
            excess -= demand[sub, r]
        if excess > 0:
            out += excess * unit[b, r]
    return out


@compiled(f64(f64, b1, F2))
def _mu(mu: float, scaled: bool, weight: np.ndarray) -> float:
    if not scaled:
        return mu
    total = 0.0
    for b in range(weight.shape[0]):
        for r in range(weight.shape[1]):
            total += weight[b, r]
    return mu * total / max(1, weight.size)


@compiled(types.none(I2, I2, I2, I2, I1, i64, i64, i64))
def _move(
    demand: np.ndarray,
    counts: np.ndarray,
    load: np.ndarray,
    tabu: np.ndarray,
    meta: np.ndarray,
    i: int,
    src: int,
    dst: int,
) -> None:
    """One pod of class i from node src (-1: unplaced) to node dst (-1: unplaced)."""
    if src >= 0:
        counts[i, src] -= 1
        for r in range(load.shape[1]):
            load[src, r] -= demand[i, r]
        tabu[i, src] = meta[STEPS] + TENURE + _random(meta, TENURE + 1)
    if dst >= 0:
        counts[i, dst] += 1
        for r in range(load.shape[1]):
            load[dst, r] += demand[i, r]


@compiled(I1(I2))
def _placed(counts: np.ndarray) -> np.ndarray:
    """Pods placed per class (plain loops: a row view per class costs more than its sum)."""
    out = np.zeros(counts.shape[0], dtype=np.int64)
    for i in range(counts.shape[0]):
        for b in range(counts.shape[1]):
            out[i] += counts[i, b]
    return out


@compiled(I1(I1, B1, I1))
def _unplaced(placed: np.ndarray, own: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The tier's classes with pods not placed."""
    out = np.empty(placed.shape[0], dtype=np.int64)
    k = 0
    for i in range(placed.shape[0]):
        if own[i] and placed[i] < total[i]:
            out[k] = i
            k += 1
    return out[:k]


@compiled(b1(FIXED, STATE, f64, b1))
def insert(
    fixed: tuple[np.ndarray, ...], state: tuple[np.ndarray, ...], mu: float, scaled: bool
) -> bool:
    """Places one more unplaced pod of the tier where it adds least cost; False when none is
    left (or none may go anywhere)."""
    demand, capacity, current, eligible, own, may_leave, running, total, scale = fixed
    counts, load, pinned, weight, tabu, meta = state
    unplaced = _unplaced(_placed(counts), own, total)
    m = _mu(mu, scaled, weight)
    room = np.empty_like(load)
    unit = np.empty_like(weight)
    active = np.empty(load.shape[1], dtype=np.int64)
    n_act = _rooms(demand, capacity, load, scale, weight, room, unit, active)
    best, best_i, best_b = np.inf, -1, -1
    for u in unplaced:
        for b in range(counts.shape[1]):
            if not eligible[u, b]:
                continue
            cost = _penalty(demand, room, unit, active, n_act, b, u, -1) - _penalty(
                demand, room, unit, active, n_act, b, -1, -1
            )
            if counts[u, b] < current[u, b]:
                cost -= m
            if cost < best:
                best, best_i, best_b = cost, u, b
    if best_i < 0:
        return False
    _move(demand, counts, load, tabu, meta, best_i, -1, best_b)
    return True


@compiled(b1(FIXED, STATE, f64, b1))
def step(
    fixed: tuple[np.ndarray, ...], state: tuple[np.ndarray, ...], mu: float, scaled: bool
) -> bool:
    """Takes the cheapest move of a pod on one overloaded node (drawn at random) that is not
    tabu: a shift to another node, a swap with a movable pod of another class on another node,
    or a trade for an unplaced pod of the tier (the source pod leaves the cluster). Its cost is
    the change of weighted overload plus ``mu`` (times the mean weight when ``scaled``) per
    unit of disruption (a stay lost 1, a stay gained -1, an eviction 1 more). When no move
    lowers the cost, the weights of the overloaded resources grow instead (a breakout). False
    when no pod can move."""
    demand, capacity, current, eligible, own, may_leave, running, total, scale = fixed
    counts, load, pinned, weight, tabu, meta = state
    meta[STEPS] += 1
    now = meta[STEPS]
    n_classes, n_nodes = counts.shape
    n_res = demand.shape[1]
    hot = np.empty(n_nodes, dtype=np.int64)
    n_hot = 0
    for b in range(n_nodes):
        if _over(load, capacity, b):
            hot[n_hot] = b
            n_hot += 1
    # the movable pods: (class, node) pairs with a pod that is not pinned
    pair_i = np.empty(n_classes * n_nodes, dtype=np.int64)
    pair_b = np.empty(n_classes * n_nodes, dtype=np.int64)
    n_pairs = 0
    for i in range(n_classes):
        for b in range(n_nodes):
            if counts[i, b] > pinned[i, b]:
                pair_i[n_pairs] = i
                pair_b[n_pairs] = b
                n_pairs += 1
    if n_pairs == 0 or n_hot == 0:
        return False
    node = hot[_random(meta, n_hot)]
    sources = np.empty(n_classes, dtype=np.int64)
    n_src = 0
    for i in range(n_classes):
        if counts[i, node] > pinned[i, node]:
            sources[n_src] = i
            n_src += 1
    if n_src == 0:
        return False
    room = np.empty_like(load)
    unit = np.empty_like(weight)
    active = np.empty(n_res, dtype=np.int64)
    n_act = _rooms(demand, capacity, load, scale, weight, room, unit, active)
    pen = np.empty(n_nodes)
    here = np.empty(n_classes)
    for b in range(n_nodes):
        pen[b] = _penalty(demand, room, unit, active, n_act, b, -1, -1)
    m = _mu(mu, scaled, weight)
    placed = _placed(counts)
    unplaced = _unplaced(placed, own, total)
    best = np.inf
    kind, best_i, best_a, best_b = -1, -1, -1, -1  # kind: 0 shift, 1 swap, 2 trade
    for s in range(n_src):
        i = sources[s]
        lose_i = 1.0 if counts[i, node] <= current[i, node] and current[i, node] > 0 else 0.0
        left = _penalty(demand, room, unit, active, n_act, node, -1, i) - pen[node]
        # shifts: to node b
        for b in range(n_nodes):
            if b == node or not eligible[i, b] or tabu[i, b] > now:
                continue
            gain = -1.0 if counts[i, b] < current[i, b] else 0.0
            cost = (
                left
                + _penalty(demand, room, unit, active, n_act, b, i, -1)
                - pen[b]
                + m * (lose_i + gain)
            )
            if cost < best:
                best, kind, best_i, best_a, best_b = cost, 0, i, b, -1
    for s in range(n_src):
        i = sources[s]
        lose_i = 1.0 if counts[i, node] <= current[i, node] and current[i, node] > 0 else 0.0
        # swaps: with a movable pod of class k on node b. The change at ``node`` depends on k
        # alone (computed once a class), and no swap costs less than that change, less b's
        # overload, less two stays gained: most pairs are skipped on that bound alone
        for k in range(n_classes):
            here[k] = _penalty(demand, room, unit, active, n_act, node, k, i) - pen[node]
        least = m * (lose_i - 2.0)
        for p in range(n_pairs):
            k, b = pair_i[p], pair_b[p]
            if here[k] - pen[b] + least >= best:
                continue
            if k == i or b == node or not eligible[i, b] or not eligible[k, node]:
                continue
            if tabu[i, b] > now or tabu[k, node] > now:
                continue
            dis = lose_i
            if counts[i, b] < current[i, b]:
                dis -= 1.0
            if counts[k, b] <= current[k, b] and current[k, b] > 0:
                dis += 1.0
            if counts[k, node] < current[k, node]:
                dis -= 1.0
            cost = here[k] + _penalty(demand, room, unit, active, n_act, b, i, k) - pen[b] + m * dis
            if cost < best:
                best, kind, best_i, best_a, best_b = cost, 1, i, k, b
    if unplaced.size:
        for s in range(n_src):
            i = sources[s]
            if not may_leave[i]:
                continue
            lose_i = 1.0 if counts[i, node] <= current[i, node] and current[i, node] > 0 else 0.0
            evict_out = 1.0 if placed[i] <= running[i] else 0.0
            # trades: an unplaced pod of class u takes its place
            for u in unplaced:
                if u == i or not eligible[u, node] or tabu[u, node] > now:
                    continue
                dis = lose_i + evict_out
                if counts[u, node] < current[u, node]:
                    dis -= 1.0
                if placed[u] < running[u]:
                    dis -= 1.0
                cost = _penalty(demand, room, unit, active, n_act, node, u, i) - pen[node] + m * dis
                if cost < best:
                    best, kind, best_i, best_a, best_b = cost, 2, i, u, -1
    if kind < 0 or best >= -EPS:
        # every move is tabu or none helps: a breakout
        for b in range(n_nodes):
            for r in range(n_res):
                if load[b, r] > capacity[b, r]:
                    weight[b, r] += BUMP
        return True
    if kind == 0:
        _move(demand, counts, load, tabu, meta, best_i, node, best_a)
    elif kind == 1:
        _move(demand, counts, load, tabu, meta, best_i, node, best_b)
        _move(demand, counts, load, tabu, meta, best_a, best_b, node)
    else:
        _move(demand, counts, load, tabu, meta, best_i, node, -1)
        _move(demand, counts, load, tabu, meta, best_a, -1, node)
    return True


@compiled(PAIR(FIXED, STATE, f64, b1, i64))
def advance(
    fixed: tuple[np.ndarray, ...],
    state: tuple[np.ndarray, ...],
    mu: float,
    scaled: bool,
    budget: int,
) -> tuple[int, int]:
    """Steps until the state fits, no pod can move, or ``budget`` steps: (FITS, STUCK or
    BUDGET; steps taken)."""
    capacity, load = fixed[1], state[1]
    for taken in range(budget):
        if fits(load, capacity):
            return FITS, taken
        if not step(fixed, state, mu, scaled):
            return STUCK, taken
    return (FITS if fits(load, capacity) else BUDGET), budget


@compiled(types.none(FIXED, STATE))
def reset(fixed: tuple[np.ndarray, ...], state: tuple[np.ndarray, ...]) -> None:
    """The derived arrays for new counts: the load, the pinned pods (a higher tier's pods
    staying where they run, and pods where their class is not eligible), and fresh weights,
    tabu marks and step count."""
    demand, current, eligible, own = fixed[0], fixed[2], fixed[3], fixed[4]
    counts, load, pinned, weight, tabu, meta = state
    for b in range(load.shape[0]):
        for r in range(load.shape[1]):
            load[b, r] = 0
            weight[b, r] = 1.0
    for i in range(counts.shape[0]):
        for b in range(counts.shape[1]):
            k = counts[i, b]
            tabu[i, b] = 0
            if k:
                for r in range(load.shape[1]):
                    load[b, r] += k * demand[i, r]
            if not eligible[i, b]:
                pinned[i, b] = k
            elif own[i]:
                pinned[i, b] = 0
            else:
                pinned[i, b] = min(k, current[i, b])
    meta[STEPS] = 0


@compiled(types.none(I2, I2))
def _copy(src: np.ndarray, dst: np.ndarray) -> None:
    """dst[:] = src, as loops (array expressions take seconds more to compile)."""
    for i in range(src.shape[0]):
        for b in range(src.shape[1]):
            dst[i, b] = src[i, b]


@compiled(i64(I2, I1, I2))
def cost(current: np.ndarray, running: np.ndarray, counts: np.ndarray) -> int:
    """Disruption on the nodes in play, up to a constant: stays lost plus evictions."""
    out = 0
    for i in range(counts.shape[0]):
        placed = 0
        for b in range(counts.shape[1]):
            placed += counts[i, b]
            if counts[i, b] < current[i, b]:
                out += current[i, b] - counts[i, b]
        if placed < running[i]:
            out += running[i] - placed
    return out


@compiled(b1(I2, I2, I1, i64))
def _kick(current: np.ndarray, counts: np.ndarray, meta: np.ndarray, count: int) -> bool:
    """Sends up to ``count`` moved pods (drawn at random) back to the node they run on: each
    takes a slot of its class from a node holding more of the class than runs there (drawn at
    random), so the placed counts stay; a pod drawn whose class has no such slot was evicted
    and stays away. False when no pod can come back."""
    n_classes, n_nodes = counts.shape
    extra = False
    moved_i = np.empty(n_classes * n_nodes, dtype=np.int64)
    moved_b = np.empty(n_classes * n_nodes, dtype=np.int64)
    n_moved = 0
    for i in range(n_classes):
        for b in range(n_nodes):
            if counts[i, b] < current[i, b]:
                moved_i[n_moved] = i
                moved_b[n_moved] = b
                n_moved += 1
            elif counts[i, b] > current[i, b]:
                extra = True
    if not extra:
        return False
    count = min(count, n_moved)
    # the first ``count`` of a partial Fisher-Yates shuffle: a sample without repeats
    for j in range(count):
        pick = j + _random(meta, n_moved - j)
        moved_i[j], moved_i[pick] = moved_i[pick], moved_i[j]
        moved_b[j], moved_b[pick] = moved_b[pick], moved_b[j]
        i, home = moved_i[j], moved_b[j]
        n_extra = 0
        for b in range(n_nodes):
            if counts[i, b] > current[i, b]:
                n_extra += 1
        if n_extra == 0:
            continue
        which = _random(meta, n_extra)
        for b in range(n_nodes):
            if counts[i, b] > current[i, b]:
                if which == 0:
                    counts[i, b] -= 1
                    counts[i, home] += 1
                    break
                which -= 1
    return True


@compiled(PAIR(FIXED, STATE, f64, I2, i64, i64, i64, i64, i64))
def undo_rounds(
    fixed: tuple[np.ndarray, ...],
    state: tuple[np.ndarray, ...],
    mu: float,
    best: np.ndarray,
    best_cost: int,
    target: int,
    rounds: int,
    kicks: int,
    repair_steps: int,
) -> tuple[int, int]:
    """Up to ``rounds`` rounds of the undoing of moves from ``best`` (updated in place): a
    kick of 1 to ``kicks`` pods, at most ``repair_steps`` steps of repair with disruption
    weighing ``mu`` times the mean weight, and the repair kept as the new best when it fits
    and costs no more (``cost``). Ends early at ``target``. (rounds done, best cost); rounds
    done is -1 when no pod can come back."""
    current, running = fixed[2], fixed[6]
    counts, meta = state[0], state[5]
    for done in range(rounds):
        if best_cost <= target:
            return done, best_cost
        _copy(best, counts)
        if not _kick(current, counts, meta, 1 + _random(meta, kicks)):
            return -1, best_cost
        reset(fixed, state)
        outcome, _ = advance(fixed, state, mu, True, repair_steps)
        if outcome == FITS:
            value = cost(current, running, counts)
            if value <= best_cost:
                _copy(counts, best)
                best_cost = value
    return rounds, best_cost
