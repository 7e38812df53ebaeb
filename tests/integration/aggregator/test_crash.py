"""``carico aggregator`` killed and restarted as a real process: what a SIGKILL may lose, and a
damaged checkpoint (of any shape) or an orphan temporary file beside it at start."""

import json
import re
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest

from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc

from .test_cli import _start, _wait_for


def _model(node: str, sequence: int, rng: np.random.Generator) -> aggregator_pb2.LocalModel:
    u, sigma = SubspaceModel.from_batch(rng.uniform(size=(2, 5))).to_arrays()
    return aggregator_pb2.LocalModel(
        node=node,
        sequence=sequence,
        timestamp=float(sequence),
        weight=1,
        model=aggregator_pb2.SubspaceFactor(
            d=2, r=2, u=u.ravel().tolist(), sigma=sigma.tolist(), feature_names=["cpu", "memory"]
        ),
    )


def _outcomes(ops_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ops_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r'^carico_aggregator_exchanges_total\{outcome="(\w+)"\} (\S+)$', text, re.M
        )
    }


def _until_accepted(ops_port: int, n: int) -> None:
    # The merger counts a model when the store takes it (workers forward every few ms); the
    # bound only guards against a hang.
    for _ in range(2000):
        if _outcomes(ops_port).get("accepted") == n:
            return
    raise AssertionError(_outcomes(ops_port))


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_sigkill_loses_no_accepted_model_and_an_older_one_stays_refused(
    tmp_path: Path, workers: str
) -> None:
    """No checkpoint is due (one an hour), so only the journal can bring the models back."""
    rng = np.random.default_rng(5)
    args = ("--workers", workers, "--checkpoint-interval", "3600")
    proc = _start(tmp_path, *args)
    try:
        assert proc.stderr is not None
        serving, _ = _wait_for(proc.stderr, "serving")
        with grpc.insecure_channel(f"127.0.0.1:{serving['grpc_port']}") as channel:
            stub = aggregator_pb2_grpc.AggregatorStub(channel)
            for node, sequence in (("node-a", 31), ("node-a", 33), ("node-b", 1)):
                stub.Exchange(_model(node, sequence, rng), timeout=10)
        _until_accepted(serving["ops_port"], 3)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert not (tmp_path / "ckpt.json").exists()  # never checkpointed

    proc = _start(tmp_path, *args)
    try:
        assert proc.stderr is not None
        serving, seen = _wait_for(proc.stderr, "serving")
        assert any(e["msg"] == "journal replayed" and e["kept"] == 2 for e in seen), seen
        with grpc.insecure_channel(f"127.0.0.1:{serving['grpc_port']}") as channel:
            stub = aggregator_pb2_grpc.AggregatorStub(channel)
            # node-a's sequence 32 is older than the 33 it had sent before the kill.
            reply = stub.Exchange(_model("node-a", 32, rng), timeout=10)
            assert reply.has_model and reply.contributing_nodes == 2
        for _ in range(2000):  # counted by the merger once the worker forwarded it
            outcomes = _outcomes(serving["ops_port"])
            if outcomes["stale"] == 1:
                break
        assert outcomes["stale"] == 1 and outcomes["accepted"] == 0, outcomes
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    saved = json.loads((tmp_path / "ckpt.json").read_text())
    assert sorted((e["node"], e["sequence"]) for e in saved["entries"]) == [
        ("node-a", 33),
        ("node-b", 1),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "content",
    [
        b"[" * 100_000,  # deeper than any JSON parser recursion allows
        b'{"format": "carico-aggregator-checkpoint", "version": 1, "feature_names": '
        + b"[" * 5000
        + b"]" * 5000
        + b', "entries": []}',
        b'{"format": "carico-aggregator-checkpoint", "version": 1, "feature_names": '
        b'["cpu", "memory"], "entries": [' + b"{" * 3000 + b"}",
        b"\x00" * 1000,
    ],
    ids=["deep-list", "deep-names", "deep-entry", "zeros"],
)
def test_a_damaged_checkpoint_of_any_shape_and_an_orphan_tmp_do_not_stop_the_start(
    tmp_path: Path, content: bytes
) -> None:
    (tmp_path / "ckpt.json").write_bytes(content)
    orphan = tmp_path / ".ckpt.json.k2j4x9.tmp"  # what a kill during a write leaves behind
    orphan.write_bytes(b'{"format": "carico-aggr')
    unrelated = tmp_path / "notes.tmp"
    unrelated.write_bytes(b"kept")
    proc = _start(tmp_path, "--workers", "1")
    try:
        assert proc.stderr is not None
        serving, seen = _wait_for(proc.stderr, "serving")
        ignored = [e for e in seen if e["msg"] == "checkpoint ignored"]
        assert len(ignored) == 1 and len(json.dumps(ignored[0])) < 1000, ignored
        assert not orphan.exists() and unrelated.exists()
        reply = _model("node-a", 1, np.random.default_rng(1))
        with grpc.insecure_channel(f"127.0.0.1:{serving['grpc_port']}") as channel:
            assert aggregator_pb2_grpc.AggregatorStub(channel).Exchange(reply, timeout=10)
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    saved = json.loads((tmp_path / "ckpt.json").read_text())
    assert [e["node"] for e in saved["entries"]] == ["node-a"]
