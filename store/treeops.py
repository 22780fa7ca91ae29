"""What actors do to the tree, over the Tree port by key: typed reads, visible listings, walks,
removals and moves. The port speaks the file system's errors; these helpers turn them into Skald's
(NOT_FOUND, INVALID_ARGUMENT, CONFLICT) as requests expect, and hide what a listing never shows
(temp files, and dot-files unless asked), so the same handler code runs on one disk or on JetStream.
"""

from __future__ import annotations

from collections.abc import Iterator

from skald.messages.errors import Conflict, InvalidArgument, NotFound
from skald.store.tree import MAX_READ_BYTES, visible
from skald.store.treeport import Entry, StoreUnavailable, Tree, join, parent


def mtime_ns(e: Entry) -> int:
    """An entry's modification time in whole nanoseconds (what the sidecar compares)."""
    return round(e.mtime * 1e9)


def is_dir(t: Tree, key: str) -> bool:
    e = t.stat(key)
    return e is not None and e.is_dir


def is_file(t: Tree, key: str) -> bool:
    e = t.stat(key)
    return e is not None and not e.is_dir


def _name(key: str) -> str:
    return key.rpartition("/")[2]


def read_bytes(t: Tree, key: str, limit: int = MAX_READ_BYTES) -> bytes:
    """A file's bytes, with the typed errors a request answers: NOT_FOUND, a directory, too large."""
    try:
        data = t.read(key)
    except (FileNotFoundError, NotADirectoryError) as e:
        raise NotFound("no such file", {"path": _name(key)}) from e
    except IsADirectoryError as e:
        raise InvalidArgument("is a directory", {"path": _name(key)}) from e
    return _within(data, limit)


def read_bytes_and(t: Tree, key: str, others: list[str],
                   limit: int = MAX_READ_BYTES) -> tuple[bytes, list[bytes | None]]:
    """`read_bytes` of `key` with the bytes of `others` (None where there is no file), read
    together (`Tree.read_many`: one exchange on the JetStream tree)."""
    got = t.read_many([key, *others])
    data = got[0] if got[0] is not None else read_bytes(t, key, limit)  # the typed error of what is there
    return _within(data, limit), got[1:]


def _within(data: bytes, limit: int) -> bytes:
    if len(data) > limit:
        raise InvalidArgument("file too large to read in one request", {"max": limit})
    return data


def read_text(t: Tree, key: str, default: str | None = None) -> str | None:
    """A file's text, or `default` when there is no such file."""
    try:
        return t.read(key).decode("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return default


def listdir(t: Tree, key: str, show_hidden: bool = False, missing_ok: bool = False,
            details: bool = True) -> list[Entry]:
    """A directory's visible entries, sorted. `missing_ok` is for walks: a directory removed by a
    concurrent writer after its parent was listed is simply gone, not an error. `details`: as
    `Tree.list` (False: names and kinds only)."""
    try:
        return [e for e in t.list(key, details=details) if visible(e.name, show_hidden)]
    except FileNotFoundError as e:
        if missing_ok:
            return []
        raise NotFound("no such directory", {"path": _name(key)}) from e
    except NotADirectoryError as e:
        if missing_ok:
            return []
        raise InvalidArgument("not a directory", {"path": _name(key)}) from e


def walk(t: Tree, key: str, max_depth: int = 64, show_hidden: bool = False) -> Iterator[tuple[str, Entry, int]]:
    """Every node under `key` (depth-first, sorted), as (key, entry, depth below `key`)."""
    stack: list[tuple[str, int]] = [(key, 0)]
    while stack:
        d, depth = stack.pop()
        subdirs = []
        for e in listdir(t, d, show_hidden, missing_ok=True):
            k = join(d, e.name)
            yield k, e, depth
            if e.is_dir and depth < max_depth:
                subdirs.append((k, depth + 1))
        stack.extend(reversed(subdirs))


def walk_files(t: Tree, key: str, max_depth: int = 64, show_hidden: bool = False) -> Iterator[tuple[str, Entry, int]]:
    """The files under `key` (depth-first, sorted) with their depth below it."""
    return ((k, e, d) for k, e, d in walk(t, key, max_depth, show_hidden) if not e.is_dir)


def walk_dirs_bottom_up(t: Tree, key: str) -> list[str]:
    """Every directory under `key` (`key` included), children before parents."""
    out = [key, *(k for k, e, _ in walk(t, key) if e.is_dir)]
    out.sort(key=lambda k: k.count("/"), reverse=True)
    return out


def remove(t: Tree, key: str, recursive: bool) -> None:
    """Remove a file or a directory; a directory with visible entries needs `recursive`; one
    removed meanwhile by someone else is NOT_FOUND, never a crash."""
    e = t.stat(key)
    if e is None:
        raise NotFound("no such file or directory", {"path": _name(key)})
    if e.is_dir and not recursive and listdir(t, key, missing_ok=True, details=False):
        raise Conflict("directory not empty; pass recursive", {"path": _name(key)})
    try:
        removed = t.remove(key, recursive=True)
    except NotADirectoryError:
        removed = False
    if not removed:
        raise NotFound("no such file or directory", {"path": _name(key)})


def move(t: Tree, src: str, dst: str) -> None:
    """Move a node to a key that does not exist yet, with the typed errors a request answers."""
    if t.stat(src) is None:
        raise NotFound("no such file or directory", {"path": _name(src)})
    try:
        t.move(src, dst)
    except FileNotFoundError as e:  # moved or removed by a concurrent writer
        raise NotFound("no such file or directory", {"path": _name(src)}) from e
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as e:
        raise Conflict("destination exists", {"path": _name(dst)}) from e
    except StoreUnavailable:
        raise  # not an answer about the destination: UNAVAILABLE, to be asked again
    except OSError as e:  # ENOTEMPTY / EEXIST: created by a concurrent writer meanwhile
        raise Conflict("destination exists", {"path": _name(dst)}) from e


def write(t: Tree, key: str, data: bytes, *, durable: bool = True) -> bool:
    """Replace a file atomically (True when one was there); a directory or a file in the way is a
    typed refusal."""
    try:
        return t.write(key, data, durable=durable)
    except IsADirectoryError as e:
        raise InvalidArgument("is a directory", {"path": _name(key)}) from e
    except NotADirectoryError as e:
        raise InvalidArgument("a file is in the way", {"path": _name(parent(key))}) from e
    except FileNotFoundError as e:
        raise Conflict("the directory was removed meanwhile; retry", {"path": _name(parent(key))}) from e
