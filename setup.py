"""Installs the four top-level folders as one namespace: `skald.messages`, `skald.store`,
`skald.actors`, `skald.runtime`. Everything else (metadata, dependencies) is in pyproject.toml.

The package list is computed from the tree: every folder holding Python files under the four
roots is a package of the wheel, so a new sub-package is never silently left out
(`tests/unit/test_packaging.py` builds the wheel and checks it).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup

ROOTS = ("messages", "store", "actors", "runtime")


def packages(base: Path = Path(__file__).resolve().parent) -> list[str]:
    """`skald.<root>[.<sub>...]` for every folder with a .py file under the four roots."""
    out = []
    for root in ROOTS:
        for d in sorted({p.parent for p in (base / root).rglob("*.py")}):
            rel = d.relative_to(base)
            if "__pycache__" not in rel.parts:
                out.append("skald." + ".".join(rel.parts))
    return out


if __name__ == "__main__":
    # Data the code reads beside it: the default model's int8 calibration (runtime/models/e5onnx.py).
    setup(packages=packages(), package_dir={f"skald.{r}": r for r in ROOTS},
          package_data={"skald.runtime.models": ["e5int8.npz"]})
