"""The cluster simulator: a time-stepped model of nodes, pods, the Job controller and
kube-scheduler, used to compare schedulers on the CARICO dissertation's workloads.

Start at ``engine.run_case``; the command line is ``cli.py`` (``carico simulate``); the model and
its calibration are described in docs/simulator.md, its place in the design in
docs/architecture.md#simulator. Everything here is pure (the clock is the simulation step) except
``report.write_plots`` and ``cli.py``.
"""
