"""The build: flags, the version line and the documented source hash."""

import json
import subprocess

import pytest

from tests.support import nativelib as nl

pytestmark = pytest.mark.native


def test_version_reports_the_documented_source_hash(agent):
    out = subprocess.run([agent, "version"], capture_output=True, text=True, check=True).stdout
    v = json.loads(out)
    assert v["version"]
    # the controller recomputes this to know a host runs the right build
    assert v["source_sha256"] == nl.source_hash()


def test_make_uses_strict_warnings_and_only_libc_pthreads(agent):
    dry = subprocess.run(["make", "-C", str(nl.NATIVE), "-B", "-n"], capture_output=True,
                         text=True, check=True).stdout
    for flag in ("-O2", "-Wall", "-Wextra", "-Werror"):
        assert flag in dry
    libs = subprocess.run(["ldd", str(agent)], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in libs.splitlines() if line.strip()}
    extra = {n for n in names if not n.startswith(("linux-vdso", "/lib64/ld-linux", "ld-linux",
                                                     "libc.so", "libpthread.so"))}
    assert not extra, f"unexpected libraries: {extra}"


def test_usage_errors_exit_2_with_a_reason(agent):
    r = nl.run_agent(["replay", "--pool", "/nonexistent"])
    assert r.rc == nl.EXIT_USAGE
    assert r.summary["ok"] is False and "--plan" in r.summary["reason"]
    r = nl.run_agent(["replay", "--pool", "x", "--plan", "y", "--mode", "bogus"])
    assert r.rc == nl.EXIT_USAGE and "bogus" in r.summary["reason"]
    r = nl.run_agent(["replay", "--pool", "x", "--plan", "y", "--mode", "pinned"])
    assert r.rc == nl.EXIT_USAGE and "--arena-bytes" in r.summary["reason"]
    r = nl.run_agent(["replay", "--pool", "x", "--plan", "y", "--prefetch", "advice"])
    assert r.rc == nl.EXIT_USAGE and "--hints" in r.summary["reason"]
