"""The store's global model is the weighted mean of the nodes' latest second moments (numpy as
reference), with latest-per-node semantics, TTL expiry and exact fleet priors."""

import numpy as np
import pytest

from aggregator.store import OUTCOME_ACCEPTED, OUTCOME_STALE, ModelStore
from aggregator.validate import NodeEntry, SenderPolicy, ValidationError, validate_local_model

FEATURES = ("cpu", "memory")
# Second moments are sums of products of numbers in [0,1]; float64 rounding over a few thousand
# terms stays far below 1e-12, so anything above that is a real error in the merge.
ATOL = 1e-12


# The store trusts what validation let through; "child" may stand for more than one node.
CHILDREN = SenderPolicy(frozenset({"child"}))


def _entry(make_local, node: str, batch: np.ndarray, now: float = 0.0, **kw) -> NodeEntry:  # type: ignore[no-untyped-def]
    entry, _ = validate_local_model(make_local(node, batch, **kw), None, now, (), CHILDREN)
    return entry


def _moment(batch: np.ndarray) -> np.ndarray:
    return batch @ batch.T / batch.shape[1]


def test_global_is_the_mean_of_second_moments_for_many_nodes(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=60)
    batches = {f"n{i}": rng.uniform(size=(2, 10)) * rng.uniform(0.1, 1) for i in range(500)}
    for node, batch in batches.items():
        assert store.offer(_entry(make_local, node, batch), FEATURES) == OUTCOME_ACCEPTED
    view = store.compute(now=1.0)
    assert view is not None
    expected = np.mean([_moment(b) for b in batches.values()], axis=0)
    np.testing.assert_allclose(view.second_moment(), expected, rtol=0, atol=ATOL)
    assert view.contributing_nodes == 500 and view.senders == 500
    np.testing.assert_allclose(view.u.T @ view.u, np.eye(2), atol=1e-12)
    assert view.sigma[0] >= view.sigma[1] >= 0


def test_higher_dimension_and_mixed_ranks(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=60)
    names = tuple(f"f{i}" for i in range(5))
    moments = []
    for i in range(40):
        # b < d gives rank-b factors: ranks 1..5 are mixed in one store.
        batch = rng.uniform(size=(5, 1 + i % 5))
        moments.append(_moment(batch))
        store.offer(_entry(make_local, f"n{i}", batch), names)
    view = store.compute(0.0)
    assert view is not None
    np.testing.assert_allclose(view.second_moment(), np.mean(moments, axis=0), atol=ATOL)


def test_a_chatty_node_counts_once_with_its_latest_model(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=60)
    quiet = rng.uniform(size=(2, 10))
    store.offer(_entry(make_local, "quiet", quiet), FEATURES)
    last = quiet
    for seq in range(1, 101):
        last = rng.uniform(size=(2, 10))
        entry = _entry(make_local, "chatty", last, sequence=seq, timestamp=1000.0 + seq)
        assert store.offer(entry, FEATURES) == OUTCOME_ACCEPTED
    view = store.compute(0.0)
    assert view is not None and view.contributing_nodes == 2
    expected = (_moment(quiet) + _moment(last)) / 2
    np.testing.assert_allclose(view.second_moment(), expected, atol=ATOL)


def test_older_reports_are_ignored_but_a_restarted_agent_is_accepted(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=60)
    newest = _entry(make_local, "n", rng.uniform(size=(2, 4)), sequence=10, timestamp=2000.0)
    store.offer(newest, FEATURES)
    late = _entry(make_local, "n", rng.uniform(size=(2, 4)), sequence=9, timestamp=1999.0)
    assert store.offer(late, FEATURES) == OUTCOME_STALE
    assert store.get("n") == newest
    restarted = _entry(make_local, "n", rng.uniform(size=(2, 4)), sequence=0, timestamp=2100.0)
    assert store.offer(restarted, FEATURES) == OUTCOME_ACCEPTED
    assert store.get("n") == restarted


def test_silent_nodes_drop_out_after_the_ttl(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=30)
    a, b = rng.uniform(size=(2, 5)), rng.uniform(size=(2, 5))
    store.offer(_entry(make_local, "a", a, now=100.0), FEATURES)
    store.offer(_entry(make_local, "b", b, now=120.0), FEATURES)
    assert store.expire(now=130.0) == []
    assert store.expire(now=130.5) == ["a"]
    view = store.compute(131.0)
    assert view is not None and view.contributing_nodes == 1
    np.testing.assert_allclose(view.second_moment(), _moment(b), atol=ATOL)
    assert store.expire(now=151.0) == ["b"]
    assert store.compute(151.0) is None


