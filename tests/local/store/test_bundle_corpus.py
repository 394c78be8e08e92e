"""A corpus of hostile bundles through `bench ingest`: each is refused with one line naming the
file and the key (or line), a non-zero exit, no traceback, and nothing half-stored (no row in
any table, the bundle moved to rejected/ as any refused bundle is, or left in place when it
names a campaign or run the database does not bind it to). The controller's peak RSS on the
worst of them is measured in a subprocess (resource usage of the child)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bench.cli import main
from bench.store import campaigns
from bench.store.db import open_store
from bench.store.models import Base
from tests.support.bundlegen import ensure_campaigns, make_bundle
from tests.support.paths import REPO

MiB = 1 << 20


def reseal(p: Path) -> None:
    """Rewrite the manifest over what is on disk, as a host that rewrites its bundle would."""
    m = json.loads((p / "manifest.json").read_text())
    m["files"] = {f.relative_to(p).as_posix(): {"bytes": f.stat().st_size,
                                                "sha256": hashlib.sha256(f.read_bytes())
                                                .hexdigest()}
                  for f in sorted(p.rglob("*")) if f.is_file() and not f.is_symlink()
                  and f.name != "manifest.json"}
    (p / "manifest.json").write_text(json.dumps(m, indent=1))


def spec_edit(fn):
    def edit(p):
        spec = json.loads((p / "spec.json").read_text())
        fn(spec)
        (p / "spec.json").write_text(json.dumps(spec))
        reseal(p)
    return edit


def raw_edit(rel, fn):
    def edit(p):
        (p / rel).write_bytes(fn((p / rel).read_bytes()))
        reseal(p)
    return edit


def agent_line(n, text):
    def fn(data: bytes) -> bytes:
        lines = data.splitlines()
        lines[n - 1] = text.encode() if isinstance(text, str) else text
        return b"\n".join(lines) + b"\n"
    return raw_edit("agent.jsonl", fn)


def manifest_edit(fn):
    def edit(p):
        m = json.loads((p / "manifest.json").read_text())
        fn(m)
        (p / "manifest.json").write_text(json.dumps(m))
    return edit


def deep_text(depth):
    """hints_provenance nested `depth` levels, written as text (json.dumps would recurse)."""
    def fn(data: bytes) -> bytes:
        return data.replace(b'"hints_provenance": null',
                            b'"hints_provenance": ' + b'{"a": ' * depth + b"1" + b"}" * depth)
    return raw_edit("spec.json", fn)


def symlink(p):
    target = p / "snapshots" / "pre" / "proc_meminfo"
    target.unlink()
    target.symlink_to("/etc/passwd")


def fifo(p):
    os.mkfifo(p / "snapshots" / "pre" / "proc_fifo")


def over_cap(p):
    with open(p / "kmsg.txt", "wb") as f:       # sparse: the size is all that is checked
        f.truncate(300 * MiB)


def _entries(p, n):
    text = "{" + ",".join(f'"f{i}":0' for i in range(n)) + "}"
    m = json.loads((p / "manifest.json").read_text())
    (p / "manifest.json").write_text(json.dumps(m)[:-1].rsplit('"files"', 1)[0]
                                     + '"files": ' + text + "}")


def million_files(p):
    _entries(p, 1_000_000)


def many_entries(p):
    """More entries than the files cap (4096 for this case: BENCH_BUNDLE_MAX_FILES)."""
    _entries(p, 5000)


def _engine_regex(p):
    """An engine run's bundle whose spec's regex does not compile (the rest made up)."""
    import shutil
    e = make_bundle(p.parent.parent / "engine", "r1", "e2e-prose-admit",
                    edit=lambda parts: parts["spec.json"]["engine"].update(tokens_regex="(("))
    shutil.rmtree(p)
    e.rename(p)


def million_files_and_files(p):
    """As many files on disk as the cap allows, so the manifest's size looks plausible."""
    d = p / "snapshots" / "extra"
    d.mkdir()
    for i in range(99_000):
        (d / str(i)).touch()
    million_files(p)


