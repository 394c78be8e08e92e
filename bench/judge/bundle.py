"""Run bundles (docs/bundle.md): read a directory, verify its manifest, load it into plain data.

A bundle is complete when manifest.json exists, says complete: true, lists every part a run
must have, and every listed file exists with its size and sha256. Anything else is a
BundleError naming the missing or damaged part. The same loader works on a directory or on a
{relative path: bytes} mapping (the raw files the store keeps), so a stored run can be
re-derived exactly. Pure: file reads only.

Engine runs (a spec with an `engine` section, docs/engine.md) have no agent output: instead of
agent.jsonl and the pass snapshots they carry engine.json (the runner's record), engine.stdout
and engine.stderr; `records` and `summary` are empty and `engine` holds engine.json.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import FormatError

RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
REQUIRED = ("spec.json", "status.json", "host.json", "drop.json", "mglru.json", "capacity.json",
            "agent.jsonl", "timeline.csv", "kmsg.txt")
SNAPSHOT_FILES = ("proc_diskstats", "proc_vmstat", "proc_meminfo")
ENGINE_REQUIRED = ("spec.json", "status.json", "host.json", "drop.json", "mglru.json",
                   "capacity.json", "engine.json", "engine.stdout", "engine.stderr",
                   "timeline.csv", "kmsg.txt")


FAILED_REQUIRED = ("spec.json", "status.json")


class BundleError(FormatError):
    """A bundle that is damaged or incomplete; `part` names the missing or damaged file."""

    def __init__(self, where: str, part: str, message: str, hint: str | None = None):
        super().__init__(f"{where}: {part}: {message}", hint)
        self.part = part


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
        return int(self.spec.get("agent", {}).get("passes", 2))

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


def read_dir(directory: str | Path) -> dict[str, bytes]:
    """Every regular file under directory, keyed by its relative POSIX path."""
    root = Path(directory)
    if not root.is_dir():
        raise BundleError(str(root), ".", "not a directory")
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def verify(files: dict[str, bytes], where: str = "bundle") -> dict:
    """Check the manifest against the files; return the manifest or raise BundleError."""
    if "manifest.json" not in files:
        raise BundleError(where, "manifest.json", "missing (the runner writes it last: the run "
                          "did not finish writing its bundle)")
    manifest = _json(files, "manifest.json", where)
    if manifest.get("complete") is not True:
        raise BundleError(where, "manifest.json", "does not say complete: true")
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise BundleError(where, "manifest.json", "has no files map")
    for rel, meta in listed.items():
        if rel not in files:
            raise BundleError(where, rel, "listed in the manifest but missing")
        data = files[rel]
        if len(data) != meta.get("bytes"):
            raise BundleError(where, rel,
                              f"{len(data)} bytes, the manifest says {meta.get('bytes')}")
        if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            raise BundleError(where, rel, "sha256 does not match the manifest (damaged)")
    spec = _json(files, "spec.json", where) if "spec.json" in listed else {}
    for part in _required_parts(spec, _failed(files, listed, where)):
        if part not in listed:
            raise BundleError(where, part, "missing from the manifest (incomplete bundle)")
    return manifest


def _failed(files: dict[str, bytes], listed: dict, where: str) -> bool:
    """A run the runner marked failed: it stopped early and wrote only part of its bundle."""
    if "status.json" not in listed:
        return False
    st = _json(files, "status.json", where)
    return st.get("phase") == "failed" and st.get("ok") is False


def _required_parts(spec: dict, failed: bool = False) -> list[str]:
    if failed:
        return list(FAILED_REQUIRED)
    if isinstance(spec.get("engine"), dict):
        return list(ENGINE_REQUIRED) + [f"snapshots/{ph}/{f}" for ph in ("pre", "post")
                                        for f in SNAPSHOT_FILES]
    passes = int(spec.get("agent", {}).get("passes", 2)) if spec else 2
    phases = ["pre", "post"] + [f"pass{p}-{e}" for p in range(passes) for e in ("start", "end")]
    parts = list(REQUIRED) + [f"snapshots/{ph}/{f}" for ph in phases for f in SNAPSHOT_FILES]
    if spec.get("mechanism") == "balloon":
        parts.append("balloon.json")
    return parts


def load(files: dict[str, bytes], where: str = "bundle") -> Bundle:
    """Verify, then parse every part into plain data."""
    manifest = verify(files, where)
    spec = _json(files, "spec.json", where)
    run_id = spec.get("run_id")
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise BundleError(where, "spec.json", f"bad run_id {run_id!r}",
                          hint="a run id is 1-64 of A-Z, a-z, 0-9, '.', '_' and '-'")
    if manifest.get("run_id") not in (None, run_id):
        raise BundleError(where, "manifest.json", f"run_id {manifest.get('run_id')!r} is not "
                          f"the spec's {run_id!r}")
    snapshots: dict[str, dict[str, str]] = {}
    for rel, data in files.items():
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "snapshots":
            snapshots.setdefault(parts[1], {})[parts[2]] = data.decode("utf-8", "replace")
    engine = isinstance(spec.get("engine"), dict)
    status = _json(files, "status.json", where)
    failed = status.get("phase") == "failed" and status.get("ok") is False

    def part(rel: str, default=None):
        # a failed run's bundle may stop before any part but spec and status
        if failed and rel not in files:
            return default
        return _json(files, rel, where)
    records: list[dict]
    summary: dict
    if engine or (failed and "agent.jsonl" not in files):
        records, summary = [], {}
    else:
        records, summary = _agent(files, where, partial=failed)
    return Bundle(
        run_id=run_id, spec=spec, status=status,
        host=part("host.json", {}), drop=part("drop.json", {}),
        mglru=part("mglru.json", {}), capacity=part("capacity.json", {}),
        balloon=_json(files, "balloon.json", where) if "balloon.json" in files else None,
        snapshots=snapshots, records=records, summary=summary,
        timeline=[] if failed and "timeline.csv" not in files else _timeline(files, where),
        kmsg=[ln for ln in files.get("kmsg.txt", b"").decode("utf-8", "replace").splitlines()
              if ln.strip()],
        manifest=manifest, files=dict(files),
        engine=part("engine.json") if engine else None)


def _json(files: dict[str, bytes], rel: str, where: str) -> dict:
    if rel not in files:
        raise BundleError(where, rel, "missing")
    try:
        value = json.loads(files[rel])
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(where, rel, f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BundleError(where, rel, "is not a JSON object")
    return value


def _agent(files: dict[str, bytes], where: str,
           partial: bool = False) -> tuple[list[dict], dict]:
    records, summary = [], None
    for n, line in enumerate(files["agent.jsonl"].decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if partial:     # a killed agent's last line may be cut short
                continue
            raise BundleError(where, f"agent.jsonl:{n}", "not valid JSON") from None
        if rec.get("summary"):
            summary = rec
        elif {"pass", "iter", "wall_ns", "bytes", "reads"} <= rec.keys():
            records.append(rec)
        else:
            raise BundleError(where, f"agent.jsonl:{n}", "neither an iteration record nor the "
                              "summary")
    if summary is None:
        if partial:         # the agent was killed: what it wrote is kept, the run is rejected
            return records, {}
        raise BundleError(where, "agent.jsonl", "has no summary record (the agent did not finish)")
    return records, summary


def _timeline(files: dict[str, bytes], where: str) -> list[dict]:
    text = files["timeline.csv"].decode("utf-8", "replace")
    rows = []
    for n, row in enumerate(csv.DictReader(io.StringIO(text)), 2):
        try:
            rows.append({"mono_ns": int(row["mono_ns"]), "phase": row["phase"],
                         "memory_current": int(row["memory_current"]) if row["memory_current"]
                         else None,
                         "cached": int(row["cached"]) if row.get("cached") else None,
                         "mem_available": int(row["mem_available"]) if row.get("mem_available")
                         else None})
        except (KeyError, TypeError, ValueError):
            raise BundleError(where, f"timeline.csv:{n}", "not mono_ns,phase,memory_current,"
                              "cached,mem_available") from None
    return rows
