"""What the two compatibility tests (OpenViking's SDK, OpenViking's CLI) share: the routes the
gateway answered as unknown, and the table each produces in `docs/compat.md`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx

TABLES = Path(__file__).resolve().parents[1] / "docs" / "compat.md"


async def unknown_routes(gateway: str) -> list[str]:
    """Methods of the requests the gateway answered 404 as a route it does not know."""
    async with httpx.AsyncClient(base_url=gateway) as http:
        metrics = (await http.get("/metrics")).text
    return re.findall(r'skald_gateway_requests_total\{method="(\w+)",route="unmatched",status="404"\}', metrics)


def table_in_docs(marker: str, produced: str) -> bool:
    """Whether docs/compat.md holds `produced` between `<!-- compat:MARKER -->` and its end marker;
    with SKALD_WRITE_COMPAT set, it is written there first."""
    begin, end = f"<!-- compat:{marker} -->", f"<!-- /compat:{marker} -->"
    text = TABLES.read_text()
    if os.environ.get("SKALD_WRITE_COMPAT"):
        head, rest = text.split(begin, 1)
        text = f"{head}{begin}\n{produced}\n{end}{rest.split(end, 1)[1]}"
        TABLES.write_text(text)
    return f"{begin}\n{produced}\n{end}" in text