def non_utf8(data: bytes) -> bytes:
    return data.replace(b'"prose.jsonl"', b'"pr\xffse.jsonl"')


def dup_key(data: bytes) -> bytes:
    return data.replace(b'"host": "fixture-a"', b'"host": "fixture-a", "host": "fixture-b"')


# (id, edit, what the one line must say)
CASES = [
    ("passes-3e7", spec_edit(lambda s: s["agent"].update(passes=30_000_000)),
     "spec.json: key 'agent.passes': must be at most 1000, got 30000000"),
    ("passes-1-vs-summary-2", spec_edit(lambda s: s["agent"].update(passes=1)),
     "spec.json: key 'agent.passes': must be at least 2, got 1"),
    ("passes-string", spec_edit(lambda s: s["agent"].update(passes="two")),
     "spec.json: key 'agent.passes': must be an integer, got str 'two'"),
    ("plan-int", spec_edit(lambda s: s.update(plan=5)),
     "spec.json: key 'plan': must be a string, got int 5"),
    ("unknown-spec-key", spec_edit(lambda s: s.update(colour="red")),
     "spec.json: key 'colour': unknown key"),
    ("run-id-path", spec_edit(lambda s: s.update(run_id="../../etc")),
     "spec.json: key 'run_id': '../../etc' is not a run id"),
    ("manifest-entry-int", manifest_edit(lambda m: m["files"].update({"kmsg.txt": 5})),
     "manifest.json: key 'files.kmsg.txt': must be a JSON object, got int 5"),
    ("manifest-dotdot", manifest_edit(lambda m: m["files"].update(
        {"../../etc/passwd": {"bytes": 1, "sha256": "0" * 64}})),
     "manifest.json: key 'files.../../etc/passwd': '../../etc/passwd' is not a relative path"),
    ("million-files", million_files,
     "manifest.json: key 'files': 11888936 bytes of manifest for 113 files"),
    ("more-entries-than-the-cap", many_entries,
     "manifest.json: key 'files': 5000 entries (at most 4096)"),
    ("agent-line-list", agent_line(3, "[1, 2]"),
     "agent.jsonl:3: must be a JSON object, got list [1, 2]"),
    ("nan-wall", agent_line(2, '{"pass": 0, "iter": 1, "wall_ns": NaN, "bytes": 1, "reads": 1}'),
     "agent.jsonl:2: key 'wall_ns': NaN is not a finite number"),
    ("bytes-1e30", agent_line(1, '{"pass": 0, "iter": 0, "wall_ns": 5, "bytes": 1' + "0" * 30
                              + ', "reads": 1}'),
     "agent.jsonl:1: key 'bytes': must be at most 72057594037927936"),
    ("agent-non-utf8", agent_line(4, b'{"pass": 0, "iter": 3, "wall_ns": 5, "bytes": "\xff"}'),
     "agent.jsonl:4: not UTF-8 text"),
    ("huge-integer", raw_edit("spec.json", lambda d: d.replace(
        b'"pool_bytes": 201326592', b'"pool_bytes": 1' + b"0" * 400)),
     "spec.json: key 'pool_bytes': an integer of 401 digits does not fit 64 bits"),
    ("huger-integer", raw_edit("spec.json", lambda d: d.replace(
        b'"pool_bytes": 201326592', b'"pool_bytes": 1' + b"0" * 5000)),
     "spec.json: not valid JSON (Exceeds the limit (4300 digits)"),
    ("infinity", raw_edit("spec.json", lambda d: d.replace(
        b'"pool_bytes": 201326592', b'"pool_bytes": Infinity')),
     "spec.json: key 'pool_bytes': Infinity is not a finite number"),
    ("float-overflow", raw_edit("status.json", lambda d: re.sub(
        rb'"mono_ns": \d+', b'"mono_ns": 1e999', d, count=1)),
     "status.json: key 'history[0].mono_ns': 1e999 is not a finite number"),
    ("deep-json", deep_text(100), "spec.json: key 'hints_provenance.a.a"),
    ("deeper-json", deep_text(100_000), "spec.json: not valid JSON (nested too deep)"),
    ("non-utf8", raw_edit("spec.json", non_utf8), "spec.json:16: not UTF-8 text (byte 302)"),
    ("duplicate-keys", raw_edit("spec.json", dup_key),
     "spec.json: the key 'host' is written twice"),
    ("status-of-another-run", raw_edit("status.json", lambda d: d.replace(
        b'"run_id": "r1"', b'"run_id": "r2"')),
     "status.json: run_id 'r2' is not the spec's 'r1'"),
    ("vmstat-garbage", raw_edit("snapshots/post/proc_vmstat", lambda d: d.replace(
        b"\noom_kill ", b"\noom_kill lots\nx ", 1)),
     "snapshots/post/proc_vmstat: not /proc/vmstat text (invalid literal for int()"),
    ("vmstat-huge", raw_edit("snapshots/post/proc_vmstat", lambda d: d + b"pgscan_kswapd "
                             + b"9" * 25 + b"\n"),
     "snapshots/post/proc_vmstat: key 'pgscan_kswapd': 9999999999999999999999999 is not a "
     "counter"),
    ("diskstats-negative", raw_edit("snapshots/pass1-end/proc_diskstats",
                                    lambda d: d.replace(b" vda ", b" vda -", 1)),
     "snapshots/pass1-end/proc_diskstats: key 'vda.reads': -"),
    ("diskstats-short", raw_edit("snapshots/pre/proc_diskstats",
                                 lambda d: b"8 0 sda 1 2\n" + d),
     "snapshots/pre/proc_diskstats: not /proc/diskstats text (diskstats line with 5 fields"),
    ("lru-gen-word", raw_edit("snapshots/post/sys_kernel_mm_lru_gen_enabled",
                              lambda d: b"enabled\n"),
     "snapshots/post/sys_kernel_mm_lru_gen_enabled: not lru_gen/enabled text"),
    ("cgroup-key-too-long", raw_edit("snapshots/post/memory.stat", lambda d: d + b"x" * 200
                                     + b" 1\n"),
     "snapshots/post/memory.stat: key 'xxxx"),
    ("engine-regex", lambda p: _engine_regex(p),
     "spec.json: key 'engine.tokens_regex': not a valid regular expression"),
    ("symlink", symlink, "snapshots/pre/proc_meminfo: is a symbolic link"),
    ("fifo", fifo, "snapshots/pre/proc_fifo: is not a regular file"),
    ("over-the-cap", over_cap,
     "kmsg.txt: 314572800 bytes, above the cap of 268435456 bytes per file"),
]


