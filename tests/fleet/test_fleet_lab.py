"""The SSH fleet on the netns lab: real sshd, real SSHTransport, real faults. Needs root."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import AuthError, CommandFailed, CommandTimeout, HostKeyError, Unreachable
from bench.hosts.deploy import deploy, deploy_hosts, source_hash
from bench.hosts.facts import probe_hosts
from bench.hosts.inventory import load_inventory, render_host_toml
from bench.hosts.lock import HostLock, HostLocked, wait_released
from bench.hosts.ssh import SSHTransport, transport_for
from bench.hosts.transport import LocalTransport

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
NASTY = ["; rm -rf /tmp/x", "$(touch /tmp/bench-pwned)", "`id`", "'single' \"double\"",
         "line1\nline2\n", "  spaces  ", "*", "back\\slash", "tab\there", "$HOME", "", "-n",
         "ünï©ode", "a|b&c>d<e"]


def hosts(inv):
    return [inv["lab-netns-1"], inv["lab-netns-2"]]


def test_probe_two_lab_hosts_and_local_in_parallel(lab, lab_inventory):
    local = load_inventory(REPO / "hosts")["local"]
    results = probe_hosts(hosts(lab_inventory) + [local])
    by = {r.host: r for r in results}
    for r in results:
        assert r.ok, (r.host, r.error, r.fact_errors)
    status = {h["name"]: h for h in lab.status()["hosts"]}
    for name in ("lab-netns-1", "lab-netns-2"):
        f = by[name].facts
        assert f["hostname"] == name  # its own UTS namespace
        assert f["boot_id"] == status[name]["boot_id"]  # bind-mounted over /proc
        assert f["cmdline"] == status[name]["cmdline"]
        assert f["mem_total_bytes"] > 0 and f["page_size"] > 0 and f["kernel"]
        assert f["cgroup"]["backend"] in ("v1", "v2", "none")
        assert f["pool_device"] is None or f["pool_device"]["leaves"]
    assert by["local"].facts["boot_id"] != by["lab-netns-1"].facts["boot_id"]
    assert by["local"].facts["cgroup"]["backend"] in ("v1", "v2", "none")


def test_quoting_arrives_byte_identical(lab_inventory, tmp_path):
    t = SSHTransport(lab_inventory["lab-netns-1"])
    try:
        for arg in NASTY:
            r = t.run(["printf", "%s", arg])
            assert r.stdout == arg, arg
        r = t.run(["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *NASTY])
        assert json.loads(r.stdout) == NASTY
        r = t.run(["sh", "-c", 'printf "%s" "$X"'], env={"X": NASTY[1] + NASTY[4]})
        assert r.stdout == NASTY[1] + NASTY[4]
        r = t.run(["cat"], stdin="through\nstdin $(x)\n")
        assert r.stdout == "through\nstdin $(x)\n"
        assert not Path("/tmp/bench-pwned").exists()
        with pytest.raises(CommandFailed) as e:
            t.run(["sh", "-c", "echo oops >&2; exit 3"])
        assert e.value.rc == 3 and "oops" in e.value.stderr
        with pytest.raises(CommandTimeout):
            t.run(["sleep", "10"], timeout=1)
        # put/get round trip (sftp)
        src = tmp_path / "blob"
        src.write_bytes(bytes(range(256)) * 100)
        remote = f"{lab_inventory['lab-netns-1'].work_dir}/blob"
        t.put(src, remote)
        t.get(remote, tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == src.read_bytes()
    finally:
        t.close()


THP_DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")


@pytest.mark.skipif(not THP_DEFRAG.exists(), reason="kernel without transparent hugepages")
def test_a_sysfs_value_arrives_in_one_write(lab_inventory):
    """invoke feeds stdin to the channel a byte at a time, so `tee` into sysfs hands the kernel
    pieces it refuses (the twin's THP repair failed that way). write_sysfs must land the whole
    value in one write. The lab hosts share this kernel: the test writes back the mode it reads."""
    from bench.hosts.bootplan import parse_thp_mode
    from bench.hosts.reboot import write_sysfs
    t = SSHTransport(lab_inventory["lab-netns-1"])
    try:
        mode = parse_thp_mode(t.run(["cat", str(THP_DEFRAG)]).stdout)
        assert mode
        for _ in range(10):
            assert write_sysfs(t, str(THP_DEFRAG), mode, check=False).rc == 0
        assert parse_thp_mode(THP_DEFRAG.read_text()) == mode
        r = write_sysfs(t, str(THP_DEFRAG), "not-a-mode", check=False)
        assert r.rc != 0                                    # the kernel's refusal reaches us
        assert parse_thp_mode(THP_DEFRAG.read_text()) == mode
    finally:
        t.close()


def _with_known_hosts(host, path: Path):
    return dataclasses.replace(host, ssh=dataclasses.replace(host.ssh, known_hosts=str(path)))


def test_unknown_host_key_refused_then_trust_yes(lab_inventory, tmp_path, capsys):
    h = _with_known_hosts(lab_inventory["lab-netns-2"], tmp_path / "known_hosts")
    with pytest.raises(HostKeyError) as e:
        SSHTransport(h).run(["true"])
    assert "not in" in e.value.message and "SHA256:" in e.value.message
    assert f"bench hosts trust {h.name}" in e.value.hint
    assert not (tmp_path / "known_hosts").exists()  # nothing was added silently
    d = tmp_path / "hosts"
    d.mkdir()
    (d / f"{h.name}.toml").write_text(render_host_toml(h))
    assert main(["hosts", "trust", h.name, "--hosts-dir", str(d), "--yes", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["added"] and info["fingerprint"].startswith("SHA256:")
    keygen = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "known_hosts")],
                            capture_output=True, text=True, check=True).stdout
    assert info["fingerprint"] in keygen  # same fingerprint as OpenSSH computes
    t = SSHTransport(h)
    assert t.run(["uname", "-n"]).stdout.strip() == h.name
    t.close()
    assert main(["hosts", "trust", h.name, "--hosts-dir", str(d), "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] is False
    # a different key under the same name is a mismatch, never replaced
    other = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(tmp_path / "k")], check=True)
    assert other.returncode == 0
    pub = (tmp_path / "k.pub").read_text().split()
    (tmp_path / "known_hosts").write_text(f"{h.address} {pub[0]} {pub[1]}\n")
    with pytest.raises(HostKeyError, match="does NOT match"):
        SSHTransport(h).run(["true"])


def test_wrong_key_is_auth_error(lab_inventory, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id")],
                   check=True)
    h = lab_inventory["lab-netns-1"]
    h = dataclasses.replace(h, ssh=dataclasses.replace(h.ssh, identity_file=str(tmp_path / "id")))
    with pytest.raises(AuthError):
        SSHTransport(h).run(["true"])


def test_dead_host_is_unreachable_while_the_other_probes(lab_host_up, lab_inventory):
    lab = lab_host_up
    lab.kill_sshd("lab-netns-2")
    results = {r.host: r for r in probe_hosts(hosts(lab_inventory))}
    assert results["lab-netns-1"].ok
    assert results["lab-netns-2"].error["type"] == "Unreachable"
    assert isinstance(results["lab-netns-2"].exception, Unreachable)
    lab.start_sshd("lab-netns-2")
    assert all(r.ok for r in probe_hosts(hosts(lab_inventory)))


def test_reboot_changes_boot_id_and_cmdline(lab_host_up, lab_inventory):
    lab = lab_host_up
    h = lab_inventory["lab-netns-1"]
    t = SSHTransport(h)
    old = t.run(["cat", "/proc/sys/kernel/random/boot_id"]).stdout.strip()
    new = lab.reboot("lab-netns-1", "BOOT_IMAGE=/boot/vmlinuz-lab ro mem=2G")
    # the old connection died with the "reboot"; the transport reconnects on its next call
    r = t.run(["sh", "-c", "cat /proc/sys/kernel/random/boot_id /proc/cmdline"]).stdout.split("\n")
    t.close()
    assert new != old and r[0] == new and "mem=2G" in r[1]


def test_host_lock_refuses_a_second_holder(lab_inventory):
    h = lab_inventory["lab-netns-1"]
    t1, t2 = SSHTransport(h), SSHTransport(h)
    try:
        with HostLock(t1, h, "test") as lock:
            with pytest.raises(HostLocked) as e:
                HostLock(t2, h).acquire()
            assert "test" in e.value.message and "pid" in e.value.message
            # a local controller on the same files is refused too (one lock, any transport)
            with pytest.raises(HostLocked):
                HostLock(LocalTransport(h.name), h).acquire()
        assert wait_released(lock)
        lock2 = HostLock(t2, h)
        lock2.acquire()
        t2.close()  # the controller's connection drops: the lock goes with it
        assert wait_released(HostLock(t1, h), timeout=5)
    finally:
        t1.close()
        t2.close()


def test_a_host_lock_holder_too_slow_to_answer_is_unreachable_not_a_crash(lab_inventory,
                                                                           monkeypatch):
    """A host too loaded to say LOCKED in time (64 lab hosts on 2 cores): acquire raises
    Unreachable (a worker quarantines or retries it) instead of the bare TimeoutError the
    channel read raised, which killed a campaign's worker; the late holder lets go."""
    import bench.hosts.lock as lock_mod
    h = lab_inventory["lab-netns-1"]
    monkeypatch.setattr(lock_mod, "ANSWER_S", 0.5)
    monkeypatch.setattr(lock_mod, "HOLDER", "sleep 3; " + lock_mod.HOLDER)    # a slow host
    t = SSHTransport(h)
    try:
        with pytest.raises(Unreachable) as e:
            HostLock(t, h, "slow").acquire()
        assert "did not answer" in e.value.message
        monkeypatch.undo()
        assert wait_released(HostLock(t, h), timeout=15)    # the late holder let go
    finally:
        t.close()


def test_a_spawned_command_that_prints_nothing_is_read_bounded(lab_inventory):
    """read_rest of a command that neither prints nor ends returns within its timeout."""
    import time
    t = SSHTransport(lab_inventory["lab-netns-1"])
    try:
        p = t.spawn(["sleep", "30"])
        assert p.readline(timeout=0.5) == "" and p.exit_status(0.5) is None
        t0 = time.monotonic()
        assert p.read_rest(timeout=1.0) == ""
        assert time.monotonic() - t0 < 5
        p.close()
        p = t.spawn(["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"])
        assert len(p.read_rest(timeout=10.0)) == 64 << 10     # bounded: REST_MAX
        p.close()
    finally:
        t.close()


@pytest.fixture(scope="module")
def native_builds(tmp_path_factory):
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("deploy test needs make and a C compiler on the lab hosts (this machine)")
    d = tmp_path_factory.mktemp("native-build")
    for p in (REPO / "native").iterdir():
        if p.name == "Makefile" or p.suffix in (".c", ".h"):
            shutil.copy(p, d)
    r = subprocess.run(["make", "-C", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("native/ does not build yet (make failed): " + r.stderr.strip()[-300:])
    return source_hash(REPO / "native")


def test_deploy_builds_checks_hash_and_skips_when_current(lab_inventory, native_builds):
    hs = hosts(lab_inventory)
    first = deploy_hosts(hs, force=True)
    assert [r["status"] for r in first] == ["deployed", "deployed"], first
    for r in first:
        assert r["agent"]["source_sha256"] == native_builds
    again = deploy_hosts(hs)
    assert [r["status"] for r in again] == ["current", "current"]
    t = transport_for(hs[0])
    try:
        # the probe now sees the agent; the agents/ tree arrived too
        facts = {r.host: r for r in probe_hosts([hs[0]])}[hs[0].name].facts
        assert facts["agent"]["source_sha256"] == native_builds
        # a changed agents/ stamp on the host makes it redeploy the agents only: the built
        # agent (same sources) stays, not rebuilt
        wd = hs[0].work_dir
        t.run(["sh", "-c", 'echo stale > "$1"', "x", f"{wd}/agents/.bench-agents-sha256"])
        built = t.run(["stat", "-c", "%Y %i", f"{wd}/native/bench-agent"]).stdout
        r = deploy(t, hs[0])
        assert r["status"] == "deployed" and r["shipped"] == "agents", r
        assert t.run(["stat", "-c", "%Y %i", f"{wd}/native/bench-agent"]).stdout == built
        assert t.run(["test", "-f", f"{wd}/agents/runner.py"]).rc == 0
        assert deploy(t, hs[0])["status"] == "current"
    finally:
        t.close()


def test_deploy_shows_compiler_output(lab_inventory, native_builds, tmp_path):
    repo = tmp_path / "repo"
    (repo / "native").mkdir(parents=True)
    (repo / "native" / "Makefile").write_text("bench-agent: main.c\n\tcc -o $@ main.c\n")
    (repo / "native" / "main.c").write_text("int main(void) { return syntax error; }\n")
    h = dataclasses.replace(lab_inventory["lab-netns-2"],
                            work_dir=lab_inventory["lab-netns-2"].work_dir + "/broken")
    t = SSHTransport(h)
    try:
        with pytest.raises(CommandFailed) as e:
            deploy(t, h, repo=repo)
        assert "main.c" in e.value.stderr and "error" in e.value.stderr
    finally:
        t.close()


def test_lab_cli_status_and_probe_cli(lab, capsys):
    assert main(["lab", "status", "--state-dir", str(lab.state_dir), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["up"] and len(st["hosts"]) == 2
    assert main(["hosts", "probe", "--hosts-dir", str(lab.hosts_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["host"] for r in out] == ["lab-netns-1", "lab-netns-2"] and all(r["ok"] for r in out)


def test_parallel_transports_on_threads(lab_inventory):
    """Several threads share one SSHTransport (one connection, a channel per command)."""
    t = SSHTransport(lab_inventory["lab-netns-2"])
    out, errs = [], []

    def work(i):
        try:
            out.append(t.run(["echo", str(i)]).stdout.strip())
        except Exception as exc:  # noqa: BLE001
            errs.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t.close()
    assert not errs and sorted(out) == sorted(str(i) for i in range(8))
