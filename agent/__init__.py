"""The Carico node agent (DESIGN §3): from the node's telemetry to a capacity report.

Modules: ``psi`` and ``telemetry`` are pure (parsing, feature maths); ``proc_source`` reads the
host's files; ``pods`` counts workload pods and ``kube_watch`` feeds it from the Kubernetes API;
``pipeline`` is the pure per-sample step (EMA, batches, models, signal, estimator, avail);
``grpc_client`` talks to the aggregator and the extender; ``service`` wires it all on asyncio;
``cli`` is ``carico agent``.
"""
