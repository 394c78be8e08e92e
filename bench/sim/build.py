"""Compile the simulator kernels (native/sim/simkern.c) into the cache dir on first use.

Not pure (it runs the C compiler): `bench.sim.kernels` only loads what this built. Uses $CC,
else cc, else gcc (the toolchain the agent already needs). `python -m bench.sim.build` builds
and prints the library's path. Without a compiler, or on a failed build, `ensure()` returns None
and the simulators use their numpy/Python fallbacks (same counts, slower).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.sim import kernels

FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"]


def compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


def ensure(timeout: float = 120.0) -> Path | None:
    """The loaded library's path if the kernels are usable now (building them if needed)."""
    if kernels.library() is not None:
        return kernels.cached_library()
    src, dest, cc = kernels.source_path(), kernels.cached_library(), compiler()
    if src is None or dest is None or cc is None:
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=dest.parent)
    os.close(fd)
    try:
        done = subprocess.run([cc, *FLAGS, "-o", tmp, str(src)], capture_output=True,
                              text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            return None
        os.replace(tmp, dest)         # atomic: a concurrent loader sees all or nothing
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    kernels.reset()
    return dest if kernels.library() is not None else None


if __name__ == "__main__":
    path = ensure()
    print(path if path else "no compiler or build failed: the numpy fallbacks will be used")
    sys.exit(0 if path else 1)
