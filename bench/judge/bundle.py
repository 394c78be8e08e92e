"""Run bundles (docs/bundle.md): read a directory, verify its manifest, load it into plain data.

A bundle is complete when manifest.json exists, says complete: true, lists every part a run
must have, and every listed file exists with its size and sha256. Anything else is a
BundleError naming the missing or damaged part. The same loader works on a directory or on a
{relative path: bytes} mapping (the raw files the store keeps), so a stored run can be
re-derived exactly. Pure: file reads only.

Every part is untrusted input: a directory is read under size caps (bench.judge.bundle_files:
lstat before any read, regular files only, hashes streamed), and every JSON part is checked
against the contract (bench.judge.bundle_schema, through bench.judge.bundle_check) before
anything is derived from it: the parts a run must have are counted from the validated spec.
`bind` ties a bundle to the run id and host it was collected for.

Engine runs (a spec with an `engine` section, docs/engine.md) have no agent output: instead of
agent.jsonl and the pass snapshots they carry engine.json (the runner's record), engine.stdout
and engine.stderr; `records` and `summary` are empty and `engine` holds engine.json.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from bench.judge.bundle_check import agent_output, document, timeline
from bench.judge.bundle_files import BundleError, Caps, Listing, read_dir, scan_dir
from bench.judge.bundle_schema import DOCUMENTS, RUN_ID_RE
from bench.judge.bundle_snapshots import check_snapshot

__all__ = ["Bundle", "BundleError", "Caps", "Checked", "bind", "check", "load", "read_dir",
           "scan_dir", "verify"]

RUN_ID = RUN_ID_RE
REQUIRED = ("spec.json", "status.json", "host.json", "drop.json", "mglru.json", "capacity.json",
            "agent.jsonl", "timeline.csv", "kmsg.txt")
SNAPSHOT_FILES = ("proc_diskstats", "proc_vmstat", "proc_meminfo")
ENGINE_REQUIRED = ("spec.json", "status.json", "host.json", "drop.json", "mglru.json",
                   "capacity.json", "engine.json", "engine.stdout", "engine.stderr",
                   "timeline.csv", "kmsg.txt")
FAILED_REQUIRED = ("spec.json", "status.json")
MANIFEST_ENTRY_BYTES = 1024     # a path of at most 512 characters, its size and sha256


@dataclass
class Bundle:
    run_id: str
    spec: dict
    status: dict
    host: dict
    drop: dict
    mglru: dict
    capacity: dict
    balloon: dict | None
    snapshots: dict[str, dict[str, str]]      # phase -> {file name: text}
    records: list[dict]                       # agent per-pass, per-iteration records
    summary: dict                             # the agent's summary record
    timeline: list[dict]
    kmsg: list[str]
    manifest: dict
    files: dict[str, bytes] = field(repr=False, default_factory=dict)
    engine: dict | None = None                # engine runs: engine.json

    @property
    def completed(self) -> bool:
        """The runner went through its whole protocol (status done, ok). A failed run's bundle
        holds what the runner wrote before it stopped; retention rejects it with the reason."""
        return self.status.get("phase") == "done" and self.status.get("ok") is True

    @property
    def is_engine(self) -> bool:
        return isinstance(self.spec.get("engine"), dict)

    def text(self, rel: str) -> str:
        return self.files.get(rel, b"").decode("utf-8", "replace")

    @property
    def passes(self) -> int:
        return int((self.spec.get("agent") or {}).get("passes", 2))

    @property
    def loop_entry(self) -> str:
        return f"pass{self.passes - 1}-start"

    @property
    def measured_end(self) -> str:
        return f"pass{self.passes - 1}-end"

    @property
    def digest(self) -> str:
        """Identity of the bundle's content: sha256 of its manifest."""
        return hashlib.sha256(self.files["manifest.json"]).hexdigest()


@dataclass(frozen=True)
class Checked:
    """A bundle whose manifest verified, with its validated spec and status."""
    manifest: dict
    spec: dict
    status: dict

    @property
    def failed(self) -> bool:
        """A run the runner marked failed: it stopped early and wrote only part of its
        bundle."""
        return self.status["phase"] == "failed" and self.status.get("ok") is False


