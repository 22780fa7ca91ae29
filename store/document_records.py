"""`.docs/<name>.msgpack` beside a converted or sectioned file: what the indexer made of it.

It holds the converted text of a document whose bytes are not its text (PDF, Office, HTML),
so reads serve text without converting again, and its sections (anchor, title, lines, page,
content hash), so a re-ingest re-embeds only the sections whose text changed (the others' vectors
are read back from their rows in the index log) and drops the rows of sections that are gone.
Like `.index.json` it is a cache: a missing or stale record is rebuilt from the file.
"""

from __future__ import annotations

import msgspec

from skald.store.treeport import Tree, join, parent

DOCS_DIR = ".docs"


class SectionRecord(msgspec.Struct, kw_only=True, array_like=True):
    """One section of a document as indexed: anchor, title path, line range, page and the digest its vector was
    made from."""

    anchor: str
    title: str
    start: int
    end: int
    page: int
    sha: str
    model: str = ""
    vector: bytes = b""  # written by records from before: the index log's row holds the vector now


class DocRecord(msgspec.Struct, kw_only=True):
    """What the indexer made of one document: the digest of its bytes, its format and title, its converted text
    (when that is not the file's own) and its sections."""

    sha: str  # of the file's bytes
    format: str
    title: str = ""
    text: str = ""  # the converted text, only when it is not the file's own
    sections: list[SectionRecord] = []


_dec = msgspec.msgpack.Decoder(DocRecord)
_enc = msgspec.msgpack.Encoder()


def record_key(file: str) -> str:
    """Where a file's record lives: `.docs/<name>.msgpack` in its directory."""
    return join(parent(file), DOCS_DIR, f"{file.rpartition('/')[2]}.msgpack")


def load(tree: Tree, file: str) -> DocRecord | None:
    try:
        return decoded(tree.read(record_key(file)))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def decoded(data: bytes | None) -> DocRecord | None:
    """A record from its bytes (None: no record, or one that does not decode, to be rebuilt)."""
    try:
        return None if data is None else _dec.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


LOADED_AT_ONCE = 256  # records one `read_many` asks for


def load_many(tree: Tree, files: list[str]) -> list[DocRecord | None]:
    """`load` of each file, LOADED_AT_ONCE records to a `Tree.read_many` (one exchange on the
    JetStream tree, where a record at a time took a round trip each)."""
    out: list[DocRecord | None] = []
    for at in range(0, len(files), LOADED_AT_ONCE):
        out += [decoded(data) for data in tree.read_many([record_key(f) for f in files[at:at + LOADED_AT_ONCE]])]
    return out


def save(tree: Tree, file: str, rec: DocRecord) -> None:
    tree.write(record_key(file), _enc.encode(rec))


def remove(tree: Tree, file: str) -> None:
    try:
        tree.remove(record_key(file))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        pass
