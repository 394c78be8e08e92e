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

from bench.paths import private_dir
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
        return kernels.loaded_path()
    src, dest, cc = kernels.source_path(), kernels.cached_library(), compiler()
    if src is None or dest is None or cc is None:
        return None
    try:
        private_dir(dest.parent)      # 0700: only we may put a library there
        fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=dest.parent)
        os.close(fd)
    except OSError:                   # an unwritable cache: run the fallbacks
        return None
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
    return kernels.loaded_path()


if __name__ == "__main__":
    path = ensure()
    print(path if path else "no compiler or build failed: the numpy fallbacks will be used")
    sys.exit(0 if path else 1)
