"""Generate the Python stubs of ``protos/carico/v1/*.proto`` (``python -m protos.generate``).

The .proto files are compiled with the repository root as the include path, so the generated
modules import each other as ``protos.carico.v1.*`` and never collide with the ``carico`` package.
``--check`` regenerates into a temporary folder and exits 1 if the committed stubs differ.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos" / "carico" / "v1"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def _plugin(name: str) -> str:
    # The plugins are console scripts installed beside this interpreter; PATH may not include them.
    candidate = Path(sys.executable).parent / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"{name} not found: install the dev extras (make install)")
    return found


def generate(out_root: Path) -> list[Path]:
    """Compile every .proto into ``out_root/protos/carico/v1``; return the files written."""
    # grpc_tools (dev-only) is located, not imported: see the subprocess call below.
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or spec.origin is None:
        raise SystemExit("grpc_tools not found: install the dev extras (make install)")
    protos = sorted(PROTO_DIR.glob("*.proto"))
    include = Path(spec.origin).parent / "_proto"
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *(str(p.relative_to(ROOT)) for p in protos),
    ]
    # In a child process: importing grpc_tools.protoc crashes a process that has already loaded
    # OR-Tools (both bundle a protobuf runtime), as a test run that exercises the repacker has.
    if subprocess.call([sys.executable, "-m", "grpc_tools.protoc", *args[1:]]) != 0:
        raise SystemExit("protoc failed")
    out_dir = out_root / "protos" / "carico" / "v1"
    return sorted(p for p in out_dir.iterdir() if p.name.endswith(SUFFIXES))


def stale_files() -> list[str]:
    """Names of committed stubs that differ from a fresh generation (missing or extra included)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p for p in generate(Path(tmp))}
        committed = {p.name: p for p in PROTO_DIR.iterdir() if p.name.endswith(SUFFIXES)}
        names = set(fresh) | set(committed)
        return sorted(
            n
            for n in names
            if n not in fresh
            or n not in committed
            or not filecmp.cmp(fresh[n], committed[n], shallow=False)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale stubs")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: protos/carico/v1/{name}")
        return 1 if stale else 0
    for path in generate(ROOT):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