def test_removals_keep_the_mean_exact(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    """Interleaved arrivals, replacements and expiries: always equal to a fresh numpy mean."""
    store = ModelStore(ttl=10)
    live: dict[str, tuple[float, np.ndarray]] = {}
    for step in range(400):
        now = float(step) * 0.1
        node = f"n{int(rng.integers(0, 60))}"
        batch = rng.uniform(size=(2, 3))
        store.offer(_entry(make_local, node, batch, now=now, sequence=step), FEATURES)
        live[node] = (now, batch)
        if step % 7 == 0:
            store.expire(now)
            live = {n: v for n, v in live.items() if v[0] >= now - 10}
        if step % 13 == 0:
            view = store.compute(now)
            assert view is not None and view.senders == len(live)
            expected = np.mean([_moment(b) for _, b in live.values()], axis=0)
            np.testing.assert_allclose(view.second_moment(), expected, atol=ATOL)


def test_weights_make_a_child_count_as_its_nodes(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    batches = [rng.uniform(size=(2, 6)) for _ in range(7)]
    child = ModelStore(ttl=60)
    for i, batch in enumerate(batches[:5]):
        child.offer(_entry(make_local, f"n{i}", batch), FEATURES)
    child_view = child.compute(0.0)
    assert child_view is not None
    root = ModelStore(ttl=60)
    u = tuple(child_view.u.ravel().tolist())
    sigma = tuple(child_view.sigma.tolist())
    root.offer(
        NodeEntry("child", 1, 0.0, 0.0, child_view.contributing_nodes, 2, 2, u, sigma, ()),
        FEATURES,
    )
    for i, batch in enumerate(batches[5:], start=5):
        root.offer(_entry(make_local, f"n{i}", batch), FEATURES)
    view = root.compute(0.0)
    assert view is not None and view.contributing_nodes == 7 and view.senders == 3
    expected = np.mean([_moment(b) for b in batches], axis=0)
    np.testing.assert_allclose(view.second_moment(), expected, atol=ATOL)


def test_a_different_feature_set_is_refused_without_touching_state(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=60)
    store.offer(_entry(make_local, "a", rng.uniform(size=(2, 4))), FEATURES)
    store.compute(0.0)
    other = _entry(make_local, "b", rng.uniform(size=(2, 4)), features=("cpu", "io"))
    with pytest.raises(ValidationError, match=r"\['cpu', 'io'\] differs"):
        store.offer(other, ("cpu", "io"))
    assert len(store) == 1 and not store.dirty


def test_an_emptied_store_learns_a_new_feature_set_unless_configured(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    learned = ModelStore(ttl=1)
    learned.offer(_entry(make_local, "a", rng.uniform(size=(2, 4))), FEATURES)
    learned.expire(now=5.0)
    assert learned.feature_names is None
    learned.offer(_entry(make_local, "b", rng.uniform(size=(3, 4))), ("f0", "f1", "f2"))
    view = learned.compute(5.0)
    assert view is not None and view.u.shape == (3, 3)
    pinned = ModelStore(ttl=1, feature_names=FEATURES)
    pinned.offer(_entry(make_local, "a", rng.uniform(size=(2, 4))), FEATURES)
    pinned.expire(now=5.0)
    assert pinned.feature_names == FEATURES


def test_fleet_prior_is_the_median_over_nodes_that_know_their_cost(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=60)
    costs = [0.3, 0.1, 0.7, 0.2]
    for i, cost in enumerate(costs):
        store.offer(_entry(make_local, f"k{i}", rng.uniform(size=(2, 4)), costs=(cost,)), FEATURES)
    store.offer(_entry(make_local, "unknown", rng.uniform(size=(2, 4))), FEATURES)
    view = store.compute(0.0)
    assert view is not None
    assert view.median_per_pod_cost == pytest.approx(0.25) and view.nodes_with_cost == 4
    assert sorted(view.all_costs.tolist()) == sorted(costs)


def test_no_cost_known_means_no_prior(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=60)
    store.offer(_entry(make_local, "a", rng.uniform(size=(2, 4))), FEATURES)
    view = store.compute(0.0)
    assert view is not None and view.median_per_pod_cost is None and view.nodes_with_cost == 0


def test_restore_drops_entries_past_the_ttl(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    entries = [
        _entry(make_local, "old", rng.uniform(size=(2, 4)), now=10.0),
        _entry(make_local, "fresh", rng.uniform(size=(2, 4)), now=95.0),
    ]
    store = ModelStore(ttl=30)
    assert store.restore(entries, FEATURES, now=100.0) == 1
    assert "fresh" in store and "old" not in store


def test_member_costs_of_a_child_count_individually_and_leave_with_it(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(ttl=10)
    child = _entry(
        make_local, "child", rng.uniform(size=(2, 4)), weight=4, costs=(0.1, 0.2, 0.3), now=0.0
    )
    store.offer(child, FEATURES)
    store.offer(_entry(make_local, "a", rng.uniform(size=(2, 4)), costs=(0.9,), now=0.5), FEATURES)
    view = store.compute(0.5)
    assert view is not None and view.nodes_with_cost == 4
    assert view.median_per_pod_cost == pytest.approx(0.25)
    # The child now reports a single member cost: its old member costs must not linger.
    update = child._replace(sequence=2, sent_at=2000.0, received_at=1.0, per_pod_costs=(0.5,))
    store.offer(update, FEATURES)
    view = store.compute(1.0)
    assert view is not None and sorted(view.all_costs.tolist()) == [0.5, 0.9]
    store.offer(
        _entry(make_local, "a", rng.uniform(size=(2, 4)), costs=(0.9,), now=5.0, sequence=2),
        FEATURES,
    )
    assert store.expire(now=11.5) == ["child"]  # the child (last seen at 1) expires, "a" stays
    view = store.compute(11.5)
    assert view is not None and view.all_costs.tolist() == [0.9]


def test_expiry_follows_arrival_order_not_first_arrival(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    """A node that reported early and again late must outlive one that reported only once."""
    store = ModelStore(ttl=10)
    store.offer(_entry(make_local, "early", rng.uniform(size=(2, 4)), now=0.0), FEATURES)
    store.offer(_entry(make_local, "once", rng.uniform(size=(2, 4)), now=1.0), FEATURES)
    store.offer(
        _entry(make_local, "early", rng.uniform(size=(2, 4)), now=8.0, sequence=2), FEATURES
    )
    assert store.expire(now=11.5) == ["once"]
    assert store.expire(now=17.9) == []
    assert store.expire(now=18.5) == ["early"]
