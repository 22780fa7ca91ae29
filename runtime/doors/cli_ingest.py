"""`skald add` and `skald job`: an ingest queued on the server and followed from the terminal.

The job runs on the server whatever happens to the command: a lost connection is said as it
happens (and the job's outcome asked for again once back, since its done event may have passed
meanwhile), Ctrl-C says the job goes on and how to follow it, and `--wait-timeout` bounds the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import click
import msgspec

from skald.messages.ingest import IngestProgress, IngestResult
from skald.runtime.client.api import SkaldClient
from skald.runtime.doors.cli_client import connection, emit

CHECK_EVERY_S = 15.0  # with no event for this long, the job's outcome is asked for (a done event may be lost)
EXIT_STILL_RUNNING = 75  # EX_TEMPFAIL: the wait ended, the job did not
BAR_STEPS = 1000  # the bar moves by the job's fraction done, passages of a long document included


def say(text: str) -> None:
    click.echo(text, err=True)


def ingest_text(r: IngestResult) -> str:
    if r.status != "done":
        return f"{r.status}: {r.root_uri} {r.error or ''}"
    lines = [f"added {r.root_uri}: {r.files} files, {r.sections} sections, {r.directories} directories, "
             f"{r.rows} rows" + (f", {r.removed} vanished files removed" if r.removed else "")]
    lines += [f"  skipped {s.uri}: {s.reason}" + (f" ({s.detail})" if s.detail else "") for s in r.skipped]
    return "\n".join(lines)


@click.command()
@click.argument("source")
@click.option("--name", help="Name under viking://resources (default: the file, directory or URL name).")
@click.option("--to", "target_uri", help="Parent URI (default viking://resources).")
@click.option("--include", multiple=True, help="Only files matching this glob (repeatable).")
@click.option("--exclude", multiple=True, help="Leave out files matching this glob (repeatable).")
@click.option("--keep-missing", is_flag=True, help="Keep files that vanished from a re-added folder.")
@click.option("--server-path", is_flag=True, help="Let the server read SOURCE itself (root or admin key) "
                                                  "instead of uploading it.")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until the resource is findable, or print the queued job and return.")
@click.option("--wait-timeout", type=float, default=0.0, show_default=True,
              help="Stop waiting after this many seconds (0: until the job ends); the job goes on, exit 75.")
@connection
async def add(client: SkaldClient, output: str, source: str, name: str | None, target_uri: str | None,
              include: tuple[str, ...], exclude: tuple[str, ...], keep_missing: bool, server_path: bool,
              wait: bool, wait_timeout: float) -> None:
    """Ingest a file, a folder, a URL or a git repository as a resource, with a progress bar on a
    terminal. Local files are uploaded (.gitignore honoured); URLs are fetched by the server."""
    kw: dict[str, Any] = {"wait": False, "keep_missing": keep_missing}
    if include:
        kw["include"] = list(include)
    if exclude:
        kw["exclude"] = list(exclude)
    if "://" in source:
        kw["url"] = source
    elif server_path:
        kw["path"] = str(Path(source).resolve())
    else:
        if not Path(source).exists():
            raise click.BadParameter(f"no such file or directory: {source}", param_hint="SOURCE")
        kw["upload_id"] = await client.upload(source, include=kw.get("include"), exclude=kw.get("exclude"))
    if name:
        kw["name"] = name
    if target_uri:
        kw["target_uri"] = target_uri
    if not wait:
        queued = await client.add_resource(**kw)
        emit(output, queued, lambda r: f"queued {r.root_uri}: job {r.job_id} (skald job {r.job_id} --wait)")
        return
    result = await ingest_with_progress(client, kw, show=output == "text" and sys.stderr.isatty(),
                                        wait_timeout=wait_timeout)
    emit(output, result, ingest_text)
    if result.status == "failed":
        raise SystemExit(1)
    if result.status == "queued":
        raise SystemExit(EXIT_STILL_RUNNING)


@click.command()
@click.argument("job_id")
@click.option("--wait", is_flag=True, help="Until the job ends (or --timeout).")
@connection
async def job(client: SkaldClient, output: str, job_id: str, wait: bool) -> None:
    """An ingest job's outcome, by the id `skald add` or `resources.add` gave: done or failed with
    its counts, or queued while it runs (exit 75)."""
    result = await client.job(job_id, wait=wait)
    emit(output, result, ingest_text)
    if result.status == "failed":
        raise SystemExit(1)
    if result.status == "queued":
        raise SystemExit(EXIT_STILL_RUNNING)


class Follow:
    """What the wait for one job has seen: its progress notes and its outcome, however it came."""

    def __init__(self) -> None:
        self.job_id = ""
        self.done: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self.progress: list[IngestProgress] = []
        self.early: dict[str, IngestResult] = {}
        self.last_heard = time.monotonic()

    def finish(self, r: IngestResult) -> None:
        if r.status == "queued":
            return
        if r.job_id == self.job_id and not self.done.done():
            self.done.set_result(r)
        elif not self.job_id:
            self.early[r.job_id] = r

    async def on_done(self, msg: Any) -> None:
        self.finish(msgspec.json.decode(msg.data, type=IngestResult))

    async def on_progress(self, msg: Any) -> None:
        p = msgspec.json.decode(msg.data, type=IngestProgress)
        if p.job_id == self.job_id:
            self.progress.append(p)
            self.last_heard = time.monotonic()


async def ingest_with_progress(client: SkaldClient, kw: dict[str, Any], show: bool,
                               wait_timeout: float = 0.0) -> IngestResult:
    """Queue the ingest, follow its progress notes and wait for its outcome, saying when the
    connection goes and comes back; on Ctrl-C, say that the job goes on and how to follow it."""
    f = Follow()
    # Events are published under the caller's account: ask which that is (a key pins it).
    token = (await client.whoami()).account_token
    subs = [await client.nc.subscribe(f"{client.prefix}.evt.acct.{token}.ingest.done.*", cb=f.on_done),
            await client.nc.subscribe(f"{client.prefix}.note.acct.{token}.ingest.progress.*", cb=f.on_progress)]
    try:
        try:
            queued = await client.add_resource(**kw)
        except asyncio.CancelledError:  # its reply lost (the worker died answering) or still on its way
            say("\nstopped before the server said the job was queued: it may be queued or not "
                "(adding the same source again re-reads only what changed)")
            raise
        f.job_id = queued.job_id
        if queued.job_id in f.early:
            f.finish(f.early[queued.job_id])
        try:
            final = await _wait(client, f, show, wait_timeout)
        except asyncio.CancelledError:
            say(f"\nstopped waiting: job {f.job_id} goes on on the server "
                f"(`skald job {f.job_id} --wait` follows it)")
            raise
        if final.status == "queued":
            say(f"still running after {wait_timeout:g}s: job {f.job_id} goes on on the server "
                f"(`skald job {f.job_id} --wait` follows it)")
            return msgspec.structs.replace(final, root_uri=queued.root_uri)
        return msgspec.structs.replace(final, root_uri=queued.root_uri, removed=queued.removed,
                                       skipped=[*queued.skipped, *final.skipped])
    finally:
        for s in subs:
            with contextlib.suppress(Exception):
                await s.unsubscribe()


async def _wait(client: SkaldClient, f: Follow, show: bool, wait_timeout: float) -> IngestResult:
    """Until the job's outcome is known or the wait times out (a `queued` result then)."""
    end = time.monotonic() + wait_timeout if wait_timeout > 0 else float("inf")
    connected = True
    bar = click.progressbar(length=BAR_STEPS, label="indexing", file=sys.stderr) if show else None
    with bar if bar is not None else contextlib.nullcontext():
        while not f.done.done():
            await asyncio.wait([f.done], timeout=0.2)
            if bar is not None and f.progress:
                p = f.progress[-1]  # files converted, and the passages of the batch being embedded
                bar.label = p.stage
                bar.update(max(0, int(p.fraction() * BAR_STEPS) - bar.pos))
            now = time.monotonic()
            if client.nc.is_connected != connected:
                connected = client.nc.is_connected
                say(f"\nreconnected; waiting for job {f.job_id}" if connected else
                    f"\nlost the connection to NATS; reconnecting (job {f.job_id} goes on on the server; "
                    "Ctrl-C stops waiting)")
                if connected:
                    f.last_heard = 0.0  # its done event may have passed while away: ask now
            if connected and not f.done.done() and now - f.last_heard >= CHECK_EVERY_S:
                f.last_heard = now
                with contextlib.suppress(Exception):  # a failed look is retried on the next round
                    f.finish(await client.job(f.job_id))
            if now >= end and not f.done.done():
                return IngestResult(job_id=f.job_id, root_uri="", status="queued")
        if bar is not None:
            bar.update(bar.length - bar.pos)
    return f.done.result()


COMMANDS = (add, job)


def register(group: click.Group) -> None:
    for cmd in COMMANDS:
        group.add_command(cmd)
