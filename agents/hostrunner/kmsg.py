"""The kernel log between `pre` and `post` (kmsg.txt).

/dev/kmsg is opened non-blocking at `pre` and positioned at its end (SEEK_END); at `post` every
record since is read from that descriptor (EPIPE = records overwritten in the ring, counted as
lost). Without /dev/kmsg: `dmesg --raw`, lines after the last line seen at `pre`. The method is
recorded in runner.json."""

from __future__ import annotations

import errno
import os
import subprocess
from typing import Any


class KernelLog:
    def __init__(self) -> None:
        self.info: dict[str, Any] = {"method": None}
        self.fd: int | None = None
        self.last: str | None = None
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self.fd, 0, os.SEEK_END)
            self.info["method"] = "/dev/kmsg"
        except OSError as e:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            self.info["kmsg_error"] = str(e)
            self._mark_dmesg()

    def _mark_dmesg(self) -> None:
        r = subprocess.run(["dmesg", "--raw"], capture_output=True, text=True)
        if r.returncode == 0:
            self.info["method"] = "dmesg-diff"
            lines = r.stdout.splitlines()
            self.last = lines[-1] if lines else ""
        else:
            self.info["method"] = "unavailable"
            self.info["dmesg_error"] = r.stderr.strip()

    def collect(self) -> list[str]:
        """The records since `pre`; the descriptor is closed afterwards."""
        if self.fd is not None:
            return self._collect_kmsg(self.fd)
        if self.info["method"] == "dmesg-diff":
            r = subprocess.run(["dmesg", "--raw"], capture_output=True, text=True)
            lines = r.stdout.splitlines()
            idx = max((i for i, ln in enumerate(lines) if ln == self.last), default=-1)
            out = lines[idx + 1:]
            self.info.update(records=len(out), found_mark=idx >= 0)
            return out
        return []

    def _collect_kmsg(self, fd: int) -> list[str]:
        out = []
        lost = 0
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:
                    lost += 1
                    continue
                self.info["read_error"] = str(e)
                break
            if not rec:
                break
            out.append(rec.decode("utf-8", "replace").rstrip("\n"))
        os.close(fd)
        self.fd = None
        self.info.update(records=len(out), overruns=lost)
        return out
