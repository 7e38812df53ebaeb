"""The committed gRPC stubs must match what grpcio-tools generates from the .proto files."""

from protos.generate import stale_files


def test_committed_stubs_match_the_proto_files() -> None:
    assert stale_files() == [], "run `make protos` and commit the result"
