"""grep and glob over the tree (run in a worker thread), and glob pattern translation (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from skald.messages.search import ContextLine, GrepMatch
from skald.store import sidecar, tree
from skald.store.uri import Namespace, VikingPath, join_uri

MAX_LINE = 2_000  # characters of a matched line returned


def visible_starts(ns: Namespace, vp: VikingPath, user: str, is_root: bool) -> list[VikingPath]:
    """Where a walk from `vp` may go: from the top, only the caller's spaces."""
    if vp.segments == () and not is_root:
        out = [ns.child(vp, "resources"), ns.child(vp, "agent"), ns.child(ns.child(vp, "user"), user)]
        return [p for p in out if p.path.exists()]
    if vp.segments == ("user",) and not is_root:
        p = ns.child(vp, user)
        return [p] if p.path.exists() else []
    return [vp]


def glob_regex(pattern: str) -> re.Pattern[str]:
    """`*` within a segment, `**` across segments, `?` one character, `[...]` a class."""
    i, out = 0, []
    p = pattern.lstrip("/")
    while i < len(p):
        c = p[i]
        if p.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif p.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = p.find("]", i + 2 if p[i + 1 : i + 2] in ("!", "]") else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = p[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def walk_nodes(start: Path, max_depth: int = 64) -> Iterator[tuple[Path, bool, int]]:
    """(path, is_dir, depth) for every visible node under `start`, sorted, depth-first."""
    stack: list[tuple[Path, int]] = [(start, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = tree.listdir_sorted(d)
        except Exception:  # noqa: BLE001 - a directory removed mid-walk is skipped
            continue
        subdirs = []
        for e in entries:
            p = Path(e.path)
            is_dir = e.is_dir(follow_symlinks=False)
            yield p, is_dir, depth + 1
            if is_dir and depth + 1 < max_depth:
                subdirs.append((p, depth + 1))
        stack.extend(reversed(subdirs))


def glob(ns: Namespace, starts: list[VikingPath], base: VikingPath, pattern: re.Pattern[str],
         limit: int, want_tags: frozenset[str] | None) -> tuple[list[tuple[str, Path, bool, tuple[str, ...]]], bool]:
    out: list[tuple[str, Path, bool, tuple[str, ...]]] = []
    facts_cache: dict[Path, dict[str, sidecar.FileFacts]] = {}
    base_len = len(base.segments)
    for start in starts:
        if not start.path.is_dir():
            continue
        for p, is_dir, _ in walk_nodes(start.path):
            segs = (*start.segments, *p.relative_to(start.path).parts)
            rel = "/".join(segs[base_len:])
            if not pattern.match(rel):
                continue
            tags: tuple[str, ...] = ()
            if want_tags is not None or not is_dir:
                facts = facts_cache.setdefault(p.parent, sidecar.load(p.parent))
                f = facts.get(p.name)
                tags = f.tags if f else ()
            if want_tags and not want_tags.issubset(tags):
                continue
            out.append((join_uri(segs), p, is_dir, tags))
            if len(out) >= limit:
                return out, True
    return out, False


def grep(ns: Namespace, starts: list[VikingPath], regex: re.Pattern[str], *, limit: int, level_limit: int,
         exclude: str | None, want_tags: frozenset[str] | None, with_tags: bool, before: int,
         after: int) -> tuple[list[GrepMatch], bool]:
    matches: list[GrepMatch] = []
    for start in starts:
        files: Iterator[tuple[Path, int]]
        if start.path.is_file():
            files = iter([(start.path, 0)])
            base = start.segments[:-1]
            root = start.path.parent
        else:
            files = tree.walk_files(start.path, max_depth=level_limit)
            base, root = start.segments, start.path
        for f, _ in files:
            uri = join_uri((*base, *f.relative_to(root).parts))
            if exclude and (uri == exclude or uri.startswith(exclude.rstrip("/") + "/")):
                continue
            tags: tuple[str, ...] | None = None
            if want_tags is not None or with_tags:
                fact = sidecar.load(f.parent).get(f.name)
                tags = fact.tags if fact else ()
                if want_tags and not want_tags.issubset(tags):
                    continue
            try:
                data = f.read_bytes()
            except OSError:
                continue
            if b"\x00" in data[:8192]:
                continue
            lines = data.decode("utf-8", errors="replace").splitlines()
            for i, line in enumerate(lines):
                if not regex.search(line):
                    continue
                m = GrepMatch(uri=uri, line=i + 1, content=line[:MAX_LINE])
                if before:
                    m.before_context = [ContextLine(line=j + 1, content=lines[j][:MAX_LINE])
                                        for j in range(max(0, i - before), i)]
                if after:
                    m.after_context = [ContextLine(line=j + 1, content=lines[j][:MAX_LINE])
                                       for j in range(i + 1, min(len(lines), i + 1 + after))]
                if tags is not None:
                    m.tags = list(tags)
                matches.append(m)
                if len(matches) >= limit:
                    return matches, True
    return matches, False
