"""The node agent: reads the node's telemetry, runs the model pipeline and reports capacity."""
