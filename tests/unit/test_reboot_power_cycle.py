"""The proven reboot's own power-cycle fallback (bench.hosts.reboot._await_new_boot): a power
command that exits non-zero does not end the wait; the new boot_id decides (a BMC reports an
error although it cycled the chassis, as the campaign ladder already assumes). The host here is
a stand-in whose boot_id changes only once the real power command, run on this machine, has
done its work; the command itself is real (sh), and it fails the way ipmitool does."""

from __future__ import annotations

from pathlib import Path

from bench.errors import Unreachable
from bench.hosts.bootplan import BOOT_ID, Observation
from bench.hosts.inventory import Host, RebootSpec
from bench.hosts.reboot import RebootResult, _await_new_boot, _Log
from bench.hosts.transport import Result

FAIL_LIKE_IPMITOOL = 'echo "Error: Unable to establish IPMI v2 / RMCP+ session" >&2; exit 1'


class PoweredHost:
    """Answers `cat boot_id` once `mark` exists (the power command made it), else is down."""
    host = "bmc-host"
    local = False

    def __init__(self, mark: Path):
        self.mark = mark

    def run(self, argv, **kw):
        assert list(argv) == ["cat", BOOT_ID], argv
        if not self.mark.exists():
            raise Unreachable(self.host, "connection refused")
        return Result(self.host, tuple(argv), 0, "new-boot\n", "", 0.0)

    def close(self):
        pass


def _wait(tmp_path, script: str):
    mark = tmp_path / "cycled"
    host = Host(name="bmc-host", address="10.0.0.9", transport="ssh",
                reboot=RebootSpec(allowed=True, method="grub-reboot", grub_entry="e",
                                  power_cycle=("sh", "-c", script, "power", str(mark))))
    before = Observation(boot_id="old-boot", cmdline="", memtotal=1 << 30, lru_mask=None)
    res = RebootResult(host.name, False, "quarantine", "", "grub-reboot", "", None, None)
    log = _Log(host.name, None)
    got = _await_new_boot(PoweredHost(mark), host, before, res, log, 0.0, down_timeout=5,
                          up_timeout=1.5, poll_interval=0.1)
    return got, res, [e.detail for e in log.events if e.step == "power-cycle"]


def test_a_failed_power_command_that_cycled_the_host_is_proven_by_the_new_boot(tmp_path):
    got, res, said = _wait(tmp_path, 'touch "$1"; ' + FAIL_LIKE_IPMITOOL)
    assert got == "new-boot" and res.power_cycled and not res.reason
    assert any("the command failed" in d and "waiting for a new boot anyway" in d for d in said)


def test_a_failed_power_command_and_no_new_boot_says_both(tmp_path):
    got, res, _ = _wait(tmp_path, FAIL_LIKE_IPMITOOL)
    assert got is None and res.power_cycled
    assert "after a power cycle whose command failed" in res.reason
    assert "Unable to establish IPMI" in res.reason        # the BMC's own words


def test_a_power_command_that_works_needs_no_excuse(tmp_path):
    got, res, said = _wait(tmp_path, 'touch "$1"')
    assert got == "new-boot" and not any("failed" in d for d in said)
