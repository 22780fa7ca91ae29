"""`viking://` URIs: parsing, tenancy and the mapping onto the data directory.

Every URI a request carries goes through `resolve()` before anything touches the disk, so
traversal (`..`, percent-encoded dots, absolute paths, backslashes, symlinks out of the tree)
and cross-tenant access are refused in one place.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from skald.messages.errors import InvalidArgument, PermissionDenied
from skald.store.local_tree import LocalTree
from skald.store.treeport import Tree

SCHEME = "viking://"
ROOTS = ("resources", "user", "agent")
# `viking://user/memories` has no user id: the seeds refuse it and point at `viking://~/...`.
RESERVED_USER_SEGMENTS = frozenset({"memories", "resources", "skills", "peers", "privacy", "sessions"})
# Only these spaces exist under a peer (docs/design/retrieval.md, results).
PEER_SEARCHABLE = frozenset({"memories", "resources"})
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")
MAX_URI = 4096
_FORBIDDEN = re.compile(r"[\x00-\x1f\\]")  # control characters and backslashes, anywhere in a URI
MAX_SEGMENT = 255


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is asking: tenancy is (account, user, agent), narrowed to one peer when given."""

    account: str = "default"
    user: str = "default"
    agent: str = "default"
    peer: str | None = None
    is_root: bool = False
    role: str = "local"  # local (no keys configured) | root | admin | user | worker

    @property
    def user_root(self) -> str:
        return f"{SCHEME}user/{self.user}"


def check_name(kind: str, value: str) -> str:
    if not NAME_RE.match(value) or ".." in value:
        raise InvalidArgument(f"invalid {kind} {value!r}", {"field": kind})
    return value


@dataclass(frozen=True, slots=True)
class VikingPath:
    """A resolved URI: its canonical form, its segments and its place on disk."""

    uri: str
    segments: tuple[str, ...]
    account: str
    path: Path
    key: str  # where it lives in the tree (the Tree port's key): `accounts/<account>/<segments...>`

    @property
    def is_root(self) -> bool:
        return not self.segments

    @property
    def name(self) -> str:
        return self.segments[-1] if self.segments else ""

    @property
    def parent_uri(self) -> str:
        return join_uri(self.segments[:-1]) if self.segments else ""


def join_uri(segments: tuple[str, ...] | list[str]) -> str:
    return SCHEME + "/".join(segments)