def _counts(url: str) -> dict[str, int]:
    st = open_store(url)
    try:
        with st.session() as s:
            return {t.name: s.scalar(select(func.count()).select_from(t))
                    for t in Base.metadata.sorted_tables}
    finally:
        st.close()


def _ingest(capsys, url, *argv) -> tuple[int, list[str]]:
    rc = main(["ingest", *map(str, argv), "--db", url])
    err = capsys.readouterr().err     # the problem lines (a refusal's `fix:` line follows it)
    return rc, [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("fix:")]


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path}/corpus.db"
    st = open_store(url)
    ensure_campaigns(st, "c1")
    st.close()
    return url


@pytest.mark.parametrize("case, edit, says", CASES, ids=[c[0] for c in CASES])
def test_a_hostile_bundle_is_refused_in_one_line_and_nothing_is_stored(
        tmp_path, db, capsys, monkeypatch, case, edit, says):
    monkeypatch.setenv("BENCH_BUNDLE_MAX_FILES", "4096")
    p = make_bundle(tmp_path / "in", "r1", "64m-cgroup-mglru")
    edit(p)
    before = _counts(db)
    rc, lines = _ingest(capsys, db, p)
    assert rc == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"refused {p}: ") and says in lines[0], lines[0]
    assert "Traceback" not in lines[0]
    assert _counts(db) == before                        # no row anywhere
    assert not p.exists() and (p.parent / "rejected" / "r1").is_dir()
    assert sorted(x.name for x in (tmp_path / "in").iterdir()) == ["rejected"]


