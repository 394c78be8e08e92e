"""One controller per host: a lock taken on the host itself.

Choice: flock(1) on `<work_dir>/bench.lock`, held by a remote process for as long as the lock
is held. The holder is `flock --nonblock FILE sh -c '<write owner>; echo LOCKED; cat'`, started
on a channel whose stdin stays open; releasing closes stdin, `cat` ends, the process exits and
the kernel drops the lock. If the controller dies or its connection drops, sshd closes the
session, the holder gets EOF and the lock goes with it: there are no stale locks to detect and
no clocks to compare. The owner (controller host, pid, time, purpose) is written into the lock
file so a refused second controller can say who holds it. Works the same over LocalTransport
(a local subprocess). The host-side cell runner detaches from SSH and uses its own run lock.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone

from bench.errors import HostError
from bench.hosts.inventory import Host
from bench.hosts.transport import Process, Transport

LOCK_NAME = "bench.lock"
CONFLICT_RC = 75
HOLDER = ('printf "%s\\n" "$1" > "$2" && echo LOCKED && exec cat > /dev/null')


class HostLocked(HostError):
    """Another controller holds the host lock."""


def default_owner(purpose: str = "") -> str:
    t = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"{socket.gethostname()} pid {os.getpid()} since {t}"
            + (f" ({purpose})" if purpose else ""))


class HostLock:
    """`with HostLock(transport, host): ...` holds the host's lock; a second holder gets
    HostLocked naming the owner."""

    def __init__(self, transport: Transport, host: Host, purpose: str = "",
                 owner: str | None = None):
        self.transport = transport
        self.host = host
        self.path = f"{host.work_dir}/{LOCK_NAME}"
        self.owner = owner or default_owner(purpose)
        self._proc: Process | None = None

    def acquire(self) -> None:
        if self._proc is not None:
            return
        self.transport.run(["mkdir", "-p", self.host.work_dir], timeout=30)
        argv = ["flock", "--nonblock", "--conflict-exit-code", str(CONFLICT_RC), self.path,
                "sh", "-c", HOLDER, "bench-lock", self.owner, self.path]
        proc = self.transport.spawn(argv)
        line = proc.readline(timeout=30)
        if line.strip() == "LOCKED":
            self._proc = proc
            return
        rc = proc.exit_status(10)
        rest = proc.read_rest()
        proc.close()
        if rc == CONFLICT_RC:
            holder = self.transport.run(["cat", self.path], timeout=30, check=False).stdout.strip()
            raise HostLocked(self.host.name, f"locked by another controller: {holder or 'unknown'}",
                             f"wait for it to finish (the lock is {self.path} on the host; it "
                             "goes away when its holder exits or disconnects)")
        raise HostError(self.host.name, f"could not take the host lock {self.path} "
                        f"(exit {rc}): {(line + rest).strip()[:300]}")

    def release(self) -> None:
        if self._proc is not None:
            proc, self._proc = self._proc, None
            proc.close()

    @property
    def held(self) -> bool:
        return self._proc is not None

    def __enter__(self) -> "HostLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def wait_released(lock: HostLock, timeout: float = 5.0) -> bool:
    """Poll until the host lock can be taken (then release it at once); True when it could."""
    deadline = time.monotonic() + timeout
    while True:
        probe = HostLock(lock.transport, lock.host, owner="bench probe")
        try:
            probe.acquire()
            probe.release()
            return True
        except HostLocked:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
