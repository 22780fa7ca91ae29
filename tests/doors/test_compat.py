"""OpenViking's own Python SDK (`openviking-sdk`, from PyPI) against `skald http`: every public
method of its client called once, in an order that gives each something to work on, and what
happened recorded as ok, not supported (a typed UNIMPLEMENTED with its reason) or failed. The
table in docs/compat.md (between the `compat:sdk` markers) is this test's output; it fails when the
two differ (`SKALD_WRITE_COMPAT=1` rewrites it), when a method fails, or when the SDK reached a
route the gateway does not know (a 404 outside the JSON envelope's typed errors).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import openviking_sdk as ov
from openviking_sdk import errors as ov_errors

from support.compat import table_in_docs, unknown_routes

DOC = "viking://resources/compat/guide.md"
SKILL = "---\nname: compat-skill\ndescription: Check the caddy upstream port\n---\n# Steps\nRead the port.\n"
LIFECYCLE = {"initialize", "close"}


def cases(tmp: Path) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """Each SDK method with arguments a user would give, in an order where each finds what it needs."""
    (tmp / "notes.md").write_text("# Notes\n\nThe vega host runs caddy.\n")
    return [
        ("health", (), {}),
        ("write", (DOC, "# Guide\n\nThe caddy upstream port is 1935.\n"), {"wait": True}),
        ("add_resource", (str(tmp / "notes.md"),), {"parent": "viking://resources/compat", "wait": True}),
        ("wait_processed", (), {}),
        ("add_skill", (SKILL,), {"wait": True}),
        ("validate_skill", (SKILL,), {}),
        ("list_skills", (), {}),
        ("find_skills", ("caddy port",), {}),
        ("get_skill", ("compat-skill",), {}),
        ("update_skill", ("compat-skill", SKILL), {}),
        ("delete_skill", ("compat-skill",), {}),
        ("ls", ("viking://resources/compat",), {}),
        ("ls_page", ("viking://resources/compat",), {}),
        ("tree", ("viking://resources",), {}),
        ("tree_page", ("viking://resources",), {}),
        ("stat", (DOC,), {}),
        ("attrs", (DOC,), {}),
        ("read", (DOC,), {"offset": 2, "limit": 1}),
        ("read_raw", (DOC,), {}),
        ("download_bytes", (DOC,), {}),
        ("abstract", ("viking://resources/compat",), {}),
        ("overview", ("viking://resources/compat",), {}),
        ("set_tags", (DOC,), {"tags": ["team=infra"]}),
        ("find", ("caddy upstream port",), {"limit": 3}),
        ("search", ("caddy upstream port",), {"limit": 3}),
        ("search_context", ("caddy upstream port",), {}),
        ("grep", ("viking://resources", "1935"), {}),
        ("glob", ("**/*.md",), {"uri": "viking://resources"}),
        ("mkdir", ("viking://resources/compat/sub",), {}),
        ("batch_write", ("viking://resources/compat", [{"op": "write", "uri": "b.md", "content": "b"}]), {}),
        ("reindex", (DOC,), {}),
        ("check_consistency", ("viking://resources",), {}),
        ("create_session", ("compat-s",), {}),
        ("session_exists", ("compat-s",), {}),
        ("add_message", ("compat-s", "user"), {"content": "Which port does caddy use?"}),
        ("batch_add_messages", ("compat-s", [{"role": "assistant", "content": "Port 1935."}]), {}),
        ("get_session", ("compat-s",), {}),
        ("list_sessions", (), {}),
        ("update_session_config", ("compat-s",), {}),
        ("commit_session", ("compat-s",), {}),
        ("wait_processed", (), {}),  # again: the commit's archive is summarised in the background
        ("get_session_context", ("compat-s",), {}),
        ("get_session_archive", ("compat-s", "archive_001"), {}),
        ("delete_session", ("compat-s",), {}),
        ("mv", (DOC, "viking://resources/compat/moved.md"), {}),
        ("rm", ("viking://resources/compat/moved.md",), {}),
        ("acl_get", ("viking://resources",), {}),
        ("acl_set", ("viking://resources",), {"acl_mode": "restricted"}),
        ("acl_grant", ("viking://resources", "user:ana", "read"), {}),
        ("acl_revoke", ("viking://resources", "user:ana"), {}),
        ("acl_delete", ("viking://resources",), {}),
        ("admin_list_accounts", (), {}),
        ("admin_create_account", ("acme", "ana"), {}),
        ("admin_get_account", ("acme",), {}),
        ("admin_get_account_settings", ("acme",), {}),
        ("admin_delete_account", ("acme",), {}),
        ("admin_register_user", ("acme", "bob"), {}),
        ("admin_get_user", ("acme", "bob"), {}),
        ("admin_list_users", ("acme",), {}),
        ("admin_set_role", ("acme", "bob", "user"), {}),
        ("admin_regenerate_key", ("acme", "bob"), {}),
        ("admin_remove_user", ("acme", "bob"), {}),
        ("admin_create_group", ("acme", "ops"), {}),
        ("admin_list_groups", ("acme",), {}),
        ("admin_add_group_member", ("acme", "ops", "bob"), {}),
        ("admin_list_group_members", ("acme", "ops"), {}),
        ("admin_remove_group_member", ("acme", "ops", "bob"), {}),
        ("admin_delete_group", ("acme", "ops"), {}),
        ("admin_get_agent_evolution", (), {}),
        ("admin_set_agent_evolution", (True,), {}),
        ("admin_set_account_agent_evolution", ("acme", True), {}),
        ("admin_migrate", (), {}),
        ("list_experience_trajectories", ("viking://agent/experiences/x",), {}),
        ("get_experience_outcomes", ("viking://agent/experiences/x",), {}),
        ("compile", (["viking://resources/compat"], "viking://agent/skills/compiled", "compiled"), {}),
        ("export_ovpack", ("viking://resources/compat", str(tmp / "out.ovpack")), {}),
        ("import_ovpack", (str(tmp / "notes.md"), "viking://resources"), {}),
        ("backup_ovpack", (str(tmp / "backup.ovpack"),), {}),
        ("restore_ovpack", (str(tmp / "notes.md"),), {}),
        ("git_commit", (), {"message": "compat"}),
        ("git_log", (), {}),
        ("git_show", ("HEAD",), {}),
        ("git_diff", ("viking://resources",), {"to_ref": "HEAD"}),
        ("git_diff_paths", (["viking://resources"],), {"to_ref": "HEAD"}),
        ("git_restore", (), {"source_commit": "HEAD"}),
        ("git_get_ignore", (), {}),
        ("git_set_ignore", (), {"content": "*.tmp"}),
        ("git_delete_ignore", (), {}),
        ("list_tasks", (), {}),
        ("get_task", ("t1",), {}),
        ("cancel_task", ("t1",), {}),
        ("list_watches", (), {}),
        ("get_watch", ("w1",), {}),
        ("update_watch", ("w1",), {"is_active": False}),
        ("trigger_watch", ("w1",), {}),
        ("delete_watch", ("w1",), {}),
        ("preflight_openviking_asset", ("x", "https://example.invalid/x.git"), {}),
        ("resolve_openviking_assets", ("assets: []\n",), {}),
    ]



def table(rows: list[tuple[str, str, str]]) -> str:
    out = ["| `openviking-sdk` 0.1.17 method | against `skald http` | why |", "|---|---|---|"]
    out += [f"| `{name}` | {outcome} | {why} |" for name, outcome, why in rows]
    return "\n".join(out)


async def test_every_openviking_sdk_method_works_or_is_typed_unimplemented(gateway: str, tmp_path: Path) -> None:
    sdk = ov.AsyncHTTPClient(url=gateway, api_key="any", user="default", timeout=60)
    await sdk.initialize()
    plan = cases(tmp_path)
    methods = {n for n, _ in inspect.getmembers(ov.AsyncHTTPClient, inspect.iscoroutinefunction)
               if not n.startswith("_")} - LIFECYCLE
    assert methods - {name for name, _, _ in plan} == set()  # a new SDK method needs a case here
    rows: list[tuple[str, str, str]] = []
    failed = []
    try:
        for name, args, kw in plan:
            try:
                await getattr(sdk, name)(*args, **kw)
                rows.append((name, "ok", ""))
            except ov_errors.UnimplementedError as e:
                why = str(e).split("Skald has no ", 1)[-1].replace("|", "/")
                rows.append((name, "not supported", why))
            except Exception as e:  # noqa: BLE001 - every other outcome is a failure to report
                failed.append(f"{name}: {type(e).__name__}: {e}")
                rows.append((name, "failed", f"{type(e).__name__}: {str(e)[:80]}".replace("|", "/")))
    finally:
        await sdk.close()
    unknown = await unknown_routes(gateway)
    fresh = table_in_docs("sdk", table(rows))
    assert failed == [] and unknown == []
    assert fresh, "docs/compat.md's SDK table is stale: run with SKALD_WRITE_COMPAT=1"
