"""The MGLRU boot unit's install: one command, the unit as an argument (never over stdin, which
fabric held open for about 15 s per deploy), run here by the real shell on real files. The
host's systemctl is stood in for by a script on PATH that records its arguments (the real one
would change this machine's boot)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench.errors import CommandFailed
from bench.hosts.deploy import boot_hook_unit, install_boot_hook
from bench.hosts.inventory import Host, RebootSpec
from bench.hosts.transport import LocalTransport


class NoStdin(LocalTransport):
    """This machine, refusing a command that would send data over stdin."""

    def __init__(self) -> None:
        super().__init__("boot-hook-host")
        self.calls: list[list[str]] = []

    def run(self, argv, *, stdin=None, **kw):
        assert stdin is None, "the unit must not travel over stdin"
        self.calls.append(list(argv))
        return super().run(argv, stdin=stdin, **kw)


@pytest.fixture
def systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "systemctl.log"
    stub = bin_dir / "systemctl"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\n[ "$1" != fail ] || exit 5\n'
                    f'[ -z "$SYSTEMCTL_FAIL" ] || exit 4\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def host(tmp_path: Path, allowed: bool = True) -> Host:
    return Host(name="boot-hook-host", address="127.0.0.1", transport="local",
                reboot=RebootSpec(allowed=allowed, method="systemctl"),
                work_dir=str(tmp_path / "work"))


def test_unit_written_and_enabled_in_one_command(tmp_path: Path, systemctl: Path):
    t, h = NoStdin(), host(tmp_path)
    unit = tmp_path / "etc" / "bench-lru-gen.service"
    unit.parent.mkdir()
    (tmp_path / "run-systemd").mkdir()
    t0 = time.monotonic()
    res = install_boot_hook(t, h, unit_path=str(unit), systemd_dir=str(tmp_path / "run-systemd"))
    assert time.monotonic() - t0 < 10     # the stdin path held ~15 s
    assert res == {"installed": True, "unit": str(unit)}
    assert len(t.calls) == 1
    assert unit.read_text() == boot_hook_unit(h.work_dir)      # byte for byte, newline kept
    assert not unit.with_name(unit.name + ".tmp").exists()
    assert systemctl.read_text().splitlines() == ["daemon-reload",
                                                  "enable bench-lru-gen.service"]


def test_no_systemd_is_said_and_nothing_written(tmp_path: Path, systemctl: Path):
    t = NoStdin()
    unit = tmp_path / "bench-lru-gen.service"
    res = install_boot_hook(t, host(tmp_path), unit_path=str(unit),
                            systemd_dir=str(tmp_path / "absent"))
    assert res["installed"] is False and "no systemd" in res["reason"]
    assert not unit.exists() and not systemctl.exists()


def test_not_rebootable_runs_nothing(tmp_path: Path, systemctl: Path):
    t = NoStdin()
    res = install_boot_hook(t, host(tmp_path, allowed=False), unit_path=str(tmp_path / "u"),
                            systemd_dir=str(tmp_path))
    assert res == {"installed": False, "reason": "host is not rebootable"}
    assert t.calls == []


def test_failing_systemctl_is_a_command_failure(tmp_path: Path, systemctl: Path,
                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SYSTEMCTL_FAIL", "1")
    (tmp_path / "run-systemd").mkdir()
    with pytest.raises(CommandFailed) as e:
        install_boot_hook(NoStdin(), host(tmp_path), unit_path=str(tmp_path / "u.service"),
                          systemd_dir=str(tmp_path / "run-systemd"))
    assert "exited 4" in e.value.message
