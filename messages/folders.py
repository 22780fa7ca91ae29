"""Which files of a local folder or repository an import takes: a rule of the import contract,
shared by both of its sides.

A folder is walked as git would see it: `.gitignore` files (at any depth, through pathspec's
git-compatible matcher), never `.git` or hidden files, never dependency, virtualenv, cache or
build folders; then the caller's include/exclude globs. Used by the indexer on the server and
by the client before an upload, so both sides take the same files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pathspec

SKIP_DIRS = frozenset({
    "node_modules", "__pycache__", "venv", ".venv", "env", "site-packages", "dist", "build", "target", "out",
    "bower_components", "vendor", ".tox", ".nox", ".eggs", "coverage", "htmlcov",
})
MAX_IMPORT_FILES = 20_000


def _spec(patterns: list[str] | None) -> pathspec.PathSpec | None:
    return pathspec.GitIgnoreSpec.from_lines(patterns) if patterns else None


def select(root: Path, include: list[str] | None = None, exclude: list[str] | None = None,
           keep: Callable[[Path], bool] | None = None) -> list[str]:
    """Relative POSIX paths of the files to import from `root` (a file: its own name), sorted."""
    if root.is_file():
        return [root.name]
    inc, exc = _spec(include), _spec(exclude)
    ignores: list[tuple[str, pathspec.PathSpec]] = []  # (directory relative to root, its .gitignore)
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        rel_dir = d.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        gi = d / ".gitignore"
        if gi.is_file():
            ignores.append((rel_dir, pathspec.GitIgnoreSpec.from_lines(gi.read_text(errors="replace").splitlines())))

        def ignored(rel: str, is_dir: bool) -> bool:
            """The deepest .gitignore with an opinion decides (a nested `!x` re-includes x)."""
            for base, spec in reversed(ignores):
                if base and not rel.startswith(base + "/"):
                    continue
                sub = rel[len(base) + 1:] if base else rel
                verdict = spec.check_file(sub + ("/" if is_dir else "")).include
                if verdict is not None:
                    return verdict
            return False

        keep_dirs = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if name.startswith(".") or name in SKIP_DIRS or (d / name).is_symlink() or ignored(rel, True):
                continue
            keep_dirs.append(name)
        dirnames[:] = keep_dirs
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            p = d / name
            if name.startswith(".") or p.is_symlink() or ignored(rel, False):
                continue
            if (inc is not None and not inc.match_file(rel)) or (exc is not None and exc.match_file(rel)):
                continue
            if not p.is_file():  # a socket or fifo; a file's size is the server's to judge (it reports it)
                continue
            if keep is not None and not keep(p):
                continue
            out.append(rel)
            if len(out) >= MAX_IMPORT_FILES:
                return sorted(out)
    return sorted(out)
