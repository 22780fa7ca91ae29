"""What a failed MCP tool says to the model: one sentence per part, whatever the message ends with."""

from __future__ import annotations

from skald.messages import errors
from skald.runtime.doors.mcpserver import tool_error


def test_a_question_in_the_message_is_not_followed_by_a_stray_full_stop() -> None:
    e = errors.Unavailable("cannot reach NATS at nats://127.0.0.1:4222: is `skald up` running?")
    assert tool_error(e) == ("UNAVAILABLE: cannot reach NATS at nats://127.0.0.1:4222: is `skald up` running? "
                             "Skald is busy or restarting: try the same tool again shortly.")
    assert "?." not in tool_error(e)


def test_a_message_gets_one_full_stop_and_its_hint() -> None:
    assert tool_error(errors.NotFound("no such file")) == \
        "NOT_FOUND: no such file. Check the URI with the ls or find tool."
    assert tool_error(errors.InvalidArgument("bad limit.")) == "INVALID_ARGUMENT: bad limit."
