"""One per-file limit (SKALD_MAX_FILE_MB) for everything taken in: a file over it is reported with
its reason and never stored; under it, taken in whole. Uploads declare a file's size first, so an
oversized file is refused before it is sent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skald.messages import errors
from skald.messages import ingest as ingest_msgs
from skald.messages.catalog import RESOURCES_UPLOAD

LIMIT_MB = 0.05  # 52,428 bytes


def notes(root: Path) -> Path:
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "deploy.md").write_text("# Deploy\n\nCaddy listens on port 1935.\n")
    (root / "guide" / "huge.log").write_text("GET /health 200\n" * 8_000)  # 128,000 bytes
    return root / "guide"


async def test_an_uploaded_folders_oversized_file_is_reported_and_not_stored(deploy: Callable[..., Any],
                                                                             tmp_path: Path) -> None:
    _, c = await deploy(max_file_mb=LIMIT_MB)
    res = await c.add_resource(upload=notes(tmp_path), wait=True)
    assert res.status == "done" and res.files == 1
    [big] = res.skipped
    assert big.uri == "viking://resources/guide/huge.log" and big.reason == "too_large"
    assert "128,000 bytes" in (big.detail or "") and "SKALD_MAX_FILE_MB" in (big.detail or "")
    assert [e.name for e in (await c.ls("viking://resources/guide")).entries] == ["deploy.md"]


async def test_a_single_oversized_file_is_refused_with_the_limit_and_how_to_raise_it(
        deploy: Callable[..., Any], tmp_path: Path) -> None:
    _, c = await deploy(max_file_mb=LIMIT_MB)
    big = notes(tmp_path) / "huge.log"
    with pytest.raises(errors.InvalidArgument, match="SKALD_MAX_FILE_MB") as refused:
        await c.add_resource(upload=big, wait=True)
    assert refused.value.details["reason"] == "too_large"
    with pytest.raises(errors.NotFound):
        await c.stat("viking://resources/huge.log")
    piece = ingest_msgs.UploadRequest(path="huge.log", data=b"x" * 60_000)  # a client that declares no size
    with pytest.raises(errors.InvalidArgument, match="per-file limit"):
        await c.request(RESOURCES_UPLOAD, piece)


async def test_a_server_folders_oversized_file_is_reported_and_a_raised_limit_takes_it(
        deploy: Callable[..., Any], tmp_path: Path) -> None:
    _, small = await deploy(max_file_mb=LIMIT_MB)
    src = notes(tmp_path)
    res = await small.add_resource(path=str(src), wait=True)
    assert [(s.uri, s.reason) for s in res.skipped] == [("viking://resources/guide/huge.log", "too_large")]
    _, raised = await deploy(max_file_mb=1)
    res = await raised.add_resource(path=str(src), wait=True)
    assert res.status == "done" and res.files == 2 and not res.skipped
    hits = await raised.grep("viking://resources/guide", "GET /health")
    assert hits.matches
