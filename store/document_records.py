"""`.docs/<name>.msgpack` beside a converted or sectioned file: what the indexer made of it.

It holds the converted text of a document whose bytes are not its text (PDF, Office, HTML),
so reads serve text without converting again, and its sections (anchor, title, lines, page,
content hash, vector), so a re-ingest re-embeds only the sections whose text changed and
drops the rows of sections that are gone. Like `.index.json` it is a cache: a missing or stale
record is rebuilt from the file.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from skald.store.tree import write_atomic_sync

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
    vector: bytes = b""


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


def record_path(file: Path) -> Path:
    return file.parent / DOCS_DIR / f"{file.name}.msgpack"


def load(file: Path) -> DocRecord | None:
    try:
        return _dec.decode(record_path(file).read_bytes())
    except (FileNotFoundError, NotADirectoryError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def save(file: Path, rec: DocRecord) -> None:
    p = record_path(file)
    p.parent.mkdir(exist_ok=True)
    write_atomic_sync(p, _enc.encode(rec))


def remove(file: Path) -> None:
    try:
        record_path(file).unlink()
    except (FileNotFoundError, NotADirectoryError):
        pass
