"""The Carico aggregator: merges the nodes' models into the global model over gRPC.

Design: docs/architecture.md#aggregation.

Pure logic in ``validate``, ``store`` and ``wire``; files in ``checkpoint``; the asyncio service in
``service``; gRPC in ``grpc_server`` and ``grpc_client``; the command line in ``cli``.
"""
