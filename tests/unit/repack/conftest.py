"""Makes ``repack_builders`` importable by the tests of this folder (pytest runs with
--import-mode=importlib, which does not add test folders to sys.path)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
