"""The recovery ladder's power-cycle rung and the patience paths that climb it, for real over
SSH on the netns lab (real sshd, real runner, the real campaign executor and store).

A test inventory gives lab-netns-1 (X) a `[reboot] power_cycle` argv: a BMC stand-in run on
the controller that counts its calls and always fails as ipmitool does when it cannot talk to
the BMC (exit 1, "Error: Unable to establish IPMI v2 / RMCP+ session" on stderr). Depending on
its mode it first really "cycles" the host (`python -m bench.lab.netns reboot X`: every
process of X's netns killed, a new boot_id, sshd started again; this machine is never
rebooted) or does nothing.

1. In the wait: X crashes mid-run (every process of its netns killed, the runner included).
   After the patience the ladder looks (unreachable), power-cycles; the command says it failed
   but the cycle happened: the new boot is waited for, proven, and the run is stored failed
   with the ladder's steps (the command's exit status and stderr among them); the campaign
   finishes X's other runs. One call of the command. Meanwhile an I/O-error line written to
   the (shared) kernel log while a run of Y measures gets that run rejected, so `bench report`
   of the campaign shows a failed and a rejected run.
2. Re-attaching: a controller is SIGKILLed while X runs a run and X crashes with it; a resume
   finds X answering, then X goes away for good at the re-attachment. The patience runs out,
   the ladder climbs: the first power command fails and nothing comes back within the
   up_timeout, so it is run once more, this time cycling X; the run is stored failed
   (interrupted) with the steps, and the campaign finishes on both hosts.

Needs root."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.cli.schedule import build_plan
from bench.execute.campaign.executor import Executor
from bench.execute.campaign.record import Settings, create
from bench.hosts.inventory import RebootSpec, load_inventory, render_host_toml
from bench.store import queries
from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.db import open_store
from tests.support.fleet import host_status, wait_for

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "tests" / "fixtures" / "matrices" / "lab-campaign.toml"
X, Y = "lab-netns-1", "lab-netns-2"
NAMES = [X, Y]
TERMINAL = ("validated", "rejected")
RECONNECT_S = 3.0
UP_S = 8.0
IPMI_ERR = "Error: Unable to establish IPMI v2 / RMCP+ session"
KMSG_LINE = "Buffer I/O error on dev bench-test, logical block 0, async page read"

# the BMC stand-in: argv[1] its call counter, argv[2] its mode (cycle: reboot the lab host on
# every call; second: only from the second call on; nothing: never), argv[3] the lab's state
BMC = f"""import pathlib, subprocess, sys
calls = pathlib.Path(sys.argv[1])
n = int(calls.read_text()) + 1 if calls.exists() else 1
calls.write_text(str(n))
if sys.argv[2] == "cycle" or (sys.argv[2] == "second" and n >= 2):
    subprocess.run([sys.executable, "-m", "bench.lab.netns", "reboot", {X!r},
                    "--state-dir", sys.argv[3]], check=True)
