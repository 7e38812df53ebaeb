"""``carico:shape=...`` in a scheduler spec, and the node-use figures of the report."""

from __future__ import annotations

import pytest

from carico_app.simulate.cli import split_schedulers
from carico_app.simulate.engine import CaseResult
from carico_app.simulate.report import node_use
from carico_app.simulate.schedulers import parse_spec


def test_a_shape_option_round_trips_through_the_label() -> None:
    spec = parse_spec("carico:level=0.9,shape=0:0+100:10")
    assert spec.score_shape == "0:0,100:10" and spec.full_level == 0.9
    assert parse_spec(spec.label) == spec
    assert parse_spec("carico").score_shape is None


def test_the_extender_weight_option_round_trips_and_a_bad_one_is_refused() -> None:
    spec = parse_spec("carico:shape=0:0+100:10,weight=5")
    assert spec.weight == 5 and parse_spec(spec.label) == spec
    assert parse_spec("carico").weight is None
    for bad in ("carico:weight=0", "carico:weight=1.5"):
        with pytest.raises(ValueError, match="weight"):
            parse_spec(bad)


def test_a_carico_spec_keeps_its_options_in_the_scheduler_list() -> None:
    names = split_schedulers(
        "default:500m, carico:shape=0:0+100:10,weight=5,carico,carico:level=0.9"
    )
    assert names == [
        "default:500m",
        "carico:shape=0:0+100:10,weight=5",
        "carico",
        "carico:level=0.9",
    ]


@pytest.mark.parametrize("bad", ["carico:shape=", "carico:shape=50:5+20:3", "carico:shape=0:11"])
def test_a_bad_shape_option_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="shape"):
        parse_spec(bad)


def test_node_use_counts_from_submission_on() -> None:
    r = CaseResult(
        "s", "c", "carico", 1, 3.0, [], [1.0, 2.0, 3.0, 4.0],
        [[5, 3, 4], [2, 1, 0], [0, 1, 0], [0, 0, 0]], [], [], 0, 0, 0, 4.0, 0.0, True,
        submitted_at=1.5,
    )  # fmt: skip
    # the first second (before submission) does not count: the pods there ran in the lead
    use = node_use(r)
    assert use["never_used"] == 1  # node 2
    assert use["idle_mean"] == pytest.approx((1 + 2 + 3) / 3)
    assert use["busy_mean"] == pytest.approx(3 - 2)
