"""py3langid's model, decompressed once per machine and read from there after.

py3langid ships its model as 4.6 MB of xz holding 68 MB of arrays: decompressing them took 0.5-0.7 s
of CPU, and every worker process paid it on its first ingest of a row its function words do not
tell (a file name over a one-line heading is enough), in the middle of that request. A scaled-out
indexer answered its first job that much later, and a test suite that starts a hundred workers
spent a minute of CPU on it.

The arrays are kept decompressed under the user's cache directory (`$XDG_CACHE_HOME/skald`, else
`~/.cache/skald`), one `.npy` file each, in a directory named for the model file's size and time,
written once into a temporary directory and renamed into place: a process that finds the directory
finds it whole. Read from there the identifier is built in 26-43 ms, and its two large arrays are
mapped, not copied, so the workers of one host share those pages: the 28 MB feature table and the
39 MB tokenizer automaton, which py3langid walks through a memoryview of the mapping as fast as
through its own copy (faster here: 263-361 us a 600-character sentence against 849-925). Where the
cache cannot be written or read, the model is decompressed from the package as before; a directory
that does not read back (a disk that lost the files' contents) is written again, and the temporary
directory of a process killed while it wrote is removed by the next process that writes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Literal

import numpy as np

_NAMES = ("ptc", "pc", "classes", "nextmove", "row", "output")
_MAPPED = frozenset({"ptc", "nextmove"})  # read in place; the small ones are read whole
_TYPECODE: dict[int, Literal["H", "I", "L"]] = {2: "H", 4: "I", 8: "L"}


def cache_root() -> Path:
    """Where Skald keeps what it can make again: XDG's cache directory."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skald"


def identifier(root: Path | None = None) -> Any:
    """py3langid's `LanguageIdentifier` (normalised probabilities, every language) from the cache
    under `root`, which it fills first if it has to."""
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

    model = Path(MODEL_DIR) / MODEL_FILE
    st = model.stat()
    where = (root or cache_root()) / f"py3langid-{st.st_size}-{st.st_mtime_ns}"
    arrays = _read(where)
    if arrays is None:
        arrays = _decompressed(model)
        _write(where, arrays)
    return LanguageIdentifier(arrays["ptc"], arrays["pc"], arrays["classes"].tolist(), _viewed(arrays["nextmove"]),
                              arrays["output"].tolist(), norm_probs=True, tk_row=_viewed(arrays["row"]))


def _decompressed(model: Path) -> dict[str, np.ndarray]:
    from py3langid.modelio import load_model

    ptc, pc, classes, nextmove, row, output = load_model(model)
    return {"ptc": np.asarray(ptc), "pc": np.asarray(pc), "classes": np.array(classes),
            "nextmove": np.frombuffer(nextmove, dtype=f"u{nextmove.itemsize}"),
            "row": np.frombuffer(row, dtype=f"u{row.itemsize}"), "output": np.asarray(output, dtype=np.int32)}


def _viewed(a: np.ndarray) -> memoryview[int]:
    """The array's own memory (a mapping, when read from the cache) indexed as py3langid's
    tokenizer indexes its stdlib arrays (the automaton and its row offsets): item by item, to
    Python ints, with no copy."""
    whole = a if a.flags.c_contiguous else np.ascontiguousarray(a)  # a loaded array always is
    return whole.data.cast("B").cast(_TYPECODE[a.dtype.itemsize])


def _read(where: Path) -> dict[str, np.ndarray] | None:
    if not where.is_dir():
        return None
    try:
        arrays = {n: np.load(where / f"{n}.npy", mmap_mode="r" if n in _MAPPED else None, allow_pickle=False)
                  for n in _NAMES}
        classes = len(arrays["classes"])
        if arrays["ptc"].shape[1] != classes or len(arrays["pc"]) != classes or len(arrays["nextmove"]) % 256:
            raise ValueError("the arrays do not fit together")
        return arrays
    except (OSError, EOFError, ValueError, IndexError, KeyError):  # what np.load raises on a short or foreign file
        shutil.rmtree(where, ignore_errors=True)  # written again by this process
        return None


def _write(where: Path, arrays: dict[str, np.ndarray]) -> None:
    """Into a directory of this process's own, renamed into place; a process that renamed first wins."""
    tmp = where.with_name(f".{where.name}.{os.getpid()}")
    _remove_abandoned(where)
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for n in _NAMES:
            np.save(tmp / f"{n}.npy", arrays[n], allow_pickle=False)
        os.rename(tmp, where)
    except OSError:  # unwritable, full, or another process's directory is there already
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)


def _remove_abandoned(where: Path) -> None:
    """Temporary directories beside `where` whose writer is no longer running (killed mid-write)."""
    if not where.parent.is_dir():
        return
    for left in where.parent.glob(f".{where.name}.*"):
        pid = left.name.rsplit(".", 1)[1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(left, ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass
