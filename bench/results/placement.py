"""The paper's §8 placement arithmetic (`bench placement`): rules 2 and 3 from the GPU-side
bandwidths a user measured on one serving node, and the worked sizing example from the
capacity response stored in the results database.

- Rule 2 (promote high-reuse experts to HBM): promoting an expert of S bytes costs one
  overlapped transfer S / link and saves S (1 / host_read - 1 / hbm) on every later use, so
  the breakeven reuse count is r* = (1 / link) / (1 / host_read - 1 / hbm). `link` is the
  overlapped copy-then-compute streaming rate, `host_read` the GPU's read rate from file-backed
  host pages, `hbm` the HBM weight-read rate (the paper's 346, 327 and 2938 GB/s give 1.06).
  Where host reads are no slower than HBM, promotion never repays itself (r* is None).
- Rule 3 (prefer direct file-backed reads when adoption and streaming have similar rates):
  the gap between direct reads and streaming, 1 - host_read / streaming, on the rates as the
  file gives them (the paper's "within 5.6%" is on unrounded rates; its printed ones give
  5.5%). A negative gap means direct reads are faster. The paper names no threshold for
  "similar": bench reports the gap and leaves the call to the reader.
- Worked sizing example: per capacity curve (one result group, mechanism and reclaim of
  `bench results --matrix capacity`; bench.judge.identity), the DRAM at which the curve
  reaches a target iteration time, linear between the two measured capacities around it
  (bench.judge.stats.interpolate_capacity), with the device GB per iteration interpolated the
  same way; iterations per second at the curve's largest capacity, and seconds per accepted
  token there when the plan recorded its tokens. A balloon curve's answer is an upper bound
  (the rows are balloon-conditioned, §5). Curves of groups that differ in host, workload or
  fingerprint are never interpolated across: each keeps its own answer and the output says
  what differs.

The bandwidth file (TOML, GB/s = 1e9 bytes per second; bench/data/bandwidths/ has an example)
is measured on the serving node, not by bench: the machines bench runs on here have no GPU.
Every key is checked; an unknown or bad one is refused naming the file and the key.

    [measured]
    host = "gh200-b"            # required: the machine measured (rules never cross machines)
    boot_id = "..."             # optional: the boot measured, as /proc/sys/kernel/random/boot_id
    kernel = "6.8.0-1011-nvidia-64k"  # optional
    date = "2026-01-15"         # optional
    note = "..."                # optional
    [gb_per_s]
    hbm = 2938.0                # GPU reads of HBM-resident weights
    host_read = 327.0           # GPU reads of file-backed (page-cache) host pages
    streaming = 346.0           # overlapped copy-then-compute streaming over the link
    link_ceiling = 368.5        # optional: the link's ceiling (streaming may not exceed it)
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from bench.errors import InputError
from bench.judge import identity, stats

MAX_FILE_BYTES = 64 << 10
MAX_RATE = 1e6                 # GB/s: a petabyte per second is no measurement
RATES = {"hbm": "GPU reads of HBM-resident weights",
         "host_read": "GPU reads of file-backed host pages",
         "streaming": "overlapped copy-then-compute streaming over the link"}
OPTIONAL_RATES = {"link_ceiling": "the link's ceiling"}
MEASURED = {"host": 64, "boot_id": 64, "kernel": 128, "date": 64, "note": 512}
TABLES = ("measured", "gb_per_s")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CTRL = re.compile(r"[\x00-\x1f\x7f]")


def _bad(source: str, key: str, what: str) -> InputError:
    return InputError(f"{source}: key {key}: {what}",
                      hint="see the example bench/data/bandwidths/paper-gh200.toml "
                           "(`bench placement --help`)")


SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "bandwidths"


def shipped_bandwidths() -> dict[str, Path]:
    """The bandwidth files shipped with bench, by name (the file's stem)."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.toml"))}


def resolve_bandwidths(arg: str | Path) -> Path:
    """A path as given when it exists, else a shipped file named `arg` (e.g. paper-gh200):
    an installed bench's data files are not where a user could name them by path."""
    path = Path(arg)
    if path.exists() or "/" in str(arg) or str(arg).endswith(".toml"):
        return path
    shipped = shipped_bandwidths()
    if str(arg) in shipped:
        return shipped[str(arg)]
    raise InputError(f"{arg}: no such bandwidth file",
                     hint=f"give a file's path, or a shipped name: {', '.join(shipped)}")


def read_bandwidths(path: Path) -> dict:
    """The bandwidth file at `path`, read (at most MAX_FILE_BYTES), parsed and checked."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"{path}: larger than {MAX_FILE_BYTES >> 10} KiB: not a bandwidth "
                         "file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}:{line}: not UTF-8 text") from None
    return parse_bandwidths(text, str(path))


def parse_bandwidths(text: str, source: str) -> dict:
    """A bandwidth file's text checked: {"source", "measured": {...}, "gb_per_s": {...}}."""
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise InputError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"{source}: not valid TOML: nests too deeply") from None
    for key in data:
        if key not in TABLES:
            raise _bad(source, key, f"unknown (the file has the tables {', '.join(TABLES)})")
    for key in TABLES:
        if not isinstance(data.get(key), dict):
            raise _bad(source, key, "missing: a [" + key + "] table is required")
    return {"source": source, "measured": _measured(data["measured"], source),
            "gb_per_s": _rates(data["gb_per_s"], source)}


