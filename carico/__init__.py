"""Carico's shared core: the model maths, shared types, configuration and the ``carico`` CLI."""

__version__ = "0.1.0"
