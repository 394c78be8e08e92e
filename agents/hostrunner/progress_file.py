"""The agent's live progress file (native/progress.h), read by `runner.py status`."""

from __future__ import annotations

import os
import struct

MAGIC = 0x31475042
_WORDS = struct.Struct("=6I")      # magic, seq, pass, passes, iterations done, iterations


def progress_path(work_dir: str, run_id: str) -> str:
    """The agent's --progress file: outside the bundle."""
    return os.path.join(work_dir, "progress", f"{run_id}.bin")


def read_progress(work_dir: str, run_id: str) -> dict[str, int] | None:
    """{pass, passes, iteration, iterations} from the agent's live progress file, or None.
    The agent updates it with plain stores under a sequence word (odd while writing): retry
    until two reads of the sequence agree."""
    try:
        with open(progress_path(work_dir, run_id), "rb", buffering=0) as f:   # no stale buffer
            for _ in range(100):
                f.seek(0)
                raw = f.read(_WORDS.size)
                if len(raw) < _WORDS.size:
                    return None
                magic, seq, pas, passes, done, iters = _WORDS.unpack(raw)
                if magic != MAGIC:
                    return None
                f.seek(4)
                if seq % 2 == 0 and struct.unpack("=I", f.read(4))[0] == seq:
                    return {"pass": pas, "passes": passes, "iteration": done,
                            "iterations": iters}
    except OSError:
        return None
    return None
