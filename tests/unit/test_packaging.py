"""The wheel installs Skald under one namespace, `skald.*`, with every package of the tree in it,
and nothing generic (`messages`, `store`, ...) lands in a user's site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("messages", "store", "actors", "runtime")



def tree_packages() -> set[str]:
    """Every folder holding Python code under the four roots, as the package the wheel must have."""
    return {"skald." + ".".join(d.relative_to(ROOT).parts)
            for r in ROOTS for d in {p.parent for p in (ROOT / r).rglob("*.py")}
            if "__pycache__" not in d.parts}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the sources, so the checkout gets no build/ or egg-info."""
    src = tmp_path_factory.mktemp("src")
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for r in ROOTS:
        shutil.copytree(ROOT / r, src / r, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return next(out.glob("skald_context-*.whl"))


def test_wheel_holds_every_package_under_skald(wheel: Path) -> None:
    """A new sub-package is never left out of the wheel, and nothing else is top-level."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"skald"}
    in_wheel = {"skald." + ".".join(Path(n).parent.parts[1:]) for n in names
                if n.startswith("skald/") and n.endswith(".py")}
    assert in_wheel == tree_packages()
    assert "skald/runtime/main.py" in names and "skald/messages/catalog.py" in names
    assert "skald/runtime/models/e5int8.npz" in names  # the default model's int8 calibration


def test_installed_client_ignores_a_hosts_own_messages_and_store(wheel: Path, tmp_path: Path) -> None:
    """From a directory with its own messages.py and store.py, the client imports Skald's modules;
    `import messages` finds nothing of Skald's."""
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                        str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    host = tmp_path / "host"
    host.mkdir()
    for name in ("messages", "store", "actors", "runtime"):
        (host / f"{name}.py").write_text(f"raise SystemExit('the host\\'s own {name}.py was imported')\n")
    deps = sysconfig.get_paths()["purelib"]  # the dependencies; -S keeps its editable-install hooks out
    probe = (f"import sys; sys.path[1:1] = [{str(target)!r}, {deps!r}]\n"
             "import skald.runtime.client.api as c, skald.messages.catalog as cat\n"
             f"assert c.__file__.startswith({str(target)!r}), c.__file__\n"
             "assert 'search.find' in cat.OPS and c.SkaldClient\n"
             "print('ok')\n")
    r = subprocess.run([sys.executable, "-S", "-c", probe], cwd=host, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    bare = (f"import sys; sys.path[1:1] = [{str(target)!r}, {deps!r}]\n"
            "try:\n    import messages\nexcept ModuleNotFoundError:\n    print('absent')\n")
    r = subprocess.run([sys.executable, "-S", "-c", bare], cwd=empty, capture_output=True, text=True)
    assert r.stdout.strip() == "absent", r.stdout + r.stderr
