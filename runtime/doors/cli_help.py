"""What the CLI says about itself: an example under every command's `--help`, and which command
serves each public operation of the catalog (a test checks both against the catalog and the
command tree, so an operation added without a command, or a command without an example, fails)."""

from __future__ import annotations

import click

EXAMPLES: dict[str, str] = {
    "up": "skald up --data-dir ~/skald --embedder hash",
    "worker": "skald worker --nats-url nats://10.0.0.5:4222 --actors retriever,assembler",
    "http": "skald http --port 1933 --keys-file keys.json",
    "mcp": "claude mcp add skald -- skald mcp --nats-url nats://127.0.0.1:4222",
    "config": "skald config --config skald.toml",
    "keys create": "skald keys create --file keys.json --role user --account acme --user ana",
    "keys list": "skald keys list --file keys.json",
    "keys nats-config": "skald keys nats-config --file keys.json > auth.conf",
    "store migrate": "skald store migrate --to jetstream --data-dir ./skald-data --nats-url nats://n1:4222,nats://n2:4223",
    "store sweep": "skald store sweep --older-than 3600 --nats-url nats://n1:4222,nats://n2:4223",
    "store reshard": "skald store reshard --shards 3 --nats-url nats://n1:4222,nats://n2:4223",
    "keys revoke": "skald keys revoke --file keys.json k_3f2a",
    "replay record": "skald replay record --out journal.jsonl",
    "replay apply": "skald replay apply --in journal.jsonl --nats-url nats://127.0.0.1:4223",
    "replay compact": "skald replay compact --snapshot /backups/skald-snap --purge",
    "replay restore": "skald replay restore --snapshot /backups/skald-snap --data-dir ~/skald-new",
    "find": 'skald find "how do we rotate certificates" --type resource -n 5',
    "search": 'skald search "deploy steps" --mode context --session s1 --max-tokens 800',
    "recall": 'skald recall "what port does caddy use" --session s1',
    "grep": 'skald grep "TODO|FIXME" --uri viking://resources/repo -i',
    "glob": 'skald glob "**/*.md" --uri viking://resources',
    "ls": "skald ls viking://resources",
    "tree": "skald tree viking://user -L 2",
    "read": "skald read viking://resources/guide.md --offset 40 --limit 20",
    "write": 'skald write viking://resources/notes/today.md "Deployed 1.4 to staging."',
    "remember": 'skald remember preferences "Prefers answers with code first"',
    "add": 'skald add ./docs --exclude "*.tmp"',
    "job": "skald job 3f2a9c0d5e8b4f1a9c0d5e8b4f1a9c0d --wait",
    "call": "skald call search.find '{\"query\": \"who is on call\", \"limit\": 5}'",
    "mkdir": "skald mkdir viking://resources/runbooks",
    "rm": "skald rm -r viking://resources/old",
    "mv": "skald mv viking://resources/a.md viking://resources/archive/a.md",
    "stat": "skald stat viking://resources/guide.md",
    "abstract": "skald abstract viking://resources/runbooks",
    "overview": "skald overview viking://resources/runbooks",
    "tags": "skald tags viking://resources/guide.md team=infra status=draft --mode add",
    "reindex": "skald reindex viking://resources",
    "skill": "skald skill ./skills/deploy/SKILL.md --scope user",
    "whoami": "skald whoami --api-key $SKALD_API_KEY",
    "health": "skald health -o json",
    "stats": "skald stats",
    "memory update": 'skald memory update viking://user/default/memories/preferences/tea.md "Prefers coffee"',
    "memory forget": "skald memory forget viking://user/default/memories/preferences/tea.md",
    "memory history": "skald memory history viking://user/default/memories/preferences/tea.md",
    "session create": "skald session create s1 --auto-commit-messages 40",
    "session add": 'skald session add s1 user "Deploy caddy on port 1935"',
    "session commit": "skald session commit s1 --wait",
    "session context": "skald session context s1",
    "session list": "skald session list -o json",
    "session get": "skald session get s1",
    "session retry-archive": "skald session retry-archive s1 archive_003",
    "session delete": "skald session delete s1",
    "session archives": "skald session archives s1",
    "session used": "skald session used s1 viking://user/alice/memories/preferences/coffee.md",
}

# Every public operation and the command that serves it.
OP_COMMANDS: dict[str, str] = {
    "fs.ls": "ls", "fs.tree": "tree", "fs.read": "read", "fs.write": "write", "fs.stat": "stat",
    "fs.mkdir": "mkdir", "fs.rm": "rm", "fs.mv": "mv", "fs.abstract": "abstract", "fs.overview": "overview",
    "search.find": "find", "search.search": "search", "search.recall": "recall", "search.grep": "grep",
    "search.glob": "glob",
    "resources.add": "add", "resources.upload": "add", "resources.job": "job", "skills.add": "skill",
    "content.set_tags": "tags", "content.reindex": "reindex",
    "memories.write": "remember", "memories.update": "memory update", "memories.delete": "memory forget",
    "memories.history": "memory history",
    "sessions.create": "session create", "sessions.add_message": "session add", "sessions.commit": "session commit",
    "sessions.context": "session context", "sessions.list": "session list", "sessions.get": "session get",
    "sessions.delete": "session delete", "sessions.archives": "session archives",
    "sessions.retry_archive": "session retry-archive", "sessions.used": "session used",
    "system.health": "health", "system.stats": "stats", "system.whoami": "whoami",
}


def commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every leaf command under `group`, by its path (`session add`)."""
    out: dict[str, click.Command] = {}
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out.update(commands(cmd, path + " "))
        else:
            out[path] = cmd
    return out


def annotate(group: click.Group) -> None:
    """Put each command's example under its help text."""
    for path, cmd in commands(group).items():
        if path in EXAMPLES:
            cmd.epilog = f"\b\nExample:\n  {EXAMPLES[path]}"
