"""Fixtures every tier shares. A test marked `root` is skipped, not failed, where the machine
does not give it root (the skip says so); each tier's own fixtures skip naming any other
missing capability."""

import os

import pytest


@pytest.fixture(autouse=True)
def _no_user_ssh_config(monkeypatch):
    """No test reads the real ~/.ssh/config or /etc/ssh/ssh_config: bench reads the file
    $BENCH_SSH_CONFIG names, here none (a test that wants one sets its own)."""
    monkeypatch.setenv("BENCH_SSH_CONFIG", "none")


@pytest.fixture(autouse=True)
def _root_marker(request):
    if request.node.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip("needs root (loop devices, drop_caches, mlock beyond RLIMIT_MEMLOCK, cgroups)")


@pytest.fixture
def write_trace(tmp_path):
    """Write lines to a trace file and return its path."""
    counter = iter(range(10_000))

    def _write(lines, name=None):
        p = tmp_path / (name or f"trace{next(counter)}.jsonl")
        p.write_text("\n".join(lines) + "\n")
        return p
    return _write


@pytest.fixture(scope="session")
def tiny_traces(tmp_path_factory):
    """Four domains of the tiny preset, written by the real generator."""
    from bench.trace.synth import generate, preset
    d = tmp_path_factory.mktemp("tiny")
    paths = []
    for dom in range(4):
        p = d / f"tiny-{dom}.jsonl"
        p.write_text("\n".join(generate(preset("tiny", domain=dom, tokens=120))) + "\n")
        paths.append(p)
    return paths
