"""Carico's application layer: the ``carico`` command line, the demo, the simulator and its wiring
of the real services, the manifests and certificates.

It sits on top of everything else and may import any of it: the core (``carico``), the services
(``agent``, ``aggregator``, ``scheduler_ext``) and the repacking engine (``repack``). Nothing
imports it back (``make lint`` checks that). See docs/architecture.md#layers.
"""
