"""Memories merged, not piled up: where a new memory's fact already lives, and which paths are
memories at all. `store/memory_history.py` keeps the versions a merge or an update replaces."""

from __future__ import annotations

from skald.store import memory_history
from skald.store.treeport import Tree, join
from skald.store.uri import VikingPath

APPEND_ONLY = frozenset({"events"})  # what happened is never merged away; facts about things are
MERGE_SCAN_MAX = 2_000  # memories of one category a new one is compared with (beyond: a new file)
READ_BATCH = 256  # memories read at once (one exchange on the JetStream tree); the first match ends the scan


def same_fact_in(tree: Tree, category_dir: str, content: str) -> str | None:
    """The name of the memory in `category_dir` (a key) that already says `content` (exactly or
    nearly), if any."""
    try:
        names = [e.name for e in tree.list(category_dir, details=False)
                 if not e.is_dir and e.name.endswith(".md") and not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return None
    names = names[:MERGE_SCAN_MAX]
    for start in range(0, len(names), READ_BATCH):
        batch = names[start:start + READ_BATCH]
        for name, data in zip(batch, tree.read_many([join(category_dir, n) for n in batch]), strict=True):
            try:
                if data is not None and memory_history.same_fact(data.decode("utf-8"), content):
                    return name
            except UnicodeDecodeError:
                continue
    return None


def is_memory_file(vp: VikingPath) -> bool:
    """`.../memories/<category>/<name>` in a user's space (their own or a peer's) or the agent's."""
    s = vp.segments
    return len(s) >= 3 and s[-3] == "memories" and not any(x.startswith(".") for x in s)
