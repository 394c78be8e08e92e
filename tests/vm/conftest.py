"""The VM lab fixture: two qemu (TCG) guests, lab-a and lab-b, for the whole session.

Skips, naming the missing capability, when: not root, no qemu-system-x86_64 / qemu-img /
ssh (and, without a cached image, no debootstrap or no Debian mirror), or BENCH_SKIP_VM=1.
Runtime state goes to a fresh temporary BENCH_LAB_DIR; the image cache is BENCH_LAB_CACHE
(default /var/cache/bench-lab), kept between runs. The finalizer stops exactly the qemu
processes the fixture started (PIDs from the lab state)."""

import os
import time

import pytest


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    if os.environ.get("BENCH_SKIP_VM") == "1":
        pytest.skip("BENCH_SKIP_VM=1")
    from bench.lab import vm as lab_vm
    from bench.lab import vm_image
    why = vm_image.missing_capabilities(build=True)
    if why:
        pytest.skip("VM lab unavailable: " + "; ".join(why))
    old = os.environ.get("BENCH_LAB_DIR")
    os.environ["BENCH_LAB_DIR"] = str(tmp_path_factory.mktemp("lab-vm"))
    timings = {}
    try:
        t0 = time.monotonic()
        image = vm_image.build_image(log=print)
        timings["image_seconds"] = round(time.monotonic() - t0, 1)
        timings["image_cached"] = image["cached"]
        st = lab_vm.lab_up(2, boot_timeout=300, log=print)
        timings["boot_seconds"] = {n: g["boot_seconds"] for n, g in st["guests"].items()}
        print(f"lab timings: {timings}")
        yield {"state": st, "timings": timings, "hosts_dir": st["hosts_dir"]}
    finally:
        lab_vm.lab_down(log=print)
        if old is None:
            os.environ.pop("BENCH_LAB_DIR", None)
        else:
            os.environ["BENCH_LAB_DIR"] = old


@pytest.fixture(scope="session")
def lab_hosts(lab):
    from bench.hosts.inventory import load_inventory
    return load_inventory(lab["hosts_dir"])


@pytest.fixture(scope="session")
def connect():
    """Host -> Transport: the controller's own SSH transport, host keys verified."""
    from bench.hosts.ssh import transport_for
    return transport_for
