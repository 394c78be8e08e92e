"""The twin lab's generated files without booting anything: the inventory has the shape of
hosts/gh200-a.toml and loads and checks with bench's own inventory code, and ipmi_sim's lan.conf
names the guest's port, user and chassis program. (Runs wherever bench is installed.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

from bench.hosts.inventory import check_inventory, load_host_file
from bench.lab import twin as lab_twin


def _guest(tmp_path, name="twin-a"):
    gd = tmp_path / name
    gd.mkdir()
    key, kh = tmp_path / "lab_ed25519", tmp_path / "known_hosts"
    key.write_text("not a key: the check only needs the file\n")
    kh.write_text("")
    return {"name": name, "dir": str(gd), "port": 40022, "bmc_port": 40623, "mem_mib": 1536,
            "identity_file": str(key), "known_hosts": str(kh), "bmc_password": "p4ss",
            "bmc_password_file": str(gd / "bmc.pass")}


def test_inventory_has_the_gh200_shape(tmp_path):
    g = _guest(tmp_path)
    p = lab_twin._write_inventory(g, tmp_path / "hosts")
    ref = tomllib.loads((Path(__file__).resolve().parents[2] / "hosts/gh200-a.toml")
                        .read_text())
    mine = tomllib.loads(p.read_text())
    assert set(ref) <= set(mine) | {"tags"}         # same tables and top-level keys
    assert set(ref["reboot"]) <= set(mine["reboot"])
    assert set(ref["expect"]) == set(mine["expect"])
    h = load_host_file(p)
    assert (h.name, h.port, h.address) == ("twin-a", 40022, "127.0.0.1")
    assert h.reboot.method == "grub-reboot" and h.reboot.grub_entry == "bench-memboot"
    assert h.reboot.power_cycle == ("ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1",
                                    "-p", "40623", "-U", "bench", "-f", g["bmc_password_file"],
                                    "chassis", "power", "cycle")
    assert h.expect == {"arch": "aarch64", "page_size": 16384, "kernel": "6.12"}
    assert h.mem_total == 1536 << 20 and h.pool_dir == "/srv/bench/pool"
    rows = check_inventory(tmp_path / "hosts")
    assert [r["ok"] for r in rows] == [True], rows


def test_lan_conf_serves_the_guest_port_with_its_chassis_program(tmp_path):
    g = _guest(tmp_path, "twin-b")
    conf = lab_twin._lan_conf(g)
    assert "    addr 127.0.0.1 40623\n" in conf
    assert f'-m bench.lab.twin_bmc {g["dir"]}"' in conf
    assert '  user 2 true "bench" "p4ss" admin' in conf
    assert conf.count("startlan") == 1 and "endlan" in conf
    argv = lab_twin.qemu_argv(dict(g, overlay="o.qcow2", vars="v.fd", pool_disk="p.img",
                                   console="c.log", qemu_log="q.log", pidfile="q.pid"))
    assert argv[0] == "qemu-system-aarch64" and "-daemonize" in argv
    assert "serial=twin-b" in " ".join(argv)                   # the guest's host name
    assert "hostfwd=tcp:127.0.0.1:40022-:22" in " ".join(argv)


def test_the_reclaim_matrix_at_twin_scale_runs_every_cell_on_the_twins(tmp_path):
    """The twin scale on the inventories the twin lab writes: every cell of the reclaim matrix
    on both twins (none below the floor, unlike the vm lab's two 135M memboots), MGLRU set at
    boot, each memboot's mem= at C + the twins' measured 220M overhead."""
    from bench.matrix.expand import expand
    from bench.matrix.load import load_matrix
    hosts = []
    for name in ("twin-a", "twin-b"):
        hosts.append(load_host_file(lab_twin._write_inventory(_guest(tmp_path, name),
                                                              tmp_path / "hosts")))
    m = load_matrix("reclaim", "twin")
    assert m.mglru_at_boot and m.memboot_overhead == 220 * 10**6
    exp = expand(m, hosts)
    assert not exp.skipped, exp.skipped
    cells = {h.name: sorted(c.cell for r in exp.requests for c in r.candidates
                            if c.host == h.name) for h in hosts}
    assert cells["twin-a"] == cells["twin-b"] and len(cells["twin-a"]) == len(m.points) == 11
    boots = {c.boot.mem for r in exp.requests for c in r.candidates if c.boot.mem}
    assert boots == {355 * 10**6, 455 * 10**6}
    assert min(boots) >= lab_twin.MEM_FLOOR == hosts[0].mem_floor
    lru = {c.boot.lru_gen for r in exp.requests for c in r.candidates}
    assert lru == {"on", "off"}                     # every boot sets MGLRU
