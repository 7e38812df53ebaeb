"""Carico's shared core: the model maths, the pod rules and small shared helpers.

Design: docs/architecture.md#layers.
"""

__version__ = "0.1.0"