def split_uri(uri: str) -> list[str]:
    """Segments of a URI string, refusing anything that could escape the tree."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME):
        raise InvalidArgument(f"not a viking:// URI: {uri!r}", {"uri": uri})
    if len(uri) > MAX_URI:
        raise InvalidArgument("URI too long", {"max": MAX_URI})
    raw = uri[len(SCHEME) :]
    decoded = unquote(raw) if "%" in raw else raw
    if "%" in decoded and unquote(decoded) != decoded:
        raise InvalidArgument("doubly encoded URI refused", {"uri": uri})
    if _FORBIDDEN.search(decoded):
        raise InvalidArgument("URI contains a forbidden character", {"uri": uri})
    if decoded.startswith("/"):
        raise InvalidArgument("absolute paths are not URIs", {"uri": uri})
    parts = decoded.rstrip("/").split("/") if decoded.strip("/") else []
    for seg in parts:
        if seg in ("", ".", ".."):
            raise InvalidArgument("path traversal refused", {"uri": uri})
        if len(seg.encode()) > MAX_SEGMENT:
            raise InvalidArgument("URI segment too long", {"max": MAX_SEGMENT})
    return parts


def canonical(uri: str, ident: Identity) -> tuple[str, ...]:
    """Expand `viking://~`, check the root and the tenant; return the canonical segments."""
    parts = split_uri(uri)
    if parts and parts[0] == "~":
        parts = ["user", ident.user, *parts[1:]]
    if not parts:
        return ()
    if parts[0] not in ROOTS:
        raise InvalidArgument(f"unknown root viking://{parts[0]}", {"roots": list(ROOTS)})
    if parts[0] == "user" and len(parts) > 1:
        uid = parts[1]
        if uid in RESERVED_USER_SEGMENTS:
            raise InvalidArgument(
                f"viking://user/{uid} has no user id; use viking://~/{uid}", {"uri": uri}
            )
        check_name("user", uid)
        if uid != ident.user and not ident.is_root:
            raise PermissionDenied("another user's space", {"uri": uri})
        if len(parts) > 3 and parts[2] == "peers":
            peer = parts[3]
            if ident.peer is not None and peer != ident.peer and not ident.is_root:
                raise PermissionDenied("another peer's space", {"uri": uri})
    return tuple(parts)


class Namespace:
    """Maps canonical segments of one account onto `{data}/accounts/{account}/...`."""

    def __init__(self, data_dir: Path, tree: Tree | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.accounts = self.data_dir / "accounts"
        # Where the files live, by key (the Tree port): this directory unless a backend is given.
        self.tree: Tree = tree if tree is not None else LocalTree(self.data_dir)
        self._safe_dirs: set[str] = set()
        self._roots: dict[str, Path] = {}

    def account_root(self, account: str) -> Path:
        root = self._roots.get(account)
        if root is None:
            root = self._roots[account] = self.accounts / check_name("account", account)
        return root

    @staticmethod
    def account_key(account: str) -> str:
        return f"accounts/{check_name('account', account)}"

    def resolve(self, uri: str, ident: Identity) -> VikingPath:
        segs = canonical(uri, ident)
        root = self.account_root(ident.account)
        self._refuse_escape(str(root), segs, uri)
        path = Path(os.path.join(root, *segs)) if segs else root
        return VikingPath(join_uri(segs), segs, ident.account, path, "/".join(("accounts", ident.account, *segs)))

    def key_of(self, uri: str, ident: Identity) -> str:
        """`resolve(uri, ident).key`, with the same checks and no pathlib: for hot read paths."""
        segs = canonical(uri, ident)
        self._refuse_escape(str(self.account_root(ident.account)), segs, uri)
        return "/".join(("accounts", ident.account, *segs))

    def from_key(self, account: str, key: str) -> VikingPath:
        """The node a tree key names (a key under the account's root, as a walk of the tree yields)."""
        base = self.account_key(account)
        if key != base and not key.startswith(base + "/"):
            raise ValueError(f"{key!r} is not under {base!r}")
        segs = tuple(key[len(base) + 1:].split("/")) if key != base else ()
        root = self.account_root(account)
        return VikingPath(join_uri(segs), segs, account, Path(os.path.join(root, *segs)) if segs else root, key)

    def child(self, parent: VikingPath, name: str) -> VikingPath:
        segs = (*parent.segments, name)
        return VikingPath(join_uri(segs), segs, parent.account, parent.path / name, f"{parent.key}/{name}")

    def _refuse_escape(self, root: str, parts: tuple[str, ...], uri: str) -> None:
        """No symlink anywhere between the account root and the path (Skald never makes one, so
        one there was planted): checked component by component with lstat. Directories already
        verified are remembered; the checked path's own last component is always looked at.
        Plain strings, not pathlib: this runs on every request."""
        cur = root
        last_i = len(parts) - 1
        for i, part in enumerate(parts):
            cur = cur + os.sep + part
            if i != last_i and cur in self._safe_dirs:
                continue
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                return
            except NotADirectoryError as e:
                raise InvalidArgument("a file is in the way", {"uri": uri}) from e
            if stat.S_ISLNK(st.st_mode):
                raise PermissionDenied("symlinks are not followed", {"uri": uri})
            if stat.S_ISDIR(st.st_mode):
                if len(self._safe_dirs) > 200_000:
                    self._safe_dirs.clear()
                self._safe_dirs.add(cur)


LEVEL_FILES = (".abstract.md", ".overview.md")  # how a directory's L0 / L1 is served


def node_of(uri: str, ident: Identity) -> str:
    """The canonical URI of the node a served URI names, as the index keys it: `~` resolved, the
    tenant checked, a directory's `.abstract.md` / `.overview.md` dropped; a section's `#anchor` kept."""
    base, sep, anchor = uri.partition("#")
    parts = canonical(base, ident)
    if parts and parts[-1] in LEVEL_FILES:
        parts = parts[:-1]
    return join_uri(parts) + (sep + anchor if sep else "")


def context_type_of(segments: tuple[str, ...]) -> str:
    """memory / skill / resource, from where a node lives."""
    if "memories" in segments[:5] and segments[:1] == ("user",):
        return "memory"
    if "skills" in segments[:3]:
        return "skill"
    return "resource"


def category_of(segments: tuple[str, ...]) -> str:
    """The memory category: the segment after `memories` (events, entities, ...)."""
    if "memories" in segments:
        i = segments.index("memories")
        if i + 1 < len(segments):
            return segments[i + 1]
    return ""


def default_roots(ident: Identity, context_type: str | None = None) -> list[str]:
    """Where a search with no target looks (docs/design/retrieval-api.md: the user's root and public resources)."""
    user = ident.user_root
    if ident.peer:
        user_spaces = [f"{user}/peers/{ident.peer}/memories", f"{user}/peers/{ident.peer}/resources"]
    else:
        user_spaces = [user]
    if context_type == "memory":
        return [f"{u}" for u in user_spaces] if ident.peer else [f"{user}/memories"]
    if context_type == "skill":
        return [f"{user}/skills", f"{SCHEME}agent/skills"]
    if context_type == "resource":
        return [f"{SCHEME}resources", *user_spaces]
    return [*user_spaces, f"{SCHEME}resources", f"{SCHEME}agent/skills"]
