"""Where bench keeps its files on the controller by default."""

from __future__ import annotations

import os
from pathlib import Path


def default_data_dir() -> Path:
    """Bundles and plans: $BENCH_DATA_DIR, else $XDG_DATA_HOME/bench (~/.local/share/bench)."""
    env = os.environ.get("BENCH_DATA_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "bench"
