"""Where an imported resource comes from when it is not a server path: an http(s) URL (bounded
in size and time; the content type decides the file's extension, so the parser), a git
repository (a shallow clone by the `git` command), or an upload (files a client sent piece by
piece into `{data}/uploads/{account}/{upload_id}/`, owned by the user who sent them).
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import re
import shutil
import time
import zipfile
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from skald.messages.errors import Conflict, DeadlineExceeded, InvalidArgument, NotFound, PermissionDenied, Unavailable
from skald.messages.ingest import Skipped
from skald.store import treeops, uri
from skald.store.treeport import Tree

URL_MAX_BYTES = 32 * 1024 * 1024
URL_TIMEOUT_S = 30.0
GIT_TIMEOUT_S = 300.0
UPLOAD_TTL_S = 24 * 3600
UNZIP_MAX_FILES = 20_000
UNZIP_MAX_BYTES = 1024 * 1024 * 1024  # an upload never added is swept after a day
_GIT_HOSTS = ("github.com", "gitlab.com", "bitbucket.org", "codeberg.org")
_EXT = {"text/html": ".html", "application/xhtml+xml": ".html", "application/pdf": ".pdf", "text/markdown": ".md",
        "text/plain": ".txt", "application/json": ".json"}


def is_git_url(url: str) -> bool:
    u = urlparse(url)
    if u.scheme in ("git", "ssh", "file") or u.path.endswith(".git"):
        return True
    parts = [p for p in u.path.split("/") if p]
    return u.scheme in ("http", "https") and u.hostname in _GIT_HOSTS and len(parts) == 2


def url_name(url: str, content_type: str) -> str:
    """A file name for a fetched URL: its last path segment, with the extension its type says."""
    u = urlparse(url)
    base = PurePosixPath(u.path).name or (u.hostname or "page")
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.") or "page"
    ctype = content_type.split(";")[0].strip().lower()
    ext = _EXT.get(ctype) or mimetypes.guess_extension(ctype) or ""
    return base if not ext or base.lower().endswith(ext) else base + ext


async def fetch_url(url: str, dest: Path) -> Path:
    """Download into `dest`; the size and the time are bounded, a failure says which it was.
    httpx is imported here, by the first URL: it is 80 ms of a worker's start otherwise."""
    import httpx

    try:
        async with httpx.AsyncClient(follow_redirects=True, timeout=URL_TIMEOUT_S) as client:
            async with asyncio.timeout(URL_TIMEOUT_S):
                async with client.stream("GET", url) as resp:
                    if resp.status_code >= 400:
                        raise NotFound(f"the URL answered HTTP {resp.status_code}", {"url": url})
                    declared = int(resp.headers.get("content-length") or 0)
                    if declared > URL_MAX_BYTES:
                        raise InvalidArgument("the URL's content is too large", {"url": url, "max": URL_MAX_BYTES})
                    chunks, size = [], 0
                    async for chunk in resp.aiter_bytes():
                        size += len(chunk)
                        if size > URL_MAX_BYTES:
                            raise InvalidArgument("the URL's content is too large", {"url": url, "max": URL_MAX_BYTES})
                        chunks.append(chunk)
                    name = url_name(str(resp.url), resp.headers.get("content-type", ""))
    except TimeoutError as e:
        raise DeadlineExceeded("fetching the URL took too long", {"url": url, "timeout_s": URL_TIMEOUT_S}) from e
    except httpx.HTTPError as e:
        raise Unavailable(f"cannot fetch the URL: {type(e).__name__}", {"url": url}) from e
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / name
    out.write_bytes(b"".join(chunks))
    return out


async def clone_git(url: str, dest: Path) -> Path:
    """A shallow clone of the default branch into `dest/<repository name>`."""
    name = re.sub(r"\.git$", "", PurePosixPath(urlparse(url).path).name) or "repository"
    target = dest / name
    dest.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    proc = await asyncio.create_subprocess_exec("git", "clone", "--depth", "1", "--quiet", "--", url, str(target),
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                                                env=env)
    try:
        async with asyncio.timeout(GIT_TIMEOUT_S):
            _, err = await proc.communicate()
    except TimeoutError as e:
        proc.kill()
        raise DeadlineExceeded("cloning the repository took too long", {"url": url}) from e
    if proc.returncode != 0:
        raise NotFound("cannot clone the repository", {"url": url, "git": err.decode(errors="replace")[-500:]})
    return target


def upload_root(account: str, upload_id: str) -> str:
    """An upload's key in the tree: uploads live where the tree does, so a piece sent to one worker
    and the next piece (or the add) sent to another find the same bytes."""
    return f"uploads/{uri.check_name('account', account)}/{uri.check_name('upload', upload_id)}"


def check_owner(t: Tree, root: str, user: str, create: bool) -> None:
    """An upload belongs to the user who started it; nobody else may add to it or import it."""
    owner = f"{root}/.owner"
    if create:
        t.create(owner, user.encode())
    try:
        who = t.read(owner).decode()
    except FileNotFoundError as e:
        raise NotFound("no such upload", {"upload_id": root.rpartition("/")[2]}) from e
    if who != user:
        raise PermissionDenied("the upload belongs to another user", {"upload_id": root.rpartition("/")[2]})


