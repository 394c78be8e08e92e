"""A stand-in controller for the campaign-lock tests: a real process that takes (or tries to
take) a campaign's controller lock through bench.store.controller_lock, with its wall clock
skewed by SKEW seconds (time.time patched in this process only, before bench is imported: the
controller's clock runs ahead, the database's does not).

python -m tests.support.controller_proc URL CAMPAIGN MODE STALE_S SKEW_S
MODE hold: take the lock, print {"taken": ...}, heartbeat every 0.2 s printing {"beat": ok}
           until a heartbeat says the lock is lost (then exit 3) or stdin closes (release).
MODE try:  try once, print {"taken": ..., "holder": ...}, exit 0 when taken else 1.
MODE retry: try every 0.1 s until taken (printing {"refused": holder} after the first try that
           is refused), print it, exit 0."""

from __future__ import annotations

import json
import select
import sys
import time


def main() -> int:
    url, cid, mode, stale_s, skew = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), \
        float(sys.argv[5])
    real = time.time
    time.time = lambda: real() + skew        # noqa: E731 - the skewed controller clock
    from bench.store.controller_lock import acquire_lock, heartbeat, owner_info, release_lock
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
        if select.select([sys.stdin], [], [], 0.2)[0] and not sys.stdin.readline():
            release_lock(store, cid, me)
            return 0
        ok = heartbeat(store, cid, me)
        print(json.dumps({"beat": ok}), flush=True)
        if not ok:
            return 3


if __name__ == "__main__":
    sys.exit(main())
