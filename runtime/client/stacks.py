"""What a process that does not answer, or does not stop, is waiting for: `kill -USR1 <pid>`
prints its stacks on stderr (the worker's and the client commands')."""

from __future__ import annotations

import asyncio
import faulthandler
import io
import signal
import sys
from types import FrameType


def dump_tasks() -> None:
    """Every pending task's stack on stderr (from inside the running event loop)."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()}", file=out)
        task.print_stack(file=out)
    sys.stderr.write(out.getvalue())
    sys.stderr.flush()


def _dump_all(signum: int, frame: FrameType | None) -> None:
    faulthandler.dump_traceback(all_threads=True)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # before the event loop starts or after it ends: the threads say it all
    dump_tasks()


def on_usr1() -> None:
    """SIGUSR1 prints every thread's stack and, while an event loop runs, every task's: a command
    stuck in a wait, or stuck outside its loop, says where."""
    signal.signal(signal.SIGUSR1, _dump_all)
