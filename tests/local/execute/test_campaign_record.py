"""A campaign's record as the store keeps it: the run options the executor derives from it
(the matrix's protocol through the record, settings over it), on a real SQLite file made by
the migrations."""

from bench.execute.campaign.record import Settings


def test_run_options_take_the_matrixs_protocol_unless_settings_override(tmp_path):
    """The cgroup headroom and balloon cap travel matrix -> campaign record -> run options (a
    lab-scale wall of C + 16M, not C + 6G); explicit settings win."""
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import create
    from bench.hosts.inventory import load_inventory
    from bench.store.campaigns import run_rows
    from bench.store.db import open_store
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "lab-a.toml").write_text(
        'name = "lab-a"\naddress = "127.0.0.1"\ntransport = "ssh"\n[tags]\nmachine = "A"\n'
        '[memory]\ntotal = "1536M"\nfloor = "512M"\n[reboot]\nallowed = true\nmethod = "kexec"\n')
    plan, exp, m = build_plan("reclaim", ["lab-a"], hosts, 3, "c1", scale="lab")
    store = open_store(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        cid = create(store, plan, exp, m, ["lab-a"], Settings(), "reclaim")
        inv = load_inventory(hosts)
        for over, headroom in (({}, 16 << 20), ({"cgroup_headroom_bytes": 64 << 20}, 64 << 20),
                               ({"cgroup_headroom_bytes": 0}, 0)):     # 0 is a headroom too
            ex = Executor(store, cid, Settings(**over), inventory=inv)
            ex.rows = {r.run_id: r for r in run_rows(store, cid)}
            rid = next(r for r, v in ex.rows.items() if "cgroup" in v.cell)
            assert ex.run_options(rid).cgroup_headroom_bytes == headroom
            assert ex.rec["scale"] == "lab"
    finally:
        store.close()
