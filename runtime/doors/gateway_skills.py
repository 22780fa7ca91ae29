"""OpenViking's skill routes on `skald http`: install (inline, uploaded file or zipped folder, and
the `list_only` preview its CLI asks for first), list, show, replace and remove. Skald keeps a
skill as a directory holding `SKILL.md` under `viking://agent/skills` (or the user's own
`skills`), so each route is made of the public operations: skills.add, fs.ls, fs.read, fs.rm.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from skald.messages import catalog
from skald.messages import ingest as ingest_msgs
from skald.messages.frontmatter import frontmatter
from skald.runtime.doors.gateway_compat import Calls, body_of, error_response, ok

AGENT_ROOT, USER_ROOT = "viking://agent/skills", "viking://~/skills"


def install_body(data: dict[str, Any]) -> dict[str, Any]:
    """OpenViking's add_skill body -> skills.add: `data` is the SKILL.md text (or an object with
    its `content`), `temp_file_id` an upload, `list_only` a dry run; other options are left out."""
    known = set(ingest_msgs.AddSkillRequest.__struct_fields__)
    out = {k: v for k, v in data.items() if k in known and v is not None}
    raw = data.get("data")
    if isinstance(raw, dict):
        raw = raw.get("content")
    if isinstance(raw, str) and "content" not in out and "path" not in out:
        out["content"] = raw
    if data.get("temp_file_id") and not {"content", "path"} & out.keys():
        out["upload_id"] = data["temp_file_id"]
    if data.get("list_only"):
        out["dry_run"] = True
    if isinstance(data.get("target_uri"), str) and data["target_uri"].rstrip("/").endswith("/user/skills"):
        out["scope"] = "user"
    return out


def summary(name: str, root_uri: str, description: str) -> dict[str, Any]:
    """One skill as OpenViking's listing and show describe it."""
    return {"type": "skill", "name": name, "uri": root_uri, "root_uri": root_uri,
            "skill_md_uri": f"{root_uri}/SKILL.md", "description": description}


def skill_meta(text: str) -> dict[str, Any]:
    """A SKILL.md's frontmatter, {} when it has none or it does not parse (shown, not judged)."""
    try:
        return frontmatter(text)
    except ValueError:
        return {}