def upload_key(root: str, rel: str) -> str:
    parts = [p for p in rel.replace("\\", "/").split("/") if p]
    if not parts or any(p in (".", "..") or p.startswith(".") for p in parts):
        raise InvalidArgument("an upload path is relative, without '..' or hidden names", {"path": rel})
    if any(len(p.encode("utf-8", "surrogatepass")) > uri.MAX_SEGMENT or "\x00" in p for p in parts):
        raise InvalidArgument("an upload path's names are at most 255 bytes, without NUL",
                              {"path": rel[:300], "max": uri.MAX_SEGMENT})
    return "/".join((root, "files", *parts))


def write_piece(t: Tree, root: str, rel: str, offset: int, data: bytes, limit: int,
                size: int | None = None) -> int | None:
    """Write one piece at `offset` (0 starts the file over, the current size appends); the file's
    new size, or None when the file is refused as larger than `limit` (declared so with its first
    piece: noted under `refused/` for the add to report). A piece that would take the file past the
    limit is refused with an error and what was sent of the file dropped."""
    key = upload_key(root, rel)
    st = t.stat(key)
    current = st.size if st is not None and not st.is_dir else 0
    if offset not in (0, current):
        raise Conflict("a piece must start the file (offset 0) or follow its end", {"path": rel, "size": current})
    if offset == 0 and size is not None and size > limit:
        t.write(refused_key(root, rel), str(size).encode())
        return None
    if offset + len(data) > limit:
        if st is not None and not st.is_dir:
            t.remove(key)
        raise too_large(rel, offset + len(data), limit)
    try:
        if offset:
            t.append(key, data)
        else:
            t.write(key, data)
    except (IsADirectoryError, NotADirectoryError) as e:
        raise Conflict("a file and a folder of the upload have the same name", {"path": rel}) from e
    return offset + len(data)


def too_large_message(what: str, size: int, limit: int) -> str:
    """The one wording of the per-file limit, with how to raise it."""
    return (f"{what} is {size:,} bytes, over the per-file limit of {limit:,} bytes "
            f"(SKALD_MAX_FILE_MB on the workers raises it)")


def too_large(path: str, size: int, limit: int) -> InvalidArgument:
    """The refusal of a single file over the limit (nothing of it is stored)."""
    return InvalidArgument(too_large_message(path, size, limit), {"path": path, "reason": "too_large",
                                                                  "max_bytes": limit})


def too_large_skip(uri: str, size: int, limit: int) -> Skipped:
    """A folder's file over the limit, as the add reports it (not stored; the rest goes on)."""
    return Skipped(uri=uri, reason="too_large", detail=too_large_message("the file", size, limit))


def refused_key(root: str, rel: str) -> str:
    return upload_key(root, rel).replace(f"{root}/files/", f"{root}/refused/", 1)


def refused(t: Tree, root: str) -> list[tuple[str, int]]:
    """The files of an upload refused as too large: (relative path, declared size)."""
    base = f"{root}/refused"
    return [(key[len(base) + 1:], int(t.read(key) or b"0")) for key, _, _ in treeops.walk_files(t, base)]


def materialise(t: Tree, root: str, dest: Path) -> Path:
    """An upload's files copied out of the tree into a local scratch directory (`dest/files`), where
    an import reads them."""
    base = f"{root}/files"
    out = dest / "files"
    out.mkdir(parents=True, exist_ok=True)
    for key, _, _ in treeops.walk_files(t, base):
        target = out.joinpath(*key[len(base) + 1:].split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(t.read(key))
    return out


def unzip(archive: Path, dest: Path) -> Path:
    """Unpack safely: no absolute paths, no `..`, no links, bounded in count and total size."""
    total = 0
    with zipfile.ZipFile(archive) as z:
        infos = [i for i in z.infolist() if not i.is_dir()]
        if len(infos) > UNZIP_MAX_FILES:
            raise InvalidArgument("the archive holds too many files", {"max": UNZIP_MAX_FILES})
        for info in infos:
            parts = [p for p in info.filename.replace("\\", "/").split("/") if p]
            if not parts or info.filename.startswith("/") or any(p == ".." for p in parts):
                raise InvalidArgument("the archive has a path outside itself", {"entry": info.filename})
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                continue  # a symbolic link
            total += info.file_size
            if total > UNZIP_MAX_BYTES:
                raise InvalidArgument("the archive unpacks to too much", {"max": UNZIP_MAX_BYTES})
            out = dest.joinpath(*parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst)
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def sweep(t: Tree, now: float | None = None) -> int:
    """Remove uploads older than a day that were never added; how many went."""
    cutoff = (now or time.time()) - UPLOAD_TTL_S
    gone = 0
    for account in treeops.listdir(t, "uploads", missing_ok=True, details=False):
        for up in treeops.listdir(t, f"uploads/{account.name}", show_hidden=True, missing_ok=True, details=False):
            owner = t.stat(f"uploads/{account.name}/{up.name}/.owner")
            if owner is not None and owner.mtime < cutoff:
                t.remove(f"uploads/{account.name}/{up.name}", recursive=True)
                gone += 1
    return gone
