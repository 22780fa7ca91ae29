"""The copy that keeps an imported target in step with its source (which files an import takes is
the contract's rule, `skald.messages.folders`): from a local source directory into the tree."""

from __future__ import annotations

from pathlib import Path

from skald.store import treeops
from skald.store.treeport import Tree, join


def existing_files(tree: Tree, dst: str) -> list[str]:
    """Relative paths of the visible files already under `dst` (what an earlier import left)."""
    st = tree.stat(dst)
    if st is None:
        return []
    if not st.is_dir:
        return [dst.rpartition("/")[2]]
    return sorted(k[len(dst) + 1:] for k, _, _ in treeops.walk_files(tree, dst))


def copy_selected(tree: Tree, src: Path, files: list[str], dst: str) -> None:
    """Copy `files` (relative to `src`) into `dst`, each atomically."""
    if src.is_file():
        treeops.write(tree, dst, src.read_bytes())
        return
    tree.mkdir(dst)
    for rel in files:
        treeops.write(tree, join(dst, rel), (src / rel).read_bytes())
