"""What the two compatibility tests (OpenViking's SDK, OpenViking's CLI) share: the routes the
gateway answered as unknown, and the README table each produces."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx

README = Path(__file__).resolve().parents[1] / "README.md"


async def unknown_routes(gateway: str) -> list[str]:
    """Methods of the requests the gateway answered 404 as a route it does not know."""
    async with httpx.AsyncClient(base_url=gateway) as http:
        metrics = (await http.get("/metrics")).text
    return re.findall(r'skald_gateway_requests_total\{method="(\w+)",route="unmatched",status="404"\}', metrics)


def table_in_readme(marker: str, produced: str) -> bool:
    """Whether the README holds `produced` between `<!-- compat:MARKER -->` and its end marker;
    with SKALD_WRITE_COMPAT set, it is written there first."""
    begin, end = f"<!-- compat:{marker} -->", f"<!-- /compat:{marker} -->"
    readme = README.read_text()
    if os.environ.get("SKALD_WRITE_COMPAT"):
        head, rest = readme.split(begin, 1)
        readme = f"{head}{begin}\n{produced}\n{end}{rest.split(end, 1)[1]}"
        README.write_text(readme)
    return f"{begin}\n{produced}\n{end}" in readme
