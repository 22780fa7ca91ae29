"""A full disk (ENOSPC) on a small size-limited filesystem the test mounts (tmpfs; needs the
privilege to mount, as root in a container has): writes answer a typed UNAVAILABLE (`reason:
no_space`), nothing half-written is left or served, reads go on, and once space is freed the same
worker takes writes again without a restart."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skald.messages import errors

SIZE = "3m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({got.stderr.strip() or got.returncode}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def torn_or_temp(root: Path) -> list[str]:
    """Temp files of atomic writes left behind, and message logs whose last line is cut."""
    bad = [str(p) for p in root.rglob(".tmp-*")]
    for log in root.rglob("messages.jsonl"):
        data = log.read_bytes()
        if data and not data.endswith(b"\n"):
            bad.append(f"{log} (torn)")
        for line in data.splitlines():
            with contextlib.suppress(ValueError):
                json.loads(line)
                continue
            bad.append(f"{log}: {line[:60]!r}")
    return bad


async def test_a_full_disk_is_a_typed_refusal_and_recovers_when_space_is_freed(deploy: Any, small_disk: Path) -> None:
    _, c = await deploy(data_dir=small_disk / "data")
    await c.call("fs.write", {"uri": "viking://resources/keep.md", "content": "# Keep\n\nThe walrus stays.\n",
                              "wait": True})
    await c.call("sessions.add_message", {"session_id": "s1", "role": "user", "id": "m0",
                                          "parts": [{"type": "text", "text": "before the disk filled"}]})
    chunk = "x" * 200_000
    refused: errors.SkaldError | None = None
    written = []
    for i in range(60):  # 60 x 200 KB cannot fit in 3 MB
        try:
            await c.call("fs.write", {"uri": f"viking://resources/fill/f{i}.md", "content": chunk})
            written.append(i)
        except errors.Unavailable as e:
            refused = e
            break
    assert refused is not None and refused.details.get("reason") == "no_space", refused
    failed_uri = f"viking://resources/fill/f{len(written)}.md"
    with pytest.raises(errors.NotFound):  # the refused write left nothing to serve
        await c.call("fs.read", {"uri": failed_uri})
    # a message add on the full disk: refused whole, or stored whole
    ids = ["m0"]
    for i in range(1, 40):
        try:
            await c.call("sessions.add_message", {"session_id": "s1", "role": "user", "id": f"m{i}",
                                                  "parts": [{"type": "text", "text": "y" * 20_000}]})
            ids.append(f"m{i}")
        except errors.Unavailable as e:
            assert e.details.get("reason") == "no_space", e
            break
    else:
        raise AssertionError("the disk never filled for messages")
    assert torn_or_temp(small_disk) == []
    # reads go on while the disk is full
    assert (await c.call("fs.read", {"uri": "viking://resources/keep.md"}))["content"].startswith("# Keep")
    # space freed: the same worker writes again, no restart
    await c.call("fs.rm", {"uri": "viking://resources/fill", "recursive": True})
    await c.call("fs.write", {"uri": failed_uri, "content": "# Back\n\nSpace again.\n", "wait": True})
    assert (await c.call("fs.read", {"uri": failed_uri}))["content"] == "# Back\n\nSpace again.\n"
    await c.call("sessions.add_message", {"session_id": "s1", "role": "user", "id": "after",
                                          "parts": [{"type": "text", "text": "after the space came back"}]})
    info = await c.call("sessions.get", {"session_id": "s1"})
    assert info["total_message_count"] == len(ids) + 1, (info, ids)
    stored = [json.loads(x)["id"] for x in (small_disk / "data/accounts/default/user/default/sessions/s1/"
                                            "messages.jsonl").read_text().splitlines()]
    assert stored == [*ids, "after"]
    assert torn_or_temp(small_disk) == []
