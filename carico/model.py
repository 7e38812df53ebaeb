"""The public API of Carico's model core (DESIGN §3): import from here, not from the submodules.

The agent, the simulator, the benchmarks and the tests all use these names.
"""

from carico.subspace import SubspaceModel

__all__ = ["SubspaceModel"]