def test_a_bundle_is_bound_to_its_place(tmp_path, db, capsys):
    """Under <data_dir>/bundles/<host>/<run_id>/ a bundle must be that run on that host."""
    for host, rid, says in (("fixture-b", "r1", "host 'fixture-a' is not the host its "
                                                "directory names ('fixture-b')"),
                            ("fixture-a", "r7", "run_id 'r1' is not the run its directory "
                                                "names ('r7')")):
        p = make_bundle(tmp_path / "data" / "bundles" / host, "r1", "64m-cgroup-mglru")
        p = p.rename(p.parent / rid)
        rc, lines = _ingest(capsys, db, p)
        assert rc == 1 and len(lines) == 1 and f"{p}: spec.json: {says}" in lines[0], lines
        assert (p.parent / "rejected" / rid).is_dir()
    assert _counts(db)["runs"] == 0


def test_a_bundle_of_a_campaign_not_in_the_database_is_refused_and_left_in_place(
        tmp_path, db, capsys):
    p = make_bundle(tmp_path, "r1", "64m-cgroup-mglru", campaign="c9")
    rc, lines = _ingest(capsys, db, p)
    assert rc == 1 and len(lines) == 1, lines
    assert "spec.json: campaign 'c9' is not in this database" in lines[0]
    assert p.is_dir() and _counts(db)["runs"] == 0
    st = open_store(db)
    assert campaigns.campaign_row(st, "c9") is None     # never created
    st.close()


def test_a_bundle_is_bound_to_the_run_row_already_stored(tmp_path, db, capsys):
    st = open_store(db)
    campaigns.add_run(st, "c1", "r1", host="fixture-b", cell="64m-cgroup-mglru", position=0)
    st.close()
    p = make_bundle(tmp_path, "r1", "64m-cgroup-mglru")          # says host fixture-a
    rc, lines = _ingest(capsys, db, p)
    assert rc == 1 and "spec.json: host 'fixture-a' is not the host of run r1 in the store " \
                       "('fixture-b')" in lines[0], lines
    assert p.is_dir() and _counts(db)["iterations"] == 0


def test_a_bundle_is_bound_to_the_spec_the_controller_sent(tmp_path, db, capsys):
    """The executor stores the spec it sends with the run (state running): a bundle whose
    spec was rewritten on the host (passes, say) is refused, not judged."""
    sent = json.loads((make_bundle(tmp_path / "sent", "r1", "64m-cgroup-mglru") /
                       "spec.json").read_text())
    st = open_store(db)
    campaigns.add_run(st, "c1", "r1", host="fixture-a", cell="64m-cgroup-mglru", position=0)
    for state in ("boot_verified", "deployed"):
        campaigns.transition(st, "r1", state)
    campaigns.transition(st, "r1", "running", spec=sent)
    st.close()
    p = make_bundle(tmp_path / "b", "r1", "64m-cgroup-mglru",
                    edit=lambda parts: parts["spec.json"]["agent"].update(threads=64))
    rc, lines = _ingest(capsys, db, p)
    assert rc == 1 and len(lines) == 1 and "spec.json: key 'agent' is not what the " \
                                             "controller sent for run r1" in lines[0], lines
    assert _counts(db)["iterations"] == 0
    rc, lines = _ingest(capsys, db, make_bundle(tmp_path / "c", "r1", "64m-cgroup-mglru"))
    assert rc == 0, lines                               # the bundle of the spec it sent


