"""The Carico node agent: from the node's telemetry to a capacity report.

Design: docs/architecture.md#data-flow.

Modules: ``psi``, ``telemetry``, ``pods``, ``backoff`` and ``wire`` are pure (parsing, feature
maths, pod counting, retry delays, wire conversions); ``proc_source`` reads the host's files;
``kube_watch`` feeds the pod count from the Kubernetes API and ``cgroup_watch`` gives an optional
churn hint from inotify; ``pipeline`` is the pure per-sample step (EMA, batches, models, signal,
estimator, avail); ``grpc_client`` talks to the aggregator and the extender; ``metrics`` exposes
``carico_agent_*``; ``service`` wires it all together; ``cli`` is ``carico agent``.
"""
