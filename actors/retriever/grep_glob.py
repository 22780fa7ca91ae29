"""grep and glob over the tree (run in a worker thread), and glob pattern translation (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from skald.messages.search import ContextLine, GrepMatch
from skald.store import sidecar, treeops
from skald.store.treeport import Entry, StoreUnavailable, Tree, parent
from skald.store.uri import Namespace, VikingPath, join_uri

MAX_LINE = 2_000  # characters of a matched line returned


def visible_starts(ns: Namespace, vp: VikingPath, user: str, is_root: bool) -> list[VikingPath]:
    """Where a walk from `vp` may go: from the top, only the caller's spaces."""
    if vp.segments == () and not is_root:
        out = [ns.child(vp, "resources"), ns.child(vp, "agent"), ns.child(ns.child(vp, "user"), user)]
        return [p for p in out if ns.tree.stat(p.key) is not None]
    if vp.segments == ("user",) and not is_root:
        p = ns.child(vp, user)
        return [p] if ns.tree.stat(p.key) is not None else []
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


def glob(ns: Namespace, starts: list[VikingPath], base: VikingPath, pattern: re.Pattern[str],
         limit: int, want_tags: frozenset[str] | None) -> tuple[list[tuple[str, str, Entry, tuple[str, ...]]], bool]:
    """(uri, key, entry, tags) of every visible node under `starts` whose path below `base` matches."""
    t = ns.tree
    out: list[tuple[str, str, Entry, tuple[str, ...]]] = []
    facts_cache: dict[str, dict[str, sidecar.FileFacts]] = {}
    base_len = len(base.segments)
    for start in starts:
        if not treeops.is_dir(t, start.key):
            continue
        for key, e, _ in treeops.walk(t, start.key):
            segs = (*start.segments, *key[len(start.key) + 1:].split("/"))
            rel = "/".join(segs[base_len:])
            if not pattern.match(rel):
                continue
            tags: tuple[str, ...] = ()
            if want_tags is not None or not e.is_dir:
                d = parent(key)
                facts = facts_cache[d] if d in facts_cache else facts_cache.setdefault(d, sidecar.load(t, d))
                f = facts.get(e.name)
                tags = f.tags if f else ()
            if want_tags and not want_tags.issubset(tags):
                continue
            out.append((join_uri(segs), key, e, tags))
            if len(out) >= limit:
                return out, True
    return out, False


def grep(ns: Namespace, starts: list[VikingPath], regex: re.Pattern[str], *, limit: int, level_limit: int,
         exclude: str | None, want_tags: frozenset[str] | None, with_tags: bool, before: int,
         after: int) -> tuple[list[GrepMatch], bool]:
    t: Tree = ns.tree
    matches: list[GrepMatch] = []
    for start in starts:
        files: Iterator[str]
        if treeops.is_file(t, start.key):
            files = iter([start.key])
            base, root = start.segments[:-1], parent(start.key)
        else:
            files = (k for k, _, _ in treeops.walk_files(t, start.key, max_depth=level_limit))
            base, root = start.segments, start.key
        for f in files:
            uri = join_uri((*base, *f[len(root) + 1:].split("/")))
            if exclude and (uri == exclude or uri.startswith(exclude.rstrip("/") + "/")):
                continue
            tags: tuple[str, ...] | None = None
            if want_tags is not None or with_tags:
                fact = sidecar.load(t, parent(f)).get(f.rpartition("/")[2])
                tags = fact.tags if fact else ()
                if want_tags and not want_tags.issubset(tags):
                    continue
            try:
                data = t.read(f)
            except StoreUnavailable:
                raise  # UNAVAILABLE, to be asked again: never a grep that silently skipped files
            except OSError:
                continue  # gone since the walk
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