def test_too_many_files_is_refused(tmp_path, db, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_BUNDLE_MAX_FILES", "50")
    p = make_bundle(tmp_path, "r1", "64m-cgroup-mglru")
    rc, lines = _ingest(capsys, db, p)
    assert rc == 1 and len(lines) == 1 and f"{p}: .: more than 50 files" in lines[0], lines


def test_directories_count_against_the_files_cap_as_they_are_read(tmp_path, db, capsys,
                                                                   monkeypatch):
    """A bundle that holds few files but many (empty) directories is refused at the cap, as
    collect refuses its archive: every entry counts."""
    p = make_bundle(tmp_path / "a", "r1", "64m-cgroup-mglru")
    entries = sum(1 for _ in p.rglob("*"))
    monkeypatch.setenv("BENCH_BUNDLE_MAX_FILES", str(entries + 5))
    q = make_bundle(tmp_path / "b", "r2", "64m-cgroup-mglru")
    for i in range(10):
        (q / f"d{i}").mkdir()
    rc, lines = _ingest(capsys, db, q)
    assert rc == 1 and len(lines) == 1 and \
        f"more than {entries + 5} files and directories" in lines[0], lines
    rc, lines = _ingest(capsys, db, p)
    assert rc == 0, lines                               # the same bundle without them is in


def test_ingest_never_opens_a_path_the_bundle_names(tmp_path, db, capsys):
    """spec.plan names a file on the controller (it is a path on the host): ingest does not
    open it; the demand model's plan is --plan or the plan store's, by sha256."""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret:19000::::::\n")
    p = make_bundle(tmp_path / "b", "r1", "64m-cgroup-mglru",
                    edit=lambda parts: parts["spec.json"].update(plan=str(secret)))
    opened: list[str] = []

    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            opened.append(os.fsdecode(args[0]))
    sys.addaudithook(hook)      # audit hooks cannot be removed: this one only records
    rc, lines = _ingest(capsys, db, p, "--data-dir", tmp_path / "data")
    seen, opened[:] = list(opened), []
    assert rc == 0, lines
    assert str(secret) not in seen
    st = open_store(db)
    from bench.store.queries import list_runs
    run = list_runs(st)[0]
    st.close()
    assert run["run_id"] == "r1" and "secret" not in json.dumps(run)


# peak RSS ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_peak_rss_of_ingest_stays_bounded(tmp_path):
    """bench ingest in a child process: a normal bundle, and the worst hostile cases (a
    manifest of 10^6 entries, a file over the cap, JSON nested 10^5 deep, 64 MiB of agent
    records with a bad last line). Printed for the record; asserted under a generous bound."""
    worst = {"normal": None, "million-files": million_files,
             "million-files-and-files": million_files_and_files, "over-the-cap": over_cap,
             "deeper-json": deep_text(100_000), "64MiB-agent-then-bad-line": _big_agent(64)}
    report = {}
    for name, edit in worst.items():
        p = make_bundle(tmp_path / name, "r1", "64m-cgroup-mglru")
        if edit is not None:
            edit(p)
        url = f"sqlite:///{tmp_path / name}.db"
        ensure_campaigns(open_store(url), "c1")
        rc, rss = _child_rss(["ingest", str(p), "--db", url])
        report[name] = rss
        assert rc == (0 if edit is None else 1), name
    print("peak RSS MiB of bench ingest:", json.dumps(report))
    assert max(report.values()) < 1024, report
    assert report["over-the-cap"] < report["normal"] + 64, report      # nothing was read


# A small parent forks `bench`, waits for it and prints its resource usage: the peak RSS of a
# child forked straight from pytest would count pytest's own pages (Linux carries the
# pre-exec high-water mark of the forked copy into the child's ru_maxrss).
_MEASURE = ("import os, sys\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os.execv(sys.executable, [sys.executable, '-m', 'bench', *sys.argv[1:]])\n"
            "_, status, usage = os.wait4(pid, 0)\n"
            "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n")


def _child_rss(argv: list[str]) -> tuple[int, int]:
    """(exit code, peak RSS in MiB) of `bench ARGV` (resource usage of that process)."""
    r = subprocess.run([sys.executable, "-c", _MEASURE, *argv], cwd=REPO, capture_output=True,
                       timeout=600)
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    rc, kib = r.stdout.decode().split()
    return int(rc), int(kib) // 1024


def _big_agent(mib: int):
    """agent.jsonl of `mib` MiB of valid records, then one that is not."""
    def edit(p):
        line = b'{"pass": 0, "iter": 0, "wall_ns": 50000000, "bytes": 33554432, "reads": 96}\n'
        with open(p / "agent.jsonl", "wb") as f:
            f.write(line * (mib * MiB // len(line)))
            f.write(b'{"pass": 0, "iter": 0, "wall_ns": "soon"}\n')
        reseal(p)
    return edit
