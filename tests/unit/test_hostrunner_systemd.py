"""The runner's systemd path, the pure half: detection, the choice of the wall's path, the argv
of the transient units, and the parsers fed with `systemctl show` and /proc/PID/cgroup text as
systemd 252 (Debian 12) writes them. The real scope and unit run in tests/twin."""

from __future__ import annotations

import pytest

from bench.agents.hostrunner import systemd as sd

# `systemctl show --property=... bench-wall-r1.scope` of a live scope (systemd 252)
SHOW_ACTIVE = """Id=bench-wall-r1.scope
ActiveState=active
SubState=running
ControlGroup=/bench.slice/bench-wall-r1.scope
MemoryMax=6442450944
MemorySwapMax=0
Delegate=yes
Slice=bench.slice
MainPID=0
"""
# ... of a scope systemd does not know (yet): show still answers, rc 0
SHOW_UNKNOWN = """Id=bench-wall-r1.scope
ActiveState=inactive
SubState=dead
ControlGroup=
MemoryMax=infinity
MemorySwapMax=infinity
Delegate=no
Slice=
MainPID=0
"""


def test_detect_reads_both_signs(tmp_path):
    comm = tmp_path / "comm"
    comm.write_text("systemd\n")
    got = sd.detect(run_dir=str(tmp_path / "absent"), comm_path=str(comm))
    assert got == {"pid1_comm": "systemd", "run_systemd_system": False, "systemd": True}
    (tmp_path / "run").mkdir()
    comm.write_text("init\n")
    got = sd.detect(run_dir=str(tmp_path / "run"), comm_path=str(comm))
    assert got["systemd"] is True and got["run_systemd_system"] is True
    got = sd.detect(run_dir=str(tmp_path / "absent"), comm_path=str(comm))
    assert got["systemd"] is False and got["pid1_comm"] == "init"
    got = sd.detect(run_dir=str(tmp_path / "absent"), comm_path=str(tmp_path / "none"))
    assert got == {"pid1_comm": "", "run_systemd_system": False, "systemd": False}


@pytest.mark.parametrize("systemd,backend,path,word", [
    (True, "v2", sd.PATH_SCOPE, "transient scope"),
    (True, "v1", sd.PATH_CGROUPFS, "hybrid"),
    (True, "none", sd.PATH_CGROUPFS, "hybrid"),
    (False, "v2", sd.PATH_CGROUPFS, "not PID 1"),
    (False, "v1", sd.PATH_CGROUPFS, "not PID 1"),
])
def test_choose_wall(systemd, backend, path, word):
    got, why = sd.choose_wall(systemd, backend)
    assert got == path and word in why


def test_wall_argv_is_a_delegated_scope_with_exact_bytes():
    limit = 768_000_000 + 6 * (1 << 30)
    argv = sd.wall_argv("r1", limit)
    assert argv[:2] == ["systemd-run", "--scope"]
    assert "--unit=bench-wall-r1.scope" in argv and "--slice=bench.slice" in argv
    props = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    assert props == [f"MemoryMax={limit}", "MemorySwapMax=0", "Delegate=yes"]
    assert argv[argv.index("--") + 1:] == ["sleep", "infinity"]
    assert "--collect" in argv
    with pytest.raises(ValueError):
        sd.wall_argv("r1", 0)


@pytest.mark.parametrize("bad", ["", "-x", "a b", "a/b", "a;b", "x" * 129, "é"])
def test_unit_names_refuse_what_systemd_would_escape(bad):
    with pytest.raises(ValueError):
        sd.wall_unit(bad)
    with pytest.raises(ValueError):
        sd.runner_unit(bad)


def test_runner_argv_passes_only_bench_variables():
    env = {"BENCH_RUNNER_TEST_KERNEL_RELEASE": "9.9-test", "PATH": "/usr/bin",
           "BENCH_X": "a\nb", "bench_lower": "1", "SSH_AUTH_SOCK": "/tmp/s"}
    argv = sd.runner_argv("r-2.x", "/usr/bin/python3", "/var/lib/bench/agents/runner.py",
                          "/var/lib/bench", env)
    assert argv[0] == "systemd-run" and "--scope" not in argv
    assert "--unit=bench-run-r-2.x.service" in argv
    assert [a for a in argv if a.startswith("--setenv")] == [
        "--setenv=BENCH_RUNNER_TEST_KERNEL_RELEASE=9.9-test"]
    assert argv[argv.index("--") + 1:] == ["/usr/bin/python3", "/var/lib/bench/agents/runner.py",
                                           "daemon", "r-2.x", "--work-dir", "/var/lib/bench"]
    assert "Type=exec" in argv


def test_show_and_stop_argv():
    assert sd.show_argv("u.scope", ("Id", "MemoryMax")) == [
        "systemctl", "show", "--property=Id,MemoryMax", "--", "u.scope"]
    assert sd.stop_argv("u.scope") == ["systemctl", "stop", "--", "u.scope"]


def test_parse_show_of_a_live_scope():
    show = sd.parse_show(SHOW_ACTIVE)
    assert show["ActiveState"] == "active"
    assert sd.show_limit(show["MemoryMax"]) == 6442450944
    assert sd.show_limit(show["MemorySwapMax"]) == 0
    assert sd.scope_path(show, "/sys/fs/cgroup") == "/sys/fs/cgroup/bench.slice/bench-wall-r1.scope"


def test_parse_show_of_an_unknown_scope():
    show = sd.parse_show(SHOW_UNKNOWN)
    assert show["ActiveState"] == "inactive"
    assert sd.show_limit(show["MemoryMax"]) is None
    assert sd.scope_path(show, "/sys/fs/cgroup") is None


def test_parse_show_hostile_text():
    show = sd.parse_show("no equals\n=x\nA=1\nA=2\nB=a=b\n" + "C=" + "y" * 100_000)
    assert show == {"A": "1", "B": "a=b", "C": "y" * (64 * 1024 - len("no equals\n=x\nA=1\n"
                                                                    "A=2\nB=a=b\nC="))}
    for cg in ("/", "relative/x", "/a/../../etc", ""):
        assert sd.scope_path({"ControlGroup": cg}, "/sys/fs/cgroup") is None


def test_cgroup_line_in():
    v2 = ["0::/bench.slice/bench-wall-r1.scope"]
    assert sd.cgroup_line_in(v2, "/bench.slice/bench-wall-r1.scope")
    assert not sd.cgroup_line_in(v2, "/bench-wall-r1.scope")        # a suffix is not enough
    assert not sd.cgroup_line_in(["0::/system.slice/bench-run-r1.service"],
                                 "/bench.slice/bench-wall-r1.scope")
    v1 = ["12:pids:/bench-r1", "5:memory:/bench-r1", "1:name=systemd:/"]
    assert sd.cgroup_line_in(v1, "/bench-r1")
    assert not sd.cgroup_line_in(["12:pids:/bench-r1"], "/bench-r1")
    assert not sd.cgroup_line_in(["garbage", ""], "/bench-r1")
