"""The type checker on the wire contract, the store and the client agents import:

    .venv/bin/python -m support.typecheck

The four folders install as `skald.*` through a package-dir mapping that mypy cannot follow, so
this lays a `skald/` folder of links to them in a temporary directory and points mypy there; the
settings are `[tool.mypy]` in pyproject.toml. Exits with mypy's status."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("messages", "store", "actors", "runtime")
CHECKED = ("skald.messages", "skald.store", "skald.runtime.client")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="skald-typecheck-") as tmp:
        pkg = Path(tmp) / "skald"
        pkg.mkdir()
        for root in ROOTS:
            (pkg / root).symlink_to(ROOT / root, target_is_directory=True)
        os.environ["MYPYPATH"] = tmp
        args = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache")]
        for p in CHECKED:
            args += ["-p", p]
        out, err, status = api.run(args)
    sys.stdout.write(out.replace(tmp + "/skald/", ""))
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main())
