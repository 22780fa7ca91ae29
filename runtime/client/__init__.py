"""The client agent hosts import: typed calls over NATS request/reply to a Skald deployment.

    from skald.runtime.client import SkaldClient
    client = await SkaldClient.connect("nats://127.0.0.1:4222")
    hits = await client.find("how are backups verified?")

It depends on the wire contract (`skald.messages`) and on nats-py only, never on the server's code.
"""

from skald.runtime.client.api import SkaldClient
from skald.runtime.client.sync import SyncSkaldClient
from skald.runtime.client.transport import Response, deadline_for

__all__ = ["Response", "SkaldClient", "SyncSkaldClient", "deadline_for"]
