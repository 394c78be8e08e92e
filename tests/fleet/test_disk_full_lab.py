"""A lab host whose disk is full when a run starts (netns lab, real sshd, the real runner): the
host's work dir is a real 64 MiB tmpfs mounted inside the host's own mount namespace (over SSH),
deployed to, then filled to the last byte after the spec is uploaded. `runner.py start` says the
disk is full with the path and leaves nothing behind; after space is freed the same run id
starts and completes through the controller's start_run. Needs root."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bench.errors import HostError, Unreachable
from bench.execute.campaign.preflight import run_spec
from bench.execute.hostrun import last_json, runner_argv, start_run
from bench.execute.staging import ensure_file, ensure_pool
from bench.hosts.deploy import deploy
from bench.hosts.ssh import transport_for
from bench.matrix.cells import parse_cell
from bench.matrix.runspec import RunOptions
from bench.plan.prepared import plan_from_trace_file
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_pools")]
X = "lab-netns-2"
FILL = ('dd if=/dev/zero of="$1/filler" bs=65536 2>/dev/null; '
        'dd if=/dev/zero of="$1/filler2" bs=1 2>/dev/null; true')


def test_a_full_host_disk_at_start_leaves_nothing_and_the_run_starts_later(
        lab_host_up, lab_inventory, tmp_path):
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=100, expert_bytes=1 << 20,
                                                spec_accept=0.0, fallback=0.0))) + "\n")
    plan, plan_path = plan_from_trace_file(trace, data_dir=tmp_path / "data")
    host = dataclasses.replace(lab_inventory[X], work_dir=lab_inventory[X].work_dir + "-small")
    wd = host.work_dir
    t = transport_for(host)
    t.run(["mkdir", "-p", wd], timeout=30)
    t.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", wd], timeout=30)
    try:
        deploy(t, host)
        ensure_file(t, plan_path, f"{wd}/{plan.remote_path}", plan.sha256)
        ensure_pool(t, host, plan.geometry)
        spec = run_spec(host, parse_cell("1g-none-classic"), plan, "full-1",
                        RunOptions(threads=1, passes=2), t).spec
        remote = f"{wd}/specs/full-1.json"
        t.run(["mkdir", "-p", f"{wd}/specs"], timeout=30)
        t.run(["tee", remote], stdin=json.dumps(spec), timeout=30)
        t.run(["sh", "-c", FILL, "fill", wd], timeout=300)
        r = t.run(runner_argv(host, "start", "--spec", remote), timeout=120, check=False)
        res = last_json(r.stdout)
        assert r.rc == 1 and res and res["ok"] is False and res["disk_full"], (r.stdout, r.stderr)
        assert "No space left on device" in res["reason"] and wd in res["reason"], res
        assert t.run(["test", "-e", f"{wd}/runs/full-1"], check=False).rc == 1
        assert t.run(["test", "-e", f"{wd}/locks/full-1.lock"], check=False).rc == 1
        st = last_json(t.run(runner_argv(host, "status", "full-1"), check=False).stdout)
        assert st == {"ok": False, "run_id": "full-1", "reason": "no such run"}
        # through the controller: the host's answer, with its hint, never "unreachable"
        with pytest.raises(HostError) as exc:
            start_run(t, host, spec)
        assert not isinstance(exc.value, Unreachable), exc.value
        assert "No space left on device" in exc.value.message and "df -h" in exc.value.hint
        # a spec that no longer fits on the host: its upload is refused, the host answered
        with pytest.raises(HostError) as exc:
            start_run(t, host, dict(spec, run_id="full-2"))
        assert not isinstance(exc.value, Unreachable), exc.value
        assert "is its disk full?" in exc.value.message and "df -h" in exc.value.hint, exc.value
        # room again: the same run id starts and completes
        t.run(["rm", "-f", f"{wd}/filler", f"{wd}/filler2"], timeout=30)
        started = start_run(t, host, spec)
        assert started["ok"] and started["state"] == "started", started
        r = t.run(runner_argv(host, "wait", "full-1", "--timeout", "120"), timeout=180,
                  check=False)
        st = last_json(r.stdout)
        assert st and st["phase"] == "done" and st["ok"], (r.stdout, r.stderr)
    finally:
        t.run(["umount", wd], timeout=60, check=False)
        t.run(["rmdir", wd], timeout=30, check=False)
        t.close()
