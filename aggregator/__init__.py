"""The aggregator: merges the nodes' local models into the global model over gRPC."""
