"""A stand-in controller for the campaign-lock tests: a real process that takes (or tries to
take) a campaign's controller lock through bench.store.controller_lock, with its wall clock
skewed by SKEW seconds (time.time patched in this process only, before bench is imported: the
controller's clock runs ahead, the database's does not).

python -m tests.support.controller_proc URL CAMPAIGN MODE STALE_S SKEW_S
MODE hold: take the lock, print {"taken": ...}, heartbeat every 0.2 s printing {"beat": ok}
           until a heartbeat says the lock is lost (then exit 3) or stdin closes (release).
           A heartbeat that fails (the database ended a stalled session) is retried at the next
           beat, as the campaign executor does. Lines on stdin freeze it (SIGSTOP to itself):
           "stop" between two heartbeats, "stop-in-beat" inside the next heartbeat's
           transaction, after it read the lock row FOR UPDATE (it then holds the row lock).
MODE try:  try once, print {"taken": ..., "holder": ...}, exit 0 when taken else 1.
MODE retry: try every 0.1 s until taken (printing {"refused": holder} after the first try that
           is refused), print it, exit 0."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time


def main() -> int:
    url, cid, mode, stale_s, skew = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), \
        float(sys.argv[5])
    real = time.time
    time.time = lambda: real() + skew        # noqa: E731 - the skewed controller clock
    import bench.store.controller_lock as cl
    from bench.store.controller_lock import acquire_lock, heartbeat, owner_info, release_lock
    freeze = {"in_beat": False}
    real_db_now = cl.db_now

    def db_now(s):                  # heartbeat reads the clock after it locked the row
        t = real_db_now(s)
        if freeze["in_beat"]:
            freeze["in_beat"] = False
            os.kill(os.getpid(), signal.SIGSTOP)
        return t
    cl.db_now = db_now
    from bench.store.db import open_store
    store = open_store(url)
    me = owner_info("test controller")
    tries = 0
    while True:
        holder = acquire_lock(store, cid, me, stale_s)
        if holder is None or mode != "retry":
            break
        tries += 1
        if tries == 1:
            print(json.dumps({"refused": holder}), flush=True)
        time.sleep(0.1)
    print(json.dumps({"taken": holder is None, "holder": holder, "me": me}), flush=True)
    if mode != "hold":
        return 0 if holder is None else 1
    while True:
        if select.select([sys.stdin], [], [], 0.2)[0]:
            line = sys.stdin.readline()
            if not line:
                release_lock(store, cid, me)
                return 0
            if line == "stop\n":
                os.kill(os.getpid(), signal.SIGSTOP)
            freeze["in_beat"] = line == "stop-in-beat\n"
        try:
            ok = heartbeat(store, cid, me)
        except Exception:  # noqa: BLE001 - retried at the next beat, as the executor does
            continue
        print(json.dumps({"beat": ok}), flush=True)
        if not ok:
            return 3


if __name__ == "__main__":
    sys.exit(main())
