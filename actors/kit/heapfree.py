"""Free heap pages handed back to the operating system after a burst of allocations.

glibc keeps what Python frees in its arenas for reuse; after a replica applies a long tail or loads
a snapshot (millions of short-lived row objects decoded, replaced and dropped) most of that is free
but still resident, counted against the process until something reuses it. `malloc_trim(0)` returns
the free pages: measured on an index of 50,000 section rows (`bench/row_memory.py`) the resident
figure falls by about 1.1 KB a row. A no-op where the C library has no such call.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util


def give_back() -> bool:
    """Return free heap pages to the system; whether the C library could be asked."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
        return True
    return False
