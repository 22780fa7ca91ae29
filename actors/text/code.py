"""Source code as symbols: classes, functions and methods with their line ranges, signatures and
docstrings. Python through its own `ast`; TypeScript, JavaScript, Go, Rust and Java through
tree-sitter (MIT) and the grammar packages published by the tree-sitter project. A file that
does not parse is still text; it only loses its symbols.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from skald.actors.text.textfile import Doc, Symbol

LANGUAGES: dict[str, str] = {
    ".py": "python", ".pyi": "python",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".go": "go", ".rs": "rust", ".java": "java",
}
DOC_MAX = 300


def language_of(name: str) -> str:
    return LANGUAGES.get(PurePosixPath(name).suffix.lower(), "")


def parse(lang: str, text: str) -> Doc:
    symbols: tuple[Symbol, ...] = ()
    try:
        symbols = tuple(_python(text) if lang == "python" else _tree_sitter(lang, text))
    except (SyntaxError, ValueError, RecursionError):
        symbols = ()
    return Doc(text=text, format=f"code:{lang}", symbols=symbols)


def _first_line(doc: str | None) -> str:
    if not doc:
        return ""
    line = doc.strip().split("\n\n", 1)[0]
    return " ".join(line.split())[:DOC_MAX]


def _python(text: str) -> list[Symbol]:
    tree = ast.parse(text)
    lines = text.splitlines()

    def signature(node: ast.AST) -> str:
        start = node.lineno - 1  # type: ignore[attr-defined]
        body = node.body[0].lineno - 1 if getattr(node, "body", None) else start  # type: ignore[attr-defined]
        head = " ".join(s.strip() for s in lines[start : max(start + 1, body)])
        return head.split(":  ")[0].rstrip(":").strip()[:300]

    def symbol(node: ast.AST, kind: str) -> Symbol:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])  # type: ignore[attr-defined]
        kids: tuple[Symbol, ...] = ()
        if isinstance(node, ast.ClassDef):
            kids = tuple(symbol(n, "method") for n in node.body
                         if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
        return Symbol(kind=kind, name=node.name, start=start, end=node.end_lineno or node.lineno,  # type: ignore[attr-defined]
                      signature=signature(node), doc=_first_line(ast.get_docstring(node)),  # type: ignore[arg-type]
                      children=kids)

    out: list[Symbol] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out.append(symbol(node, "class"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append(symbol(node, "function"))
    return out


@functools.cache
def _parser(lang: str) -> Any:
    from tree_sitter import Language, Parser

    loaders: dict[str, Callable[[], Any]] = {
        "typescript": lambda: __import__("tree_sitter_typescript").language_typescript(),
        "tsx": lambda: __import__("tree_sitter_typescript").language_tsx(),
        "javascript": lambda: __import__("tree_sitter_javascript").language(),
        "go": lambda: __import__("tree_sitter_go").language(),
        "rust": lambda: __import__("tree_sitter_rust").language(),
        "java": lambda: __import__("tree_sitter_java").language(),
    }
    return Parser(Language(loaders[lang]()))


# node type -> symbol kind, per grammar family (the names the grammars use)
_KINDS = {
    "function_declaration": "function", "generator_function_declaration": "function",
    "class_declaration": "class", "abstract_class_declaration": "class",
    "interface_declaration": "interface", "type_alias_declaration": "type", "enum_declaration": "enum",
    "method_definition": "method", "method_declaration": "method", "constructor_declaration": "method",
    "function_item": "function", "struct_item": "class", "enum_item": "enum", "trait_item": "interface",
    "impl_item": "class", "mod_item": "class", "type_declaration": "type", "record_declaration": "class",
    "function_signature_item": "method",
}
_CONTAINERS = frozenset({"class_body", "declaration_list", "interface_body", "enum_body"})
_WRAPPERS = frozenset({"export_statement", "decorated_definition"})


def _tree_sitter(lang: str, text: str) -> list[Symbol]:
    data = text.encode()
    root = _parser(lang).parse(data).root_node
    if root.has_error and not root.named_children:
        raise ValueError("unparseable")

    def node_text(n: Any) -> str:
        return data[n.start_byte : n.end_byte].decode(errors="replace")

    def name_of(n: Any) -> str:
        nm = n.child_by_field_name("name") or n.child_by_field_name("type")
        if nm is None and n.type == "type_declaration":
            spec = next((c for c in n.named_children if c.type == "type_spec"), None)
            nm = spec.child_by_field_name("name") if spec is not None else None
        if nm is None and n.type == "lexical_declaration":
            decl = next((c for c in n.named_children if c.type == "variable_declarator"), None)
            nm = decl.child_by_field_name("name") if decl is not None else None
        return node_text(nm) if nm is not None else ""

    def doc_before(n: Any) -> str:
        prev = n.prev_named_sibling
        if prev is not None and prev.type in ("comment", "line_comment", "block_comment") \
                and prev.end_point[0] >= n.start_point[0] - 1:
            raw = node_text(prev)
            return _first_line(" ".join(s.strip().lstrip("/*").rstrip("*/").strip() for s in raw.splitlines()))
        return ""

    def symbols(parent: Any, top: bool) -> list[Symbol]:
        out: list[Symbol] = []
        for n in parent.named_children:
            outer = n
            while n.type in _WRAPPERS:
                inner = next((c for c in n.named_children if c.type in _KINDS or c.type == "lexical_declaration"),
                             None)
                if inner is None:
                    break
                n = inner
            kind = _KINDS.get(n.type)
            if kind is None and n.type == "lexical_declaration" and top:
                value = next((c.child_by_field_name("value") for c in n.named_children
                              if c.type == "variable_declarator"), None)
                if value is not None and value.type in ("arrow_function", "function_expression", "function"):
                    kind = "function"
            if kind is None:
                continue
            if not top and kind == "function":
                kind = "method"
            body = next((c for c in n.named_children if c.type in _CONTAINERS), None) \
                or n.child_by_field_name("body")
            kids = tuple(symbols(body, False)) if body is not None and body.type in _CONTAINERS else ()
            sig = node_text(n).split("{", 1)[0].strip().splitlines()
            out.append(Symbol(kind=kind, name=name_of(n), start=outer.start_point[0] + 1, end=outer.end_point[0] + 1,
                              signature=" ".join(s.strip() for s in sig[:3])[:300], doc=doc_before(outer),
                              children=kids))
        return out

    return symbols(root, True)
