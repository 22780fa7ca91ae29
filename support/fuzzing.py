"""Hypothesis strategies for every request Struct, built from msgspec's type information: valid
requests (within every declared bound, with URIs drawn from places that exist, do not exist,
belong to someone else or try to escape) and invalid ones (wrong types, unknown or missing
fields, out-of-range values, bytes that are not JSON)."""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

URIS = ["viking://resources", "viking://resources/fuzz", "viking://resources/fuzz/a.md", "viking://resources/x.md",
        "viking://", "viking://user", "viking://~/memories", "viking://~/memories/events",
        "viking://user/default/memories/preferences", "viking://agent/skills", "viking://user/mallory/memories/x.md",
        "viking://user/default/peers/bob/memories", "viking://resources/../../etc/passwd",
        "viking://resources/%2e%2e/x", "viking://resources/%252e%252e/x", "viking:///etc/passwd",
        "viking://resources/a\\b", "viking://resources/a\x00b", "viking://resources/" + "a" * 300,
        "viking://nosuchroot/x", "not-a-uri", "/etc/passwd"]
URI_FIELDS = {"uri", "target_uri", "from_uri", "to_uri", "exclude_uri", "path"}
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


def _text(t: mi.StrType) -> st.SearchStrategy[str]:
    if t.pattern:
        return st.from_regex(t.pattern, fullmatch=True).filter(
            lambda s: (t.min_length or 0) <= len(s) <= (t.max_length or 10_000))
    return st.text(min_size=t.min_length or 0, max_size=min(t.max_length or 40, 40))


def for_type(t: mi.Type, name: str = "") -> st.SearchStrategy[Any]:
    if name in URI_FIELDS and isinstance(t, (mi.StrType, mi.UnionType)):
        return st.sampled_from(URIS)
    if isinstance(t, mi.StrType):
        return _text(t)
    if isinstance(t, mi.IntType):
        lo = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -5)
        hi = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 50)
        return st.integers(lo, min(hi, lo + 100))
    if isinstance(t, mi.FloatType):
        lo = t.ge if t.ge is not None else -1.0
        hi = t.le if t.le is not None else 2.0
        return st.floats(lo, hi, allow_nan=False)
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(list(t.values))
    if isinstance(t, mi.UnionType):
        return st.one_of([for_type(x, name) for x in t.types])
    if isinstance(t, mi.ListType):
        return st.lists(for_type(t.item_type, name), min_size=t.min_length or 0, max_size=min(t.max_length or 4, 4))
    if isinstance(t, mi.DictType):
        return st.dictionaries(for_type(t.key_type), for_type(t.value_type), max_size=3)
    if isinstance(t, mi.StructType):
        return struct(t)
    return JSONISH


def struct(t: mi.StructType) -> st.SearchStrategy[dict[str, Any]]:
    required = {f.encode_name: for_type(f.type, f.name) for f in t.fields if f.required}
    optional = {f.encode_name: for_type(f.type, f.name) for f in t.fields if not f.required}
    base = st.fixed_dictionaries(required, optional=optional)
    if t.tag_field:
        return base.map(lambda d: {t.tag_field: t.tag, **d})
    return base


@functools.cache
def valid(cls: type) -> st.SearchStrategy[dict[str, Any]]:
    return struct(mi.type_info(cls))  # type: ignore[arg-type]


WRONG = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                  st.text(max_size=5), st.none())


@functools.cache
def invalid(cls: type) -> st.SearchStrategy[bytes]:
    return _invalid(cls)


@st.composite
def _invalid(draw: st.DrawFn, cls: type) -> bytes:
    """A request that must be refused: the shapes a careless or hostile client sends."""
    info = mi.type_info(cls)
    body = draw(valid(cls))
    kind = draw(st.sampled_from(["garbage", "unknown", "missing", "wrong", "not-object"]))
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=40).filter(lambda b: b.strip() != b"" and not _is_json_object(b)))
    if kind == "not-object":
        return msgspec.json.encode(draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text())))
    if kind == "unknown":
        body[draw(st.sampled_from(["zz_unknown", "__proto__", "Query", "admin"]))] = draw(JSONISH)
        return msgspec.json.encode(body)
    required = [f.encode_name for f in info.fields if f.required]  # type: ignore[attr-defined]
    if kind == "missing" and required:
        body.pop(draw(st.sampled_from(required)))
        return msgspec.json.encode(body)
    fields = info.fields  # type: ignore[attr-defined]
    if not fields:
        body["zz_unknown"] = 1
        return msgspec.json.encode(body)
    f = draw(st.sampled_from(fields))
    bad = draw(WRONG.filter(lambda v: not _accepts(cls, f.encode_name, v, body)))
    body[f.encode_name] = bad
    return msgspec.json.encode(body)


def _is_json_object(b: bytes) -> bool:
    try:
        return isinstance(msgspec.json.decode(b), dict)
    except msgspec.DecodeError:
        return False


def _accepts(cls: type, field: str, value: Any, body: dict[str, Any]) -> bool:
    try:
        msgspec.convert({**body, field: value}, cls)
        return True
    except msgspec.ValidationError:
        return False
