"""The shape of the code, checked from its imports: one way dependencies, no circles (across the
installed roots, the support package, the benchmarks and the tests), no actor importing another,
the runtime's roles layered and its doors reaching the server only through the client, `nats` only
in the runtime, and no module past 450 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("messages", "store", "actors", "runtime")  # installed as skald.*
OTHER_ROOTS = ("support", "bench", "tests")  # imported by their own names, never installed
SHARED_ACTOR_PACKAGES = ("kit", "text")  # hosting kit and text helpers: shared, import no actor
MAX_LINES = 450
# The runtime's packages by role, each importing only lower ones: the client agents import, then the
# doors (CLI, HTTP, MCP), the model clients and the bus plumbing, then the host that wires actors to
# the bus, then journal replay and snapshots, then `main`, the `skald` command that composes them.
RUNTIME_RANK = {"client": 0, "doors": 1, "models": 1, "bus": 1, "host": 2, "replay": 3, "main": 4}


def modules() -> dict[str, Path]:
    out = {}
    for r in ROOTS + OTHER_ROOTS:
        for p in (ROOT / r).rglob("*.py"):
            if ".venv" in p.parts or "__pycache__" in p.parts:
                continue
            parts = p.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[("skald." if r in ROOTS else "") + ".".join(parts)] = p
    return out


def layer(module: str) -> str:
    return module.split(".")[1] if module.startswith("skald.") else module.split(".")[0]


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Skald modules a module imports (inside TYPE_CHECKING too: a circle there is still a circle)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import submodule` depends on the submodule; `from pkg import name` on pkg
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n:
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
    """messages <- store <- actors <- runtime <- support <- bench, tests; an actor never imports
    another actor; the benchmarks and the tests never import each other."""
    rank = {"messages": 0, "store": 1, "actors": 2, "runtime": 3, "support": 4, "bench": 5, "tests": 5}
    bad = []
    for m, deps in graph().items():
        mine_layer = layer(m)
        for d in deps:
            theirs_layer = layer(d)
            if rank[theirs_layer] > rank[mine_layer] or (rank[theirs_layer] == 5 and theirs_layer != mine_layer):
                bad.append(f"{m} -> {d}")
            if mine_layer == "actors" and d.startswith("skald.actors."):
                mine, theirs = m.split(".")[2], d.split(".")[2]
                if mine != theirs and theirs not in SHARED_ACTOR_PACKAGES:
                    bad.append(f"{m} -> {d} (another actor)")
                if mine in SHARED_ACTOR_PACKAGES and theirs not in SHARED_ACTOR_PACKAGES:
                    bad.append(f"{m} -> {d} (shared code importing an actor)")
    assert bad == []


def runtime_role(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if module.startswith("skald.runtime.") else None


def test_runtime_roles_point_one_way_and_doors_see_only_the_client() -> None:
    """Inside runtime/, a role imports only lower roles; a door (CLI, HTTP, MCP) imports only the
    client, the wire contract and other doors, so what a door can do is what an agent can."""
    assert {p.name for p in (ROOT / "runtime").iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {"main"} \
        == set(RUNTIME_RANK)
    bad = []
    for m, deps in graph().items():
        role = runtime_role(m)
        if role is None:
            continue
        for d in deps:
            theirs = runtime_role(d)
            if theirs is not None and theirs != role and RUNTIME_RANK[theirs] >= RUNTIME_RANK[role]:
                bad.append(f"{m} -> {d}")
            if role in ("client", "doors") and layer(d) in ("store", "actors"):
                bad.append(f"{m} -> {d} (the {role} sees only the wire contract)")
            if role == "doors" and theirs not in (None, "client", "doors"):
                bad.append(f"{m} -> {d} (a door reaches the server only through the client)")
    assert bad == []


def test_only_the_runtime_touches_nats() -> None:
    """nats-py stays behind the runtime (tests and benchmarks of the bus itself may use it)."""
    bad = []
    for m, p in modules().items():
        if m.startswith("skald.runtime") or layer(m) in OTHER_ROOTS:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "nats" for a in node.names):
                bad.append(m)
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "nats":
                bad.append(m)
    assert bad == []


def test_no_module_past_the_size() -> None:
    """A module past 450 lines is two concerns (tests and benchmarks included): split it along its
    seams rather than trimming what explains it."""
    bad = []
    for m, p in modules().items():
        text = p.read_text()
        if text.count("\n") > MAX_LINES:
            bad.append(f"{m}: {text.count(chr(10))} lines")
    assert bad == []


def test_every_actor_is_a_folder_with_a_thin_handler_module() -> None:
    actors = [d for d in (ROOT / "actors").iterdir() if d.is_dir() and (d / "__init__.py").exists()
              and d.name not in SHARED_ACTOR_PACKAGES]
    assert {d.name for d in actors} == {"session", "archive", "indexer", "retriever", "assembler"}
    for d in actors:
        assert (d / "handlers.py").exists(), d
        assert len(list(d.glob("*.py"))) >= 3, f"{d.name}: pure modules beside the handlers"


def test_the_code_cites_only_documents_the_repository_holds() -> None:
    """A comment that points at a document points at one in the repository (`docs/design/`): never
    at the specifications or notes a clone does not carry."""
    outside = re.compile("|".join((r"seed[ -]?00\d", "NATS" + "-NOTES", r"shared/(?:PROTOCOL|ARCHITECTURE|seeds)")))
    cited = re.compile(r"docs/design/([a-z0-9-]+\.md)")
    bad = []
    for m, p in modules().items():
        text = p.read_text()
        bad += [f"{m}: {hit.group(0)}" for hit in outside.finditer(text)]
        bad += [f"{m}: docs/design/{name} is missing" for name in cited.findall(text)
                if not (ROOT / "docs" / "design" / name).exists()]
    assert bad == []