print("Set Chassis Power Control to Cycle failed")
sys.stderr.write({IPMI_ERR!r} + "\\n")
sys.exit(1)
"""


def ladder_inventory(lab, dest: Path, mode: str) -> tuple[Path, Path]:
    """A copy of the lab's inventory where X may be power-cycled through the BMC stand-in
    (and rebooted over SSH by the lab's own restart, which a crashed host never gets)."""
    inv = load_inventory(lab.hosts_dir)
    dest.mkdir()
    calls = dest.parent / f"bmc-calls-{mode}"
    bmc = dest.parent / "bmc.py"
    bmc.write_text(BMC)
    pid = os.getpid()
    command = ("setsid", "-f", "nsenter", f"--net=/proc/{pid}/ns/net",
               f"--mount=/proc/{pid}/ns/mnt", "--", sys.executable, "-m", "bench.lab.netns",
               "reboot", X, "--state-dir", str(lab.state_dir), "--delay", "0.3")
    x = dataclasses.replace(inv[X], reboot=RebootSpec(
        allowed=True, method="command", command=command, down_timeout=10, up_timeout=UP_S,
        power_cycle=(sys.executable, str(bmc), str(calls), mode, str(lab.state_dir))))
    (dest / f"{X}.toml").write_text(render_host_toml(x))
    (dest / f"{Y}.toml").write_text(render_host_toml(inv[Y]))
    return dest, calls
def running_on(lab, db: str, cid: str, host: str, phase_ok) -> str | None:
    """A run of `host` stored running whose runner's status phase satisfies phase_ok, or
    None."""
    try:
        store = open_store(db)
    except Exception:  # noqa: BLE001 - the database is not created yet
        return None
    try:
        for r in run_rows(store, cid):
            if r.host == host and r.state == "running":
                st = host_status(lab, host, r.run_id)
                if st and phase_ok(st.get("phase")):
                    return r.run_id
    finally:
        store.close()
    return None


def executing_on_x(lab, db: str, cid: str):
    """A run of X that its runner is executing (past accepted, not ended), or None."""
    return running_on(lab, db, cid, X, lambda ph: ph not in ("accepted", "done", "failed"))


def measuring_on_y(lab, db: str, cid: str):
    """A run of Y inside its kernel-log window (opened at `pre`, read at `post`: warm-up and
    measurement both lie inside it), or None."""
    return running_on(lab, db, cid, Y, lambda ph: ph in ("warmup", "measuring"))


def inject_io_error_during_a_run_of_y(lab, db: str, cid: str, done: threading.Event,
                                      out: dict) -> None:
    """Write one I/O-error line to the kernel log while a run of Y measures: the netns hosts
    share this machine's kernel, so each run whose window holds the line (Y's, perhaps X's)
    is rejected by kernel_log_clean. The line names itself as the test's."""
    while not done.is_set():
        rid = measuring_on_y(lab, db, cid)
        if rid:
            with open("/dev/kmsg", "w") as k:
                k.write(f"<3>bench tests: {KMSG_LINE} (during {rid})\n")
            out["during"] = rid
            return
        time.sleep(0.1)


def settings(tmp_path: Path, db: str, hosts_dir: Path) -> Settings:
    return Settings(threads=1, passes=24, data_dir=tmp_path / "data", db_url=db,
                    hosts_dir=hosts_dir, reconnect_timeout_s=RECONNECT_S, chunk_s=5.0,
                    retry_pause_s=0.5)


def interrupted_reason(js, ref: int) -> str:
    fails = [j for j in js if j.kind == "state" and j.run_ref == ref
             and (j.data or {}).get("to") == "failed"]
    assert len(fails) == 1, [j.message for j in js if j.run_ref == ref]
    assert (fails[0].data or {}).get("interrupted") is True, fails[0].data
    return fails[0].message


def test_a_failing_bmc_command_that_cycled_the_host_recovers_it_mid_wait(
        clean_pools, lab_host_up, lab, tmp_path):
    lab = lab_host_up
    hosts_dir, calls = ladder_inventory(lab, tmp_path / "hosts", "cycle")
    cid = "labladder-wait"
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    plan, exp, m = build_plan(str(MATRIX), NAMES, hosts_dir, 7, cid)
    s = settings(tmp_path, db, hosts_dir)
    store = open_store(db)
    create(store, plan, exp, m, NAMES, s, str(MATRIX))
    boot0 = lab.host(X).boot_id
    lines: list[str] = []
    out: dict = {}
    ex = Executor(store, cid, s, on_event=lambda e: lines.append(e.line()))
    th = threading.Thread(target=lambda: out.update(res=ex.run()), daemon=True)
    done, injected = threading.Event(), {}
    inject = threading.Thread(target=inject_io_error_during_a_run_of_y,
                              args=(lab, db, cid, done, injected), daemon=True)
    t0 = time.monotonic()
    th.start()
    inject.start()
    try:
        flying = wait_for(lambda: executing_on_x(lab, db, cid), 120, "a run executing on X",
                          interval=0.2)
        lab.kill_sshd(X)                  # a crash: sshd, sessions, the runner
        t_kill = time.monotonic()
    finally:
        th.join(240)
        done.set()
        inject.join(5)
        lab.reload()                      # the BMC stand-in rebooted X from its own process
    assert not th.is_alive(), "\n".join(lines[-40:])
    res = out["res"]
    secs = time.monotonic() - t0
    rows = {r.run_id: r for r in run_rows(store, cid)}
    js = journal_rows(store, cid)
    log = "\n".join(lines[-40:])
    assert res.state == "done" and not res.quarantined, (res, log)
    assert calls.read_text() == "1", log            # failed, but cycled: never repeated
    assert lab.host(X).boot_id != boot0
    reason = interrupted_reason(js, rows[flying].ref)
    assert rows[flying].state == "failed", rows[flying]
    assert "interrupted by the recovery ladder" in reason and "look: unreachable" in reason
    assert "power-cycle: ok" in reason, reason
    assert f"exit 1, stderr: {IPMI_ERR}" in reason and "new boot_id after" in reason, reason
    assert "ok boot_id changed" in reason and "quarantine" not in reason, reason
    steps = [j.data["ladder"] for j in js if isinstance((j.data or {}).get("ladder"), dict)]
    assert [st["rung"] for st in steps] == ["look", "power-cycle"], steps
    assert steps[1]["outcome"] == "ok" and "exit 1" in steps[1]["detail"]
    # the campaign went on with X (after the power cycle) and with Y
    assert all(r.state in TERMINAL for rid, r in rows.items() if rid != flying), rows
    print(f"\nladder in the wait: killed X {t_kill - t0:.1f}s in, power-cycle step "
          f"{steps[1]['seconds']}s, campaign {secs:.1f}s\n  reason: {reason}")
    verdicts = queries.verdicts(store, list(rows))
    store.close()
    # the run of Y that measured through the injected line is rejected for it, and only for it
    during = injected.get("during")
    assert during and rows[during].state == "rejected", (injected, rows.get(during))
    bad = [v for v in verdicts[during] if not v["passed"]]
    assert [v["rule"] for v in bad] == ["kernel_log_clean"], bad
    assert re.search(r"kernel log: \[\d+\.\d{6}\] bench tests: " + re.escape(KMSG_LINE),
                     bad[0]["reason"]), bad
    _report_shows_failed_and_rejected(tmp_path, db, cid, rows, verdicts, flying)


def _report_shows_failed_and_rejected(tmp_path, db, cid, rows, verdicts, flying) -> None:
    """`bench report` of this campaign (the CLI, in Markdown and HTML): the failed run with the
    ladder's steps, each rejected run with its failed rules, each run in its own section."""
    from bench.cli import main
    for name in ("report.md", "report.html"):
        assert main(["report", cid, "--db", db, "-o", str(tmp_path / name)]) == 0
    md = (tmp_path / "report.md").read_text().replace("\\", "")
    page = (tmp_path / "report.html").read_text()
    failed = md[md.index("### Failed runs"):md.index("### Cells skipped")]
    line = next(x for x in failed.splitlines() if f"[{flying}](#run-{flying})" in x)
    assert "| failed |" in line and "look: unreachable" in line and "power-cycle: ok" in line
    why = line.split(" | ")[4]     # the ladder's steps stand in their own column, once
    assert why.startswith("running -&gt; failed:") and "interrupted by the recovery ladder" in why
    assert "power-cycle" not in why and line.count("power-cycle: ok") == 1, line
    rejected = md[md.index("### Rejected runs"):md.index("### Failed runs")]
    for rid, r in rows.items():
        assert page.count(f'id="run-{rid}"') == 1 and md.count(f'<a id="run-{rid}">') == 1
        if r.state == "rejected":
            bad = [v["rule"] for v in verdicts[rid] if not v["passed"]]
            assert bad and all(f"| {rule} |" in rejected for rule in bad), (rid, rejected)
    n_rej = sum(r.state == "rejected" for r in rows.values())
    assert n_rej and f"{n_rej} rejected, 1 failed" in md, md[:2000]
    print(md[md.index("## Summary"):md.index("## Results per figure")] + rejected + failed)


def test_reattaching_climbs_the_ladder_and_retries_a_failed_bmc_command_once(
        clean_pools, lab_host_up, lab, tmp_path):
    lab = lab_host_up
    hosts_dir, calls = ladder_inventory(lab, tmp_path / "hosts", "second")
    cid = "labladder-reattach"
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    env = dict(os.environ, BENCH_DATA_DIR=str(tmp_path / "data"), BENCH_DB=db,
               PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "bench", "schedule", "--matrix", str(MATRIX),
                          "--hosts", ",".join(NAMES), "--hosts-dir", str(hosts_dir),
                          "--seed", "13", "--campaign", cid, "--threads", "1",
                          "--reconnect-timeout", str(RECONNECT_S)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                         cwd=tmp_path)
    try:
        flying = wait_for(lambda: executing_on_x(lab, db, cid), 120, "a run executing on X",
                          interval=0.2)
    finally:
        p.send_signal(signal.SIGKILL)     # the controller dies ...
        p.wait()
    lab.kill_sshd(X)                      # ... and X crashes with the run
    assert (host_status(lab, X, flying) or {}).get("phase") != "done"
    lab.start_sshd(X)                     # X answers the resumed worker's first look
    boot0 = lab.host(X).boot_id

    from bench.hosts.ssh import transport_for as real
    gone = {X: False}

    class LosesXAtReattach:
        """X's transport: at the first `runner.py status` (the re-attachment) every process
        of X's netns is killed before the command is sent."""

        def __init__(self, t):
            self.t = t

        def run(self, argv, **kw):
            if "status" in argv and not gone[X]:
                gone[X] = True
                lab.kill_sshd(X)
            return self.t.run(argv, **kw)

        def __getattr__(self, name):
            return getattr(self.t, name)

    def flaky(h):
        t = real(h)
        return LosesXAtReattach(t) if h.name == X else t

    store = open_store(db)
    lines: list[str] = []
    try:
        t0 = time.monotonic()
        res = Executor(store, cid, settings(tmp_path, db, hosts_dir), transport_for=flaky,
                       on_event=lambda e: lines.append(e.line())).run()
        secs = time.monotonic() - t0
        rows = {r.run_id: r for r in run_rows(store, cid)}
        js = journal_rows(store, cid)
        state = campaign_row(store, cid).state
    finally:
        store.close()
        lab.reload()                      # the BMC stand-in rebooted X from its own process
    log = "\n".join(lines[-40:])
    assert gone[X] and res.state == "done" and not res.quarantined, (res, log)
    assert state == "done"
    assert calls.read_text() == "2", log          # the first did nothing: retried once
    assert lab.host(X).boot_id != boot0
    fr = rows[flying]
    assert fr.state == "failed", fr
    reason = interrupted_reason(js, fr.ref)
    assert f"while re-attaching to {flying}" in reason, reason
    assert "look: unreachable" in reason and "power-cycle: ok" in reason, reason
    assert reason.count(f"exit 1, stderr: {IPMI_ERR}") == 2, reason
    assert "no new boot_id after" in reason and " again: exit 1" in reason, reason
    # the wait after the first command lasted the up_timeout before the retry
    pc = [j.data["ladder"] for j in js if isinstance((j.data or {}).get("ladder"), dict)
          and j.data["ladder"]["rung"] == "power-cycle"]
    assert len(pc) == 1 and pc[0]["seconds"] >= UP_S, pc
    assert secs >= RECONNECT_S + UP_S
    assert all(r.state in TERMINAL for rid, r in rows.items() if rid != flying), rows
    print(f"\nladder at re-attach: power-cycle step {pc[0]['seconds']}s (two commands), "
          f"resume {secs:.1f}s\n  reason: {reason}")


@pytest.mark.parametrize("mode", ["cycle", "nothing"])
def test_a_host_down_at_its_workers_start_climbs_the_ladder(clean_pools, lab_host_up, lab,
                                                             tmp_path, mode):
    """X is down (every process of its netns killed) when the campaign starts. Its worker's
    patience runs out, the ladder looks (SSH only: no run to judge) and power-cycles. `cycle`:
    the command fails but X comes back with a new boot, proven; X runs all its runs. `nothing`:
    the command fails, nothing comes back within the up_timeout, the command is run once more,
    nothing again: X is quarantined with every step (both exit statuses and stderrs) in its
    reason, and in the reason of each of its runs left pending; Y finishes its own."""
    lab = lab_host_up
    hosts_dir, calls = ladder_inventory(lab, tmp_path / "hosts", mode)
    cid = f"labladder-start-{mode}"
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    plan, exp, m = build_plan(str(MATRIX), NAMES, hosts_dir, 5, cid)
    s = settings(tmp_path, db, hosts_dir)
    store = open_store(db)
    create(store, plan, exp, m, NAMES, s, str(MATRIX))
    boot0 = lab.host(X).boot_id
    lab.kill_sshd(X)
    lines: list[str] = []
    try:
        t0 = time.monotonic()
        res = Executor(store, cid, s, on_event=lambda e: lines.append(e.line())).run()
        secs = time.monotonic() - t0
        rows = {r.run_id: r for r in run_rows(store, cid)}
        js = journal_rows(store, cid)
    finally:
        store.close()
        lab.reload()
    log = "\n".join(lines[-40:])
    steps = [j.data["ladder"] for j in js if isinstance((j.data or {}).get("ladder"), dict)]
    assert [st["rung"] for st in steps][:2] == ["look", "power-cycle"], steps
    assert steps[0]["outcome"] == "unreachable" and steps[0]["detail"].startswith("SSH: ")
    assert not any(entered for entered in (j for j in js if j.kind == "state" and
                                           (j.data or {}).get("to") == "failed")), log
    assert all(r.state in TERMINAL for r in rows.values() if r.host == Y), rows
    warnings = "\n".join(j.message for j in js if j.kind in ("warning", "quarantine"))
    if mode == "cycle":
        assert res.state == "done" and not res.quarantined, (res.quarantined, res.summary,
                                                             warnings)
        assert calls.read_text() == "1" and lab.host(X).boot_id != boot0
        assert steps[1]["outcome"] == "ok" and f"exit 1, stderr: {IPMI_ERR}" in \
            steps[1]["detail"], steps
        assert all(r.state in TERMINAL for r in rows.values()), rows
    else:
        assert res.state == "incomplete" and list(res.quarantined) == [X], (res, log)
        assert calls.read_text() == "2" and lab.host(X).boot_id == boot0
        reason = res.quarantined[X]
        assert "at the start of its worker" in reason and "recovery ladder: " in reason
        assert "look: unreachable" in reason and "power-cycle: failed" in reason, reason
        assert reason.count(f"exit 1, stderr: {IPMI_ERR}") == 2, reason
        assert f"(up_timeout {UP_S:.0f}s)" in reason and "quarantine: failed" in reason, reason
        assert [st["rung"] for st in steps] == ["look", "power-cycle", "quarantine"], steps
        assert steps[1]["seconds"] >= 2 * UP_S, steps
        left = [r for r in rows.values() if r.host == X]
        assert left and all(r.state == "pending" for r in left), left
        for r in left:
            msg = [j.message for j in js if j.kind == "state" and j.run_ref == r.ref][-1]
            assert "power-cycle: failed" in msg and "no other eligible host" in msg, msg
    print(f"\nladder at a worker's start ({mode}): power-cycle step {steps[1]['seconds']}s, "
          f"campaign {secs:.1f}s")
