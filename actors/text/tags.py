"""Retrieval tags: strict `k=v` strings (docs/design/retrieval-api.md), shared by writers and readers."""

from __future__ import annotations

import re

from skald.messages.errors import InvalidArgument

TAG_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}=[^\s=,]{1,128}$")


def check_tags(tags: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """Anything but a strict `k=v` tag is refused, never guessed at; keys are case-insensitive
    (lower-cased on write and on filter alike), values kept as given; duplicates collapse."""
    if not tags:
        return ()
    bad = [t for t in tags if not isinstance(t, str) or not TAG_RE.match(t)]
    if bad:
        raise InvalidArgument("tags must be strict k=v strings", {"invalid": bad[:10]})
    return tuple(dict.fromkeys(k.lower() + "=" + v for k, _, v in (t.partition("=") for t in tags)))
