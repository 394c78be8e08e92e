"""Host facts from the fixture directories of tests/fixtures/facts (captured or hand-written
outputs of the probe's commands), parsed by the probe's own parsers and laid out as
bench.hosts.facts.probe lays them out: the planning tests feed bench.matrix.expand and
bench.matrix.schedule with them, as data."""

from __future__ import annotations

import json
from pathlib import Path

from bench.hosts import facts as F
from tests.support.paths import FIXTURES

DEBIAN = "debian12-x86_64-cgv1"            # captured: cgroup v1 memory, no MGLRU, x86_64
GH200 = "gh200-aarch64-cgv2-handwritten"   # hand-written: cgroup v2, MGLRU, mem=96G boot
# /proc files of the captured host live with the snapshot fixtures
_PROC = {DEBIAN: FIXTURES / "procfs" / DEBIAN}
_FILES = {"memory": ("meminfo.txt", "meminfo"), "cmdline": ("cmdline.txt", "cmdline"),
          "boot_id": ("boot_id.txt", "boot_id"),
          "pool_device": ("pool_device.txt", "pool_device_partition.txt")}


def _text(name: str, fact: str) -> str | None:
    d = FIXTURES / "facts" / name
    for fname in _FILES.get(fact, (f"{fact}.txt",)):
        for p in (d / fname, _PROC.get(name, d) / fname):
            if p.is_file():
                return p.read_text()
    return None


def fixture_facts(name: str, **replace: str) -> dict:
    """The facts a probe of the fixture host returns. A fact without a fixture file is absent
    (the probe records an error for it), or None when the fact is optional (its command failed:
    no /sys/kernel/mm/lru_gen on the captured Debian host). `replace` swaps a fact's text
    before parsing (cmdline="..." for another boot, cgroup="..." for other mounts)."""
    out: dict = {}
    for fact in F.FACTS:
        text = replace.get(fact.name, _text(name, fact.name))
        if text is None:
            if fact.optional:
                out[fact.name] = None
            continue
        value = fact.parse(text)
        if fact.name in F.FLAT:
            for k in F.FLAT[fact.name]:
                out[k] = value.get(k)
        else:
            out[fact.name] = value
    if out.get("settings") is not None:
        out["settings"] = F.settings_for(out["settings"], out.get("pool_device"))
    return out


NO_MEMORY_CGROUP = ("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n@@controllers\n"
                    "/sys/fs/cgroup cpu io pids\n")


def write_facts(path: Path, by_host: dict[str, dict]) -> Path:
    """A facts file as `bench hosts probe --json` writes it."""
    path.write_text(json.dumps([{"host": h, "ok": True, "error": None, "fact_errors": {},
                                 "facts": f} for h, f in by_host.items()]))
    return path


def default_boot(name: str) -> dict:
    """The fixture host's facts under a boot without mem= (its command line less mem=...)."""
    text = _text(name, "cmdline") or ""
    return fixture_facts(name, cmdline=" ".join(t for t in text.split()
                                                if not t.startswith("mem=")))


def gh200_facts(tmp_path: Path, names=("gh200-a", "gh200-b"), **more: dict) -> str:
    """A facts file for the shipped GH200 hosts (the hand-written GH200 fixture under its
    default boot, where a campaign starts) and `more` hosts' facts; returns its path."""
    f = default_boot(GH200)
    return str(write_facts(tmp_path / "facts.json", {n: f for n in names} | more))
