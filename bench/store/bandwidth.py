"""Pool-device bandwidth measurements (`bench hosts bandwidth`), stored per host AND boot.

A figure names the host, the boot (boot_id, cmdline, MemTotal) and the host's fingerprint
(kernel, arch, cmdline without mem=/lru_gen toggles, agent hash, controller version) it was
measured under; `bandwidth_of` only ever returns one host's rows, so no number is carried from
one machine (or one boot) to another."""

from __future__ import annotations

from sqlalchemy import select

from sqlalchemy.orm import Session

from bench.store.db import Store, get_or_create
from bench.store.models import Bandwidth, Boot, Fingerprint, Host


def store_bandwidth(store: Store, m: dict) -> int:
    """m: the result of bench.execute.bandwidth.measure_bandwidth. Returns the row id."""
    with store.session() as s, s.begin():
        host = get_or_create(s, Host, name=m["host"])
        boot = get_or_create(s, Boot, dict(cmdline=m["cmdline"],
                                           mem_total_bytes=m.get("mem_total_bytes"),
                                           mglru_mask=m.get("mglru")),
                             host_id=host.id, boot_id=m["boot_id"])
        fp = m["fingerprint"]
        fp_row = get_or_create(s, Fingerprint, {"data": fp}, host_id=host.id,
                               digest=fp["digest"])
        row = Bandwidth(host_id=host.id, boot_ref=boot.id, fingerprint_id=fp_row.id,
                        device=m.get("device"), pool_dir=m["pool_dir"], threads=m["threads"],
                        bytes_per_pass=m["bytes_per_pass"], cold_seconds=m["cold"]["seconds"],
                        cold_device_bytes=m["cold"]["device_bytes"],
                        warm_seconds=m["warm"]["seconds"],
                        warm_device_bytes=m["warm"]["device_bytes"], data=m)
        s.add(row)
        s.flush()
        return row.id


def bandwidth_of(store: Store, host: str, boot_id: str | None = None) -> list[dict]:
    """One host's measurements (of one boot when given), newest first."""
    with store.session() as s:
        q = (select(Bandwidth, Boot.boot_id, Fingerprint.digest)
             .join(Host, Bandwidth.host_id == Host.id)
             .join(Boot, Bandwidth.boot_ref == Boot.id)
             .outerjoin(Fingerprint, Bandwidth.fingerprint_id == Fingerprint.id)
             .where(Host.name == host).order_by(Bandwidth.id.desc()))
        if boot_id is not None:
            q = q.where(Boot.boot_id == boot_id)
        out = []
        for bw, bid, digest in s.execute(q):
            out.append({"id": bw.id, "host": host, "boot_id": bid, "fingerprint": digest,
                        "measured_at": bw.measured_at.isoformat(), "device": bw.device,
                        "pool_dir": bw.pool_dir, "threads": bw.threads,
                        "bytes_per_pass": bw.bytes_per_pass,
                        "cold_seconds": bw.cold_seconds, "cold_device_bytes": bw.cold_device_bytes,
                        "warm_seconds": bw.warm_seconds, "warm_device_bytes": bw.warm_device_bytes})
        return out


def device_bandwidth(s: Session, host_id: int, device: str | None) -> dict | None:
    """The fastest cold read of `device` any `bench hosts bandwidth` measured on this host (any
    boot: a reboot does not change the device), as the throughput rule's ctx entry
    {bytes_per_s, device, measured_at, id}; None when none was measured on that device."""
    if not device:
        return None
    best, fastest = None, 0.0
    for bw in s.scalars(select(Bandwidth).where(Bandwidth.host_id == host_id,
                                                Bandwidth.device == device)):
        if not bw.cold_device_bytes or not bw.cold_seconds or bw.cold_seconds <= 0:
            continue
        rate = bw.cold_device_bytes / bw.cold_seconds
        if rate > fastest:
            best, fastest = bw, rate
    if best is None:
        return None
    return {"bytes_per_s": fastest, "device": device, "id": best.id,
            "measured_at": best.measured_at.isoformat() if best.measured_at else None}