def _measured(t: dict, source: str) -> dict:
    out: dict[str, str | None] = {k: None for k in MEASURED}
    for key, v in t.items():
        name = f"measured.{key}"
        if key not in MEASURED:
            raise _bad(source, name, f"unknown (known: {', '.join(MEASURED)})")
        if not isinstance(v, str) or not v.strip():
            raise _bad(source, name, "must be a non-empty string")
        if len(v) > MEASURED[key]:
            raise _bad(source, name, f"longer than {MEASURED[key]} characters")
        if _CTRL.search(v):
            raise _bad(source, name, "holds a control character")
        out[key] = v
    if out["host"] is None:
        raise _bad(source, "measured.host", "missing: name the machine the bandwidths were "
                                            "measured on (they never carry across machines)")
    if not _HOST.fullmatch(out["host"]):
        raise _bad(source, "measured.host", "must be a host name (letters, digits, . _ -)")
    return out


def _rates(t: dict, source: str) -> dict:
    known = RATES | OPTIONAL_RATES
    out: dict[str, float | None] = {k: None for k in known}
    for key, v in t.items():
        name = f"gb_per_s.{key}"
        if key not in known:
            raise _bad(source, name, f"unknown (known: {', '.join(known)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _bad(source, name, f"must be a number of GB/s, got {type(v).__name__}")
        if not 0 < v <= MAX_RATE:
            raise _bad(source, name, f"must be above 0 and at most {MAX_RATE:g} GB/s, got {v!r}")
        out[key] = float(v)
    for key, what in RATES.items():
        if out[key] is None:
            raise _bad(source, f"gb_per_s.{key}", f"missing: the rate of {what}")
    ceiling, streaming = out["link_ceiling"], out["streaming"]
    if ceiling is not None and streaming is not None and streaming > ceiling:
        raise _bad(source, "gb_per_s.streaming", f"{streaming:g} GB/s is above the "
                                                 f"link_ceiling {ceiling:g} GB/s")
    return out


# rules 2 and 3 ------------------------------------------------------------------------------

def rule2(rates: dict) -> dict:
    """Breakeven reuse of an HBM promotion (module doc), per GB: the transfer's cost (s/GB)
    and the saving of one later use (s/GB)."""
    cost = 1 / rates["streaming"]
    saving = 1 / rates["host_read"] - 1 / rates["hbm"]
    r = cost / saving if saving > 0 else None
    text = (f"promoting an expert to HBM costs {cost * 1e3:.3f} ms per GB (one overlapped "
            f"transfer) and saves {saving * 1e3:.3f} ms per GB on each later use: it repays "
            f"itself after r* = {r:.2f} uses" if r is not None else
            "host reads are no slower than HBM reads here: a promotion never repays itself")
    return {"rule": 2, "breakeven_reuse": r, "transfer_s_per_gb": cost,
            "saving_s_per_gb_per_use": saving, "text": text}


def rule3(rates: dict) -> dict:
    """Direct file-backed reads against overlapped streaming (module doc)."""
    ratio = rates["host_read"] / rates["streaming"]
    gap = 1 - ratio
    text = (f"direct file-backed reads are within {gap * 100:.1f}% of overlapped streaming "
            f"({rates['host_read']:g} vs {rates['streaming']:g} GB/s)" if gap >= 0 else
            f"direct file-backed reads are {-gap * 100:.1f}% faster than overlapped streaming "
            f"({rates['host_read']:g} vs {rates['streaming']:g} GB/s)")
    return {"rule": 3, "gap": gap, "direct_over_streaming": ratio, "text": text}


# the worked sizing example ------------------------------------------------------------------

def _curves(m: dict) -> list[dict]:
    """The capacity matrix's rows as curves: one per (group, mechanism, reclaim), points with
    a retained median, by capacity."""
    curves: dict[tuple, dict] = {}
    for r in m.get("rows", []):
        if r.get("median_s") is None:
            continue
        key = (r["group"], r["mechanism"], r["reclaim"])
        c = curves.setdefault(key, {"group": r["group"], "mechanism": r["mechanism"],
                                    "reclaim": r["reclaim"], "points": []})
        c["points"].append({k: r.get(k) for k in (
            "cell", "capacity_bytes", "median_s", "min_s", "max_s", "n_retained",
            "device_gb_per_iteration")})
    out = list(curves.values())
    for c in out:
        c["points"].sort(key=lambda p: p["capacity_bytes"])
    return sorted(out, key=lambda c: (int(c["group"][1:]), c["mechanism"], c["reclaim"]))


def _device_at(points: list[dict], answer: dict) -> float | None:
    """Device GB per iteration at the answer's capacity: the measured point's, or linear
    between the two measured capacities the answer lies between."""
    by = {p["capacity_bytes"]: p["device_gb_per_iteration"] for p in points}
    cap = answer.get("capacity_bytes")
    if answer.get("status") == "interpolated":
        c0, c1 = answer["between"]
        d0, d1 = by.get(c0), by.get(c1)
        if d0 is None or d1 is None:
            return None
        return d0 + (cap - c0) / (c1 - c0) * (d1 - d0)
    return by.get(cap) if cap is not None else None


def _answer(c: dict, target_s: float | None) -> dict:
    pts = c["points"]
    if target_s is None:
        return {"status": "no_target", "capacity_bytes": None}
    res = stats.interpolate_capacity([(p["capacity_bytes"], p["median_s"]) for p in pts],
                                     target_s)
    res["device_gb_per_iteration"] = _device_at(pts, res)
    used = res.get("between") or ([res["capacity_bytes"]] if res.get("capacity_bytes")
                                  else [])
    res["n"] = [p["n_retained"] for p in pts if p["capacity_bytes"] in used]
    res["upper_bound"] = bool(used) and c["mechanism"] == "balloon"
    return res


def sizing_example(m: dict, target_s: float | None, *,
                   bandwidth_host: str | None = None) -> dict:
    """The worked example over `m`, a capacity matrix as bench.store.queries.matrix returns it
    (rows per group with their summaries, `groups` with each group's key), for a target
    seconds per iteration (None: no DRAM answer, the rest still)."""
    groups = {g["id"]: g for g in m.get("groups", [])}
    curves = []
    for c in _curves(m):
        g = groups.get(c["group"], {})
        top = c["points"][-1]
        tpi = (g.get("workload") or {}).get("tokens_per_iteration")
        c.update(host=g.get("host"), workload=g.get("workload"),
                 fingerprint=g.get("fingerprint"), answer=_answer(c, target_s),
                 largest={"capacity_bytes": top["capacity_bytes"], "n": top["n_retained"],
                          "median_s": top["median_s"],
                          "iterations_per_s": 1 / top["median_s"] if top["median_s"] else None,
                          "seconds_per_accepted_token": top["median_s"] / tpi if tpi else None})
        curves.append(c)
    used = [groups[i] for i in sorted({c["group"] for c in curves}, key=lambda x: int(x[1:]))
            if i in groups]
    warnings = []
    diff = identity.differences(used) if len(used) > 1 else {}
    if diff:
        warnings.append(f"{len(used)} result groups: each curve has its own answer, never "
                        "interpolated across groups that differ in "
                        + identity.describe_differences(diff))
    for h in sorted({c["host"] for c in curves if c["host"]}):
        if bandwidth_host is not None and h != bandwidth_host:
            warnings.append(f"the bandwidths (rules 2 and 3) were measured on {bandwidth_host}, "
                            f"the capacity curves on {h}: they describe different machines")
    return {"target_s": target_s, "curves": curves, "groups": used,
            "not_interpolated_across": diff,
            "status": "ok" if curves else "no_data", "warnings": warnings}


def placement_report(bw: dict, capacity: dict | None = None, target_s: float | None = None
                     ) -> dict[str, Any]:
    """Everything `bench placement` shows: the file's measurement, rules 2 and 3, and with a
    capacity matrix the worked sizing example."""
    return {"bandwidths": bw, "rule2": rule2(bw["gb_per_s"]), "rule3": rule3(bw["gb_per_s"]),
            "sizing": None if capacity is None else
            sizing_example(capacity, target_s, bandwidth_host=bw["measured"]["host"])}


# text ---------------------------------------------------------------------------------------

def _gbytes(n: int | float | None) -> str:
    """Bytes in the paper's decimal units, 3 significant digits: 124 GB, 50.3 MB."""
    if n is None:
        return "-"
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


def _answer_text(a: dict) -> str:
    cap = a.get("capacity_bytes")
    n = "/".join(str(x) for x in a.get("n") or []) or "-"
    bound = ", an upper bound (balloon-conditioned rows)" if a.get("upper_bound") else ""
    dev = a.get("device_gb_per_iteration")
    there = "" if dev is None else f"; device traffic there {dev:.3g} GB/iteration"
    if a["status"] == "interpolated":
        lo, hi = a["between"]
        return (f"about {_gbytes(cap)}, interpolated between {_gbytes(lo)} and {_gbytes(hi)} "
                f"(n={n}){bound}{there}")
    return {"measured": f"{_gbytes(cap)} (a measured point, n={n}){bound}{there}",
            "below_range": f"at most {_gbytes(cap)} (the smallest measured capacity already "
                           f"meets it, n={n}){bound}{there}",
            "unreachable": "not reached even at the largest measured capacity",
            "no_target": "no target given (--target-seconds)",
            "no_data": "no retained runs"}.get(a["status"], a["status"])


def report_lines(rep: dict) -> list[str]:
    """`placement_report` as plain text lines (what `bench placement` prints without --json)."""
    bw, m = rep["bandwidths"], rep["bandwidths"]["measured"]
    where = ", ".join(f"{k} {m[k]}" for k in ("kernel", "boot_id", "date") if m.get(k))
    out = [f"bandwidths: {bw['source']}, measured on {m['host']}"
           + (f" ({where})" if where else ""),
           "  " + ", ".join(f"{k} {v:g} GB/s" for k, v in bw["gb_per_s"].items()
                            if v is not None),
           f"rule 2: {rep['rule2']['text']}", f"rule 3: {rep['rule3']['text']}"]
    s = rep.get("sizing")
    if s is None:
        return out
    target = "no target" if s["target_s"] is None else f"target {s['target_s']:g} s/iteration"
    out.append(f"sizing ({target}):" if s["curves"] else
               f"sizing ({target}): no retained capacity runs (bench results --matrix capacity)")
    for c in s["curves"]:
        top = c["largest"]
        per_tok = top["seconds_per_accepted_token"]
        out.append(f"  {c['group']} {c['mechanism']} {c['reclaim']} on {c['host']}: "
                   + _answer_text(c["answer"]))
        out.append(f"    at the largest capacity {_gbytes(top['capacity_bytes'])} (n={top['n']}): "
                   f"{top['iterations_per_s']:.3g} iterations/s per stream"
                   + ("" if per_tok is None else f", {per_tok:.3g} s per accepted token"))
    out += [f"  {g['id']}: {identity.group_text(g)}" for g in s["groups"]]
    out += [f"warning: {w}" for w in s["warnings"]]
    return out
