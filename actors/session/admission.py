"""What a message goes through before it is stored: the Turn rule for tool outputs. Its own
oversized outputs go to files under `tool-results/`, and so do earlier outputs of its Turn once the
Turn's total is over the limit (docs/design/sessions.md, retention); a commit applies the same rule
to the whole live log before it plans retention."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec

from skald.actors.session import externalize, turns
from skald.actors.session.state import State
from skald.messages import sessions as session_msgs
from skald.store import sessions as session_store


class Admission:
    """Tool outputs moved out of a session's messages, each write fenced by the session's lease."""

    def __init__(self, fence: Callable[[str], None]) -> None:
        self.fence = fence

    async def replace_root(self, key: str, st: State, root: list[session_msgs.Message]) -> None:
        """Rewrite the live messages (same ids, outputs moved to files), atomically."""
        self.fence(key)
        await asyncio.to_thread(session_store.write_live, st.sdir, root)
        st.root = root

    async def admit(self, key: str, st: State, msg: session_msgs.Message) -> session_msgs.Message:
        """A new message under the Turn rule before it is stored: its own oversized outputs go to
        files, and so do earlier outputs of its Turn once the Turn's total is over the limit."""
        if not externalize.has_outputs(msg):
            return msg  # no output to weigh: no Turn's total changes
        start = turns.turn_start(st.root)  # earlier Turns were weighed when their messages came
        candidate = [*st.root[start:], msg]
        out = await self.externalize(key, st, candidate)
        if out is candidate:
            return msg
        if out[:-1] != st.root[start:]:
            await self.replace_root(key, st, [*st.root[:start], *out[:-1]])
        return out[-1]

    async def externalize(self, key: str, st: State,
                          messages: list[session_msgs.Message] | None = None) -> list[session_msgs.Message]:
        """Move oversized tool outputs of each Turn (of `messages`, by default the live root) to
        `tool-results/`, durably; the same list back when nothing moved."""
        messages = st.root if messages is None else messages
        chosen = externalize.plan_externalization(messages)
        if not chosen:
            return messages
        by_msg: dict[str, dict[int, externalize.Externalize]] = {}
        for e in chosen:
            by_msg.setdefault(e.message_id, {})[e.part_index] = e
        out = []
        for m in messages:
            todo = by_msg.get(m.id)
            if not todo:
                out.append(m)
                continue
            parts = list(m.parts)
            for i, e in todo.items():
                p = parts[i]
                assert isinstance(p, session_msgs.ToolPart)
                self.fence(key)
                await asyncio.to_thread(session_store.write_bytes, st.sdir.tree, st.sdir.tool_result_key(e.filename),
                                        p.tool_output.encode())
                parts[i] = msgspec.structs.replace(p, tool_output=externalize.preview(p.tool_output),
                                                   tool_output_uri=st.sdir.tool_result_uri(e.filename),
                                                   tool_output_chars=len(p.tool_output), tool_output_truncated=True)
            out.append(msgspec.structs.replace(m, parts=parts))
        return out
