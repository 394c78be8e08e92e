#!/usr/bin/env python3
"""bench host-side cell runner: one measurement cell on this host (Algorithm 1 of docs/design.md).

Python 3.8+ standard library only. `bench hosts deploy` ships agents/ (this file and the
hostrunner/ package next to it) and hosts run this file with their python3; the code is in
hostrunner/ (agents/README.md lists its modules). Writes the run bundle of docs/bundle.md.

    python3 runner.py start  --spec SPEC.json --work-dir DIR   -> {"run_id","pid","bundle",...}
    python3 runner.py status RUN_ID --work-dir DIR             -> status.json (+ "live")
    python3 runner.py wait   RUN_ID --work-dir DIR [--timeout S]
    python3 runner.py stop   RUN_ID --work-dir DIR             -> SIGTERM to the runner
    python3 runner.py pool   --dir D | --root POOL_DIR --layers L --experts E
                             --expert-bytes S [--seed N] [--template T] -> {"ok","status",...}
    python3 runner.py pools  --root POOL_DIR --work-dir DIR    -> {"ok","root","pools":[...]}
    python3 runner.py pool-rm KEY --root POOL_DIR --work-dir DIR -> {"ok","key","removed",...}

Exit codes: 0 ok (started, re-attached, done; pool made, resumed or present), 1 run failed /
runner error, 2 bad spec or usage, 3 wait timed out or pool refused (or not removed: no such
pool, or a live run reads it). `--root` pools live in `<root>/<L>x<E>x<S>-s<seed>/`
(hostrunner/poolstore.py). `--work-dir` defaults to
$BENCH_WORK_DIR, else /var/lib/bench.

Files under work_dir: runs/<run_id>/ (the bundle), host.lock (flock, held for a whole run),
host.lock.owner (who holds it), start.lock (short critical section of start/re-attach),
locks/<run_id>.lock (flock held by the live runner of that run: "is it alive" = "is it
locked"), active/<run_id>.json (PIDs and cgroups a run created; removed after its teardown;
a later run's cleanup acts only on what these records name).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if TYPE_CHECKING:
    # a type checker reads the same modules as this package's hostrunner (agents.hostrunner)
    from .hostrunner import commands, errors, probes, progress_file, spec
else:
    # hostrunner is found through the sys.path entry above
    from hostrunner import commands, errors, probes, progress_file, spec

main = commands.main
# what `import runner` users (tests, older controller code) take from this file
RunFailed, SpecError = errors.RunFailed, errors.SpecError
cgroup_backend, read_progress = probes.cgroup_backend, progress_file.read_progress
parse_cell, parse_engine_cell, validate_spec = spec.parse_cell, spec.parse_engine_cell, \
    spec.validate_spec

if __name__ == "__main__":
    sys.exit(main())
