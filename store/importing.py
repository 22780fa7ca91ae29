"""The copy that keeps an imported target in step with its source (which files an import takes is
the contract's rule, `skald.messages.folders`)."""

from __future__ import annotations

from pathlib import Path

from skald.store import tree


def existing_files(dst: Path) -> list[str]:
    """Relative paths of the visible files already under `dst` (what an earlier import left)."""
    if dst.is_file():
        return [dst.name]
    return sorted(f.relative_to(dst).as_posix() for f, _ in tree.walk_files(dst)) if dst.is_dir() else []


def copy_selected(src: Path, files: list[str], dst: Path) -> None:
    """Copy `files` (relative to `src`) into `dst`, each atomically."""
    if src.is_file():
        tree.write_atomic_sync(dst, src.read_bytes())
        return
    dst.mkdir(parents=True, exist_ok=True)
    for rel in files:
        tree.write_atomic_sync(dst / rel, (src / rel).read_bytes())