def add_skill_routes(app: web.Application, gw: Any) -> None:
    calls = Calls(gw)

    async def listing(request: web.Request, root: str, limit: int) -> list[dict[str, Any]] | web.Response:
        got = await calls.call(request, catalog.FS_LS.name, {"uri": root, "node_limit": limit})
        if isinstance(got, web.Response):
            return [] if got.status == 404 else got
        # A skill directory's abstract is "<name>: <description>".
        return [summary(e["name"], e["uri"], (e.get("abstract") or "").removeprefix(f"{e['name']}: "))
                for e in got["entries"] if e["is_dir"]]

    async def list_skills(request: web.Request) -> web.StreamResponse:
        """`GET /api/v1/skills`: the user's skills and the agent's (or one root's)."""
        try:
            limit = int(request.query.get("node_limit", "1000")) or 1000
        except ValueError:
            return error_response("INVALID_ARGUMENT", "node_limit must be a number")
        target = request.query.get("target_uri")
        roots = [target] if target else [USER_ROOT, AGENT_ROOT]
        found: list[dict[str, Any]] = []
        for root in roots:
            got = await listing(request, root, limit)
            if isinstance(got, web.Response):
                return got
            found += got
        where = {"root_uri": target} if target else {"root_uris": roots}
        return ok({**where, "skills": found, "total": len(found)})

    async def locate(request: web.Request, name: str) -> str | web.Response:
        """The installed skill's directory: the user's own first, then the agent's."""
        roots = [request.query["target_uri"]] if request.query.get("target_uri") else [USER_ROOT, AGENT_ROOT]
        for root in roots:
            got = await calls.call(request, catalog.FS_STAT.name, {"uri": f"{root.rstrip('/')}/{name}"})
            if not isinstance(got, web.Response):
                return str(got["uri"])
            if got.status != 404:
                return got
        return error_response("NOT_FOUND", f"no skill named {name!r}", {"searched": roots})

    async def show(request: web.Request) -> web.StreamResponse:
        """`GET /api/v1/skills/{name}`: its summary, and its SKILL.md unless `include_content=false`."""
        name = request.match_info["name"]
        root = await locate(request, name)
        if isinstance(root, web.Response):
            return root
        text = await calls.call(request, catalog.FS_READ.name, {"uri": f"{root}/SKILL.md"})
        if isinstance(text, web.Response):
            return text
        meta = skill_meta(text["content"])
        out = summary(name, root, " ".join(str(meta.get("description", "")).split()))
        if request.query.get("include_content", "true").lower() != "false":
            out["content"] = text["content"]
        return ok(out)

    async def remove(request: web.Request) -> web.StreamResponse:
        """`DELETE /api/v1/skills/{name}`: the skill's directory and its rows."""
        name = request.match_info["name"]
        root = await locate(request, name)
        if isinstance(root, web.Response):
            return root
        got = await calls.call(request, catalog.FS_RM.name, {"uri": root, "recursive": True})
        return got if isinstance(got, web.Response) else ok({"name": name, "uri": root, "root_uri": root})

    async def replace(request: web.Request) -> web.StreamResponse:
        """`PUT /api/v1/skills/{name}`: new content (or an upload) for an installed skill."""
        name = request.match_info["name"]
        body = await body_of(request)
        if isinstance(body, web.Response):
            return body
        if body.get("from_source"):
            return error_response("INVALID_ARGUMENT", "Skald records no source for a skill: send its new content "
                                  "or an upload")
        root = await locate(request, name)
        if isinstance(root, web.Response):
            return root
        req = {**install_body(body), "scope": "user" if "/user/" in root else "agent"}
        if "upload_id" not in req:  # an upload is consumed by its install: checked by the install itself
            check = await calls.call(request, catalog.SKILLS_ADD.name, {**req, "dry_run": True})
            if isinstance(check, web.Response):
                return check
            if check["root_uri"] != root:
                return error_response("INVALID_ARGUMENT", f"the new SKILL.md names another skill "
                                      f"({check['root_uri']})", {"uri": root})
        got = await calls.call(request, catalog.SKILLS_ADD.name, req, timeout_s=600.0 if req.get("wait") else 30.0)
        return got if isinstance(got, web.Response) else ok(got)

    async def install(request: web.Request) -> web.StreamResponse:
        """`POST /api/v1/skills`: skills.add; a `list_only` preview answers with the skill found."""
        body = await body_of(request)
        if isinstance(body, web.Response):
            return body
        req = install_body(body)
        got = await calls.call(request, catalog.SKILLS_ADD.name, req, timeout_s=600.0 if req.get("wait") else 30.0)
        if isinstance(got, web.Response) or not req.get("dry_run"):
            return got if isinstance(got, web.Response) else ok(got)
        name = got["root_uri"].rsplit("/", 1)[-1]
        return ok({"skills": [{"name": name, "description": "", "path": name}], "total": 1})

    async def validate(request: web.Request) -> web.StreamResponse:
        """`POST /api/v1/skills/validate`: the SKILL.md checked by skills.add itself (a dry run), so
        what passes here installs."""
        body = await body_of(request)
        if isinstance(body, web.Response):
            return body
        text = body.get("data")
        text = text.get("content") if isinstance(text, dict) else text
        if not isinstance(text, str):
            return error_response("INVALID_ARGUMENT", "`data` must be the SKILL.md text")
        got = await calls.call(request, catalog.SKILLS_ADD.name, {"content": text, "dry_run": True})
        if isinstance(got, web.Response) and got.status != 400:
            return got
        errors = ([{"rule": "skill_format", "message": json.loads(got.body)["error"]["message"]}]  # type: ignore[arg-type]
                  if isinstance(got, web.Response) else [])
        meta = skill_meta(text)
        name = str(meta.get("name") or "")
        folder = body.get("skill_dir_name") or ""
        warnings = ([{"rule": "dir_name", "message": f"name {name!r} does not match directory name {folder!r}"}]
                    if folder and name and folder != name else [])
        return ok({"valid": not errors, "strict": bool(body.get("strict")), "name": name,
                   "description": " ".join(str(meta.get("description") or "").split()),
                   "source_path": body.get("source_path") or "", "skill_dir_name": folder,
                   "errors": errors, "warnings": warnings})

    app.router.add_post("/api/v1/skills/validate", validate)
    app.router.add_get("/api/v1/skills", list_skills)
    app.router.add_post("/api/v1/skills", install)
    app.router.add_get("/api/v1/skills/{name}", show)
    app.router.add_put("/api/v1/skills/{name}", replace)
    app.router.add_delete("/api/v1/skills/{name}", remove)

