"""Where a search looks: the target URIs of a request, resolved for the caller."""

from __future__ import annotations

from skald.messages.errors import InvalidArgument
from skald.store.uri import PEER_SEARCHABLE, Identity, Namespace, default_roots, join_uri


def targets(ns: Namespace, target: str | list[str], ctypes: frozenset[str] | None, ident: Identity) -> list[str]:
    """Canonical URI prefixes to search: the caller's default roots (per context type) when no
    target is given; each target resolved (tenancy, no symlink on the way) otherwise."""
    uris = [target] if isinstance(target, str) else list(target)
    uris = [u for u in uris if u]
    if not uris:
        roots: list[str] = []
        for ct in sorted(ctypes) if ctypes else [None]:
            roots += default_roots(ident, ct)
        return list(dict.fromkeys(roots))
    out = []
    for u in uris:
        segs = ns.resolve(u, ident).segments
        if len(segs) > 4 and segs[0] == "user" and segs[2] == "peers" and segs[4] not in PEER_SEARCHABLE:
            raise InvalidArgument("only memories and resources can be searched under a peer", {"uri": u})
        if not segs:
            out += default_roots(ident)
        elif segs == ("user",):
            out.append(ident.user_root)
        else:
            out.append(join_uri(segs))
    return list(dict.fromkeys(out))
