"""The twin lab fixture: the two aarch64 GH200 twins, twin-a and twin-b, for the whole session.

Skips, naming the missing capability, when: not root, no qemu-system-aarch64 / AAVMF firmware /
ipmi_sim / ipmitool / qemu-img / ssh (and, without a cached image, no mmdebstrap,
qemu-user-static with binfmt_misc, dosfstools, mtools, fdisk or Debian mirror), or
BENCH_SKIP_TWIN=1. Runtime state goes to a fresh temporary BENCH_TWIN_DIR; the image cache is
BENCH_LAB_CACHE (default /var/cache/bench-lab), kept between runs. The finalizer stops exactly
the qemu and ipmi_sim processes the fixture started (PIDs from the lab state)."""

import os
import time

import pytest


@pytest.fixture(scope="session")
def twin(tmp_path_factory):
    if os.environ.get("BENCH_SKIP_TWIN") == "1":
        pytest.skip("BENCH_SKIP_TWIN=1")
    from bench.lab import twin as lab_twin
    from bench.lab import twin_image
    why = twin_image.missing_capabilities(build=True)
    if why:
        pytest.skip("twin lab unavailable: " + "; ".join(why))
    old = os.environ.get("BENCH_TWIN_DIR")
    os.environ["BENCH_TWIN_DIR"] = str(tmp_path_factory.mktemp("lab-twin"))
    timings = {}
    try:
        t0 = time.monotonic()
        image = twin_image.build_image(log=print)
        timings["image_seconds"] = round(time.monotonic() - t0, 1)
        timings["image_cached"] = image["cached"]
        st = lab_twin.lab_up(log=print)
        timings["boot_seconds"] = {n: g["boot_seconds"] for n, g in st["guests"].items()}
        print(f"twin timings: {timings}")
        yield {"state": st, "timings": timings, "hosts_dir": st["hosts_dir"], "image": image}
    finally:
        lab_twin.lab_down(log=print)
        if old is None:
            os.environ.pop("BENCH_TWIN_DIR", None)
        else:
            os.environ["BENCH_TWIN_DIR"] = old


@pytest.fixture(scope="session")
def twin_hosts(twin):
    from bench.hosts.inventory import load_inventory
    return load_inventory(twin["hosts_dir"])


@pytest.fixture(scope="session")
def connect():
    """Host -> Transport: the controller's own SSH transport, host keys verified."""
    from bench.hosts.ssh import transport_for
    return transport_for