def check(listing: Listing, where: str = "bundle", caps: Caps | None = None) -> Checked:
    """The manifest against the files (sizes, then sha256), spec.json and status.json against
    the contract, then the parts a run must have (counted from the validated spec)."""
    caps = caps or Caps.from_env()
    if "manifest.json" not in listing.sizes:
        raise BundleError(where, "manifest.json", "missing (the runner writes it last: the run "
                          "did not finish writing its bundle)")
    size, n = listing.sizes["manifest.json"], len(listing.sizes)
    if size > MANIFEST_ENTRY_BYTES * n + 4096:      # refused before it is parsed
        raise BundleError(where, "manifest.json", f"key 'files': {size} bytes of manifest for "
                          f"{n} files (an entry takes at most {MANIFEST_ENTRY_BYTES} bytes)")
    manifest = document(listing.content, "manifest.json", where, max_items=caps.files)
    if manifest["complete"] is not True:
        raise BundleError(where, "manifest.json", "does not say complete: true")
    listed: dict[str, dict] = manifest["files"]
    for rel, meta in listed.items():
        if rel not in listing.sizes:
            raise BundleError(where, rel, "listed in the manifest but missing")
        if listing.sizes[rel] != meta["bytes"]:
            raise BundleError(where, rel, f"{listing.sizes[rel]} bytes, the manifest says "
                              f"{meta['bytes']}")
    for rel, meta in listed.items():
        if listing.sha256(rel) != meta["sha256"]:
            raise BundleError(where, rel, "sha256 does not match the manifest (damaged)")
    for rel in FAILED_REQUIRED:
        if rel not in listed:
            raise BundleError(where, rel, "missing from the manifest (incomplete bundle)")
    spec = document(listing.content, "spec.json", where)
    status = document(listing.content, "status.json", where)
    for part, doc in (("manifest.json", manifest), ("status.json", status)):
        if doc["run_id"] != spec["run_id"]:
            raise BundleError(where, part, f"run_id {doc['run_id']!r} is not the spec's "
                              f"{spec['run_id']!r}")
    checked = Checked(manifest, spec, status)
    for part in _required_parts(spec, checked.failed):
        if part not in listed:
            raise BundleError(where, part, "missing from the manifest (incomplete bundle)")
    return checked


def verify(files: Mapping[str, bytes] | Listing, where: str = "bundle",
           caps: Caps | None = None) -> dict:
    """Check the manifest against the files; return the manifest or raise BundleError."""
    listing = files if isinstance(files, Listing) else Listing.of(files)
    return check(listing, where, caps).manifest


def bind(spec: dict, where: str, *, run_id: str | None = None, host: str | None = None,
         what: str = "collected") -> None:
    """A bundle is bound to the run id and host it was collected for: BundleError otherwise."""
    for key, want in (("run_id", run_id), ("host", host)):
        if want is not None and spec[key] != want:
            raise BundleError(where, "spec.json", f"{key} {spec[key]!r} is not the "
                              f"{'run' if key == 'run_id' else 'host'} {what} ({want!r}): a "
                              "bundle is bound to its run and host")


def _required_parts(spec: dict, failed: bool = False) -> list[str]:
    if failed:
        return list(FAILED_REQUIRED)
    if spec.get("engine") is not None:
        return list(ENGINE_REQUIRED) + [f"snapshots/{ph}/{f}" for ph in ("pre", "post")
                                        for f in SNAPSHOT_FILES]
    passes = spec["agent"]["passes"]        # validated: 2..1000
    phases = ["pre", "post"] + [f"pass{p}-{e}" for p in range(passes) for e in ("start", "end")]
    parts = list(REQUIRED) + [f"snapshots/{ph}/{f}" for ph in phases for f in SNAPSHOT_FILES]
    if spec.get("mechanism") == "balloon":
        parts.append("balloon.json")
    return parts


def load(files: Mapping[str, bytes], where: str = "bundle", caps: Caps | None = None) -> Bundle:
    """Verify, validate every part, then parse it into plain data. Files the manifest does not
    list are left out (nothing unverified is kept)."""
    c = check(Listing.of(files), where, caps)
    kept = {rel: files[rel] for rel in ["manifest.json", *c.manifest["files"]]}
    docs = {rel: document(kept, rel, where) for rel in DOCUMENTS
            if rel in kept and rel not in ("manifest.json", "spec.json", "status.json")}
    snapshots: dict[str, dict[str, str]] = {}
    for rel, data in kept.items():
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "snapshots":
            text = data.decode("utf-8", "replace")
            check_snapshot(where, rel, text)
            snapshots.setdefault(parts[1], {})[parts[2]] = text
    engine = c.spec.get("engine") is not None
    records: list[dict]
    summary: dict
    if engine or (c.failed and "agent.jsonl" not in kept):
        records, summary = [], {}
    else:
        records, summary = agent_output(kept["agent.jsonl"], where, partial=c.failed)
    return Bundle(
        run_id=c.spec["run_id"], spec=c.spec, status=c.status,
        host=docs.get("host.json", {}), drop=docs.get("drop.json", {}),
        mglru=docs.get("mglru.json", {}), capacity=docs.get("capacity.json", {}),
        balloon=docs.get("balloon.json"), snapshots=snapshots, records=records,
        summary=summary,
        timeline=timeline(kept["timeline.csv"], where, partial=c.failed)
        if "timeline.csv" in kept else [],
        kmsg=[ln for ln in kept.get("kmsg.txt", b"").decode("utf-8", "replace").splitlines()
              if ln.strip()],
        manifest=c.manifest, files=kept,
        engine=docs.get("engine.json") if engine else None)
