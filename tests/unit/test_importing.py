"""Which files an import takes, URL naming, and safe unpacking (real files on disk)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from skald.actors.indexer import sources
from skald.messages import folders
from skald.messages.errors import Conflict, InvalidArgument, PermissionDenied
from skald.store import importing
from skald.store.local_tree import LocalTree


def tree_of(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_a_folder_is_taken_as_git_sees_it(tmp_path: Path) -> None:
    tree_of(tmp_path, {
        ".gitignore": "*.log\n/generated/\n",
        "README.md": "r", "app.log": "x", "generated/out.md": "x", "docs/generated/keep.md": "k",
        "docs/.gitignore": "drafts/\n!important.log\n", "docs/drafts/wip.md": "x", "docs/important.log": "i",
        "src/main.py": "m", "node_modules/pkg/index.js": "x", ".venv/lib/x.py": "x", "build/x.md": "x",
        ".git/config": "x", ".env": "secret", "src/__pycache__/m.pyc": "x",
    })
    assert folders.select(tmp_path) == ["README.md", "docs/generated/keep.md", "docs/important.log",
                                          "src/main.py"]
    assert folders.select(tmp_path, include=["*.py"]) == ["src/main.py"]
    assert folders.select(tmp_path, exclude=["docs/"]) == ["README.md", "src/main.py"]
    assert folders.select(tmp_path / "README.md") == ["README.md"]


def test_copy_keeps_bytes_and_existing_files_are_listed(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    tree_of(src, {"a/b.md": "b", "c.md": "c"})
    t = LocalTree(dst.parent)
    importing.copy_selected(t, src, folders.select(src), dst.name)
    assert importing.existing_files(t, dst.name) == ["a/b.md", "c.md"] and (dst / "a" / "b.md").read_text() == "b"


@pytest.mark.parametrize("url,ctype,name", [
    ("https://example.com/docs/guide", "text/html; charset=utf-8", "guide.html"),
    ("https://example.com/", "text/html", "example.com.html"),
    ("https://example.com/files/report.pdf", "application/pdf", "report.pdf"),
    ("https://example.com/a%20b/notes", "text/markdown", "notes.md"),
])
def test_a_fetched_url_is_named_by_its_path_and_content_type(url: str, ctype: str, name: str) -> None:
    assert sources.url_name(url, ctype) == name


@pytest.mark.parametrize("url,git", [
    ("https://github.com/owner/repo", True), ("https://github.com/owner/repo/blob/main/README.md", False),
    ("https://example.com/x.git", True), ("ssh://git@host/r", True), ("file:///srv/repo", True),
    ("https://example.com/page", False),
])
def test_git_urls_are_told_from_pages(url: str, git: bool) -> None:
    assert sources.is_git_url(url) is git


def test_archives_unpack_inside_themselves_only(tmp_path: Path) -> None:
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("docs/a.md", "# A")
        z.writestr("b.md", "# B")
    out = sources.unzip(good, tmp_path / "out")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md")) == ["b.md", "docs/a.md"]
    for evil in ("../escape.md", "/etc/x.md", "a/../../escape.md"):
        bad = tmp_path / "bad.zip"
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr(evil, "x")
        with pytest.raises(InvalidArgument):
            sources.unzip(bad, tmp_path / "out2")
    assert not (tmp_path / "escape.md").exists()


def test_upload_pieces_append_in_order_and_belong_to_their_sender(tmp_path: Path) -> None:
    t = LocalTree(tmp_path)
    root = sources.upload_root("acme", "a" * 32)
    sources.check_owner(t, root, "alice", create=True)
    limit = 100
    assert sources.write_piece(t, root, "docs/a.md", 0, b"hello ", limit) == 6
    assert sources.write_piece(t, root, "docs/a.md", 6, b"world", limit) == 11
    assert (tmp_path / root / "files" / "docs" / "a.md").read_bytes() == b"hello world"
    assert sources.write_piece(t, root, "docs/a.md", 0, b"new", limit) == 3  # offset 0 starts over
    with pytest.raises(Conflict):
        sources.write_piece(t, root, "docs/a.md", 99, b"x", limit)
    for bad in ("../x.md", "docs/../../x.md", ".hidden/x.md", "/", "viking://resources/" + "a" * 300, "a\x00b"):
        with pytest.raises(InvalidArgument):
            sources.write_piece(t, root, bad, 0, b"x", limit)
    assert sources.write_piece(t, root, "docs/big.log", 0, b"x" * 10, limit, size=101) is None  # declared: refused
    assert sources.refused(t, root) == [("docs/big.log", 101)] and t.stat(f"{root}/files/docs/big.log") is None
    with pytest.raises(InvalidArgument, match="per-file limit"):  # undeclared: refused as it crosses, dropped
        sources.write_piece(t, root, "docs/a.md", 3, b"x" * 98, limit)
    assert t.stat(f"{root}/files/docs/a.md") is None
    with pytest.raises(PermissionDenied):
        sources.check_owner(t, root, "bob", create=False)
