"""The live snapshot: API list responses merged into the List the dump parser reads."""

from __future__ import annotations

import json

from repack_builders import fragmentation_list, node_obj, pod_obj

from repack.driver.solver import SolveOptions
from repack.problem.snapshot import parse_list
from scheduler_ext.repack.live import compute, fingerprint, merge_lists, only_pending_of


def api_lists(doc: dict) -> list[bytes]:
    """The dump as the API server lists it: three typed lists whose items carry no kind."""
    by_kind: dict[str, list[dict]] = {"Node": [], "Pod": [], "PodDisruptionBudget": []}
    for item in doc["items"]:
        by_kind[item["kind"]].append({k: v for k, v in item.items() if k != "kind"})
    return [
        json.dumps(
            {"kind": f"{kind}List", "metadata": {"resourceVersion": "7"}, "items": items}
        ).encode()
        for kind, items in by_kind.items()
    ]


def test_api_lists_parse_to_the_same_snapshot_as_the_kubectl_dump() -> None:
    dump = fragmentation_list()
    live = parse_list(merge_lists(api_lists(dump)))
    assert live == parse_list(dump)
    assert fingerprint(live) == fingerprint(parse_list(dump))
    # A kubectl dump passed whole is taken as it is.
    assert parse_list(merge_lists([json.dumps(dump)])) == live


def test_the_fingerprint_follows_every_change_the_solver_sees() -> None:
    base = fingerprint(parse_list(fragmentation_list()))
    moved = fragmentation_list()
    moved["items"][3]["spec"]["nodeName"] = "node-b"
    assert fingerprint(parse_list(moved)) != base
    bigger = fragmentation_list()
    bigger["items"][0]["status"]["allocatable"]["cpu"] = "2"
    assert fingerprint(parse_list(bigger)) != base


def test_only_the_pending_pods_of_managed_schedulers_are_kept() -> None:
    doc = {
        "items": [
            node_obj("n1"),
            pod_obj("ours", "100m", "1M", spec={"schedulerName": "carico-scheduler"}),
            pod_obj("theirs", "100m", "1M"),  # default-scheduler
            pod_obj("bound-theirs", "100m", "1M", node="n1"),
        ]
    }
    kept = only_pending_of(doc, ["carico-scheduler"])
    names = [i["metadata"]["name"] for i in kept["items"] if i["kind"] == "Pod"]
    assert names == ["ours", "bound-theirs"]  # bound pods hold capacity whoever scheduled them
    assert only_pending_of(doc, []) == doc


def test_compute_skips_a_state_already_solved() -> None:
    raws = api_lists(fragmentation_list())
    options = SolveOptions(time_limit=5, workers=2)
    done = compute(raws, options, ["kube-system"])
    assert done.plan is not None and done.plan.status == "OPTIMAL"
    assert done.pending == ("default/pending",)
    again = compute(raws, options, ["kube-system"], unless=done.fingerprint)
    assert again.plan is None and again.snapshot is None
    assert again.fingerprint == done.fingerprint
