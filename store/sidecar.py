"""`.index.json` in each directory: what the indexer knows of that directory's files (content
hash, abstract, tags), so a directory summary never re-reads or re-summarises unchanged siblings.

It is a cache, never the truth: a missing or stale entry is recomputed from the file.
"""

from __future__ import annotations

import msgspec

from skald.store.treeport import Tree, join

SIDECAR = ".index.json"


class FileFacts(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the indexer knew of a file when it last indexed it (size, mtime, digest, abstract): a changed file is
    told from an unchanged one without reading it."""

    mtime_ns: int
    size: int
    sha: str
    abstract: str
    tags: tuple[str, ...] = ()
    summarizer: str = ""


_dec = msgspec.json.Decoder(dict[str, FileFacts])


def load(tree: Tree, directory: str) -> dict[str, FileFacts]:
    """The facts of a directory (its key), empty when there are none or they cannot be read."""
    try:
        return _dec.decode(tree.read(join(directory, SIDECAR)))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, msgspec.DecodeError, msgspec.ValidationError):
        return {}


def save(tree: Tree, directory: str, facts: dict[str, FileFacts]) -> None:
    tree.write(join(directory, SIDECAR), msgspec.json.encode(dict(sorted(facts.items()))))
