"""The shape of the code, checked from its imports: one way dependencies, no circles, no actor
importing another, `nats` only in the runtime, and no module grown past ~400 lines unexplained."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("messages", "store", "actors", "runtime")
SHARED_ACTOR_PACKAGES = ("kit", "text")  # hosting kit and text helpers: shared, import no actor
MAX_LINES = 400


def modules() -> dict[str, Path]:
    out = {}
    for r in ROOTS:
        for p in (ROOT / r).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out["skald." + ".".join(parts)] = p
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Skald modules a module imports (inside TYPE_CHECKING too: a circle there is still a circle)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n.startswith("skald."):
                out.add(n)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(p, known) - {m} for m, p in known.items()}


def test_no_import_circle() -> None:
    """Tarjan's strongly connected components: every one has a single module. Package __init__
    modules count as their package, so `a -> pkg -> a` is a circle too."""
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert circles == []


def test_dependencies_point_one_way() -> None:
    """messages <- store <- actors <- runtime; an actor never imports another actor."""
    rank = {"messages": 0, "store": 1, "actors": 2, "runtime": 3}
    bad = []
    for m, deps in graph().items():
        layer = m.split(".")[1]
        for d in deps:
            if rank[d.split(".")[1]] > rank[layer]:
                bad.append(f"{m} -> {d}")
            if layer == "actors" and d.startswith("skald.actors."):
                mine, theirs = m.split(".")[2], d.split(".")[2]
                if mine != theirs and theirs not in SHARED_ACTOR_PACKAGES:
                    bad.append(f"{m} -> {d} (another actor)")
                if mine in SHARED_ACTOR_PACKAGES and theirs not in SHARED_ACTOR_PACKAGES:
                    bad.append(f"{m} -> {d} (shared code importing an actor)")
    assert bad == []


def test_only_the_runtime_touches_nats() -> None:
    bad = []
    for m, p in modules().items():
        if m.startswith("skald.runtime"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "nats" for a in node.names):
                bad.append(m)
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "nats":
                bad.append(m)
    assert bad == []


def test_no_module_past_the_size_without_a_reason() -> None:
    """A module past ~400 lines is usually two concerns; one that is not says why in its docstring
    (a line starting `Why one module:`)."""
    bad = []
    for m, p in modules().items():
        text = p.read_text()
        if text.count("\n") > MAX_LINES and "Why one module:" not in (ast.get_docstring(ast.parse(text)) or ""):
            bad.append(f"{m}: {text.count(chr(10))} lines")
    assert bad == []


def test_every_actor_is_a_folder_with_a_thin_handler_module() -> None:
    actors = [d for d in (ROOT / "actors").iterdir() if d.is_dir() and (d / "__init__.py").exists()
              and d.name not in SHARED_ACTOR_PACKAGES]
    assert {d.name for d in actors} == {"session", "archive", "indexer", "retriever", "assembler"}
    for d in actors:
        assert (d / "handlers.py").exists(), d
        assert len(list(d.glob("*.py"))) >= 3, f"{d.name}: pure modules beside the handlers"
