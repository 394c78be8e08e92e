"""SQLAlchemy 2 models of the results database. migrations/ must match them exactly (a test
runs alembic's compare_metadata against a database built by the migrations)."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer,
                        LargeBinary, MetaData, String, Text, UniqueConstraint, false, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {"ix": "ix_%(table_name)s_%(column_0_N_name)s",
          "uq": "uq_%(table_name)s_%(column_0_N_name)s",
          "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
          "pk": "pk_%(table_name)s"}


def now() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Campaign(Base):
    __tablename__ = "campaigns"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    matrix: Mapped[str | None] = mapped_column(String(64))
    workload: Mapped[dict | None] = mapped_column(JSON)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16), default="planned")   # a campaign's
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    note: Mapped[str | None] = mapped_column(Text)
    # made by `bench demo`: left out of results unless asked (migration 0005)
    demo: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # `bench campaigns hide`: kept, left out of listings and results unless asked
    hidden: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Host(Base):
    __tablename__ = "hosts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)


class Fingerprint(Base):
    __tablename__ = "fingerprints"
    __table_args__ = (UniqueConstraint("host_id", "digest"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    digest: Mapped[str] = mapped_column(String(64))
    data: Mapped[dict] = mapped_column(JSON)


class CampaignHost(Base):
    """The reference fingerprint of a host inside a campaign (its first run's, or set by the
    executor before the first run)."""
    __tablename__ = "campaign_hosts"
    campaign_id: Mapped[str] = mapped_column(ForeignKey("campaigns.id"), primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"), primary_key=True)
    fingerprint_id: Mapped[int | None] = mapped_column(ForeignKey("fingerprints.id"))


class Boot(Base):
    __tablename__ = "boots"
    __table_args__ = (UniqueConstraint("host_id", "boot_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    boot_id: Mapped[str] = mapped_column(String(64))
    cmdline: Mapped[str] = mapped_column(Text)
    mem_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    mglru_mask: Mapped[str | None] = mapped_column(String(16))


class Cell(Base):
    __tablename__ = "cells"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(96), unique=True)
    capacity_bytes: Mapped[int] = mapped_column(BigInteger)
    mechanism: Mapped[str] = mapped_column(String(16))
    reclaim: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16))
    hints: Mapped[str | None] = mapped_column(String(32))
    delivery: Mapped[str | None] = mapped_column(String(16))


class Workload(Base):
    """A stored run's workload identity (bench.judge.identity.workload_of of its spec, migration
    0006): `key` is the sha256 of the identity's JSON (sorted keys, the shown trace name
    included), `digest` the short digest that groups compare and --workload matches."""
    __tablename__ = "workloads"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    digest: Mapped[str] = mapped_column(String(16), index=True)
    data: Mapped[dict] = mapped_column(JSON)


# What a results view reads of every ingested run (bench.store.queries.load_runs): a partial
# covering index, so a view at 100,000 runs reads this index and not the table, whose rows
# carry each run's spec.json (migration 0006).
RESULTS_INDEX_COLUMNS = (
    "cell_id", "host_id", "workload_id", "fingerprint_id", "campaign_id", "retained", "id",
    "run_id", "position", "repetition", "state", "nominal_miss_bytes_per_iteration",
    "iterations", "iteration_median_s", "iteration_min_s", "iteration_max_s", "device_bytes",
    "device_bytes_per_iteration", "logical_bytes_per_iteration", "served_fraction",
    "scan_steal", "cgroup_scan_steal", "locked_fraction", "mem_total_bytes",
    "mglru_loop_entry", "mglru_end", "bundle_digest")
RESULTS_INDEX_WHERE = "bundle_digest IS NOT NULL"


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_cell_retained", "cell_id", "retained"),
                      Index("ix_runs_campaign_position", "campaign_id", "position"),
                      Index("ix_runs_results", *RESULTS_INDEX_COLUMNS,
                            sqlite_where=text(RESULTS_INDEX_WHERE),
                            postgresql_where=text(RESULTS_INDEX_WHERE)))
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), unique=True)
    campaign_id: Mapped[str | None] = mapped_column(ForeignKey("campaigns.id"))
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id"))
    boot_ref: Mapped[int | None] = mapped_column(ForeignKey("boots.id"))
    fingerprint_id: Mapped[int | None] = mapped_column(ForeignKey("fingerprints.id"))
    # workload identity of `spec` (Workload; bench.store.workloads keeps the two in step). No
    # foreign key: SQLite drops a referencing column only by copying the table (0006)
    workload_id: Mapped[int | None] = mapped_column(Integer)
    position: Mapped[int | None] = mapped_column(Integer)
    repetition: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="planned")   # bench.store.states
    spec: Mapped[dict | None] = mapped_column(JSON)
    bundle_digest: Mapped[str | None] = mapped_column(String(64))
    runner_ok: Mapped[bool | None] = mapped_column(Boolean)
    runner_reason: Mapped[str | None] = mapped_column(Text)
    retained: Mapped[bool | None] = mapped_column(Boolean)
    ingested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # per-run metrics (bench.judge.measured.metrics), denormalised so results need no joins
    iterations: Mapped[int | None] = mapped_column(Integer)
    iteration_median_s: Mapped[float | None] = mapped_column(Float)
    iteration_min_s: Mapped[float | None] = mapped_column(Float)
    iteration_max_s: Mapped[float | None] = mapped_column(Float)
    device_bytes: Mapped[int | None] = mapped_column(BigInteger)
    device_bytes_per_iteration: Mapped[float | None] = mapped_column(Float)
    logical_bytes_per_iteration: Mapped[float | None] = mapped_column(Float)
    nominal_miss_bytes_per_iteration: Mapped[float | None] = mapped_column(Float)
    nominal_source: Mapped[str | None] = mapped_column(String(256))
    served_fraction: Mapped[float | None] = mapped_column(Float)
    scan_steal: Mapped[float | None] = mapped_column(Float)
    cgroup_scan_steal: Mapped[float | None] = mapped_column(Float)
    locked_fraction: Mapped[float | None] = mapped_column(Float)
    mem_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    mglru_loop_entry: Mapped[bool | None] = mapped_column(Boolean)
    mglru_end: Mapped[bool | None] = mapped_column(Boolean)


class RawFile(Base):
    __tablename__ = "raw_files"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    path: Mapped[str] = mapped_column(String(512), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    codec: Mapped[str] = mapped_column(String(8))
    data: Mapped[bytes] = mapped_column(LargeBinary)


class CounterDelta(Base):
    __tablename__ = "counter_deltas"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    interval: Mapped[str] = mapped_column(String(16), primary_key=True)
    source: Mapped[str] = mapped_column(String(16), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    start: Mapped[int] = mapped_column(BigInteger)
    end: Mapped[int] = mapped_column(BigInteger)
    delta: Mapped[int] = mapped_column(BigInteger)


class Iteration(Base):
    __tablename__ = "iterations"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    pass_no: Mapped[int] = mapped_column(Integer, primary_key=True)
    iter_no: Mapped[int] = mapped_column(Integer, primary_key=True)
    wall_ns: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    reads: Mapped[int] = mapped_column(Integer)
    arena_hits: Mapped[int | None] = mapped_column(Integer)


class TimelineSample(Base):
    __tablename__ = "timeline"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    mono_ns: Mapped[int] = mapped_column(BigInteger)
    phase: Mapped[str] = mapped_column(String(16))
    memory_current: Mapped[int | None] = mapped_column(BigInteger)
    cached: Mapped[int | None] = mapped_column(BigInteger)
    mem_available: Mapped[int | None] = mapped_column(BigInteger)


class AgentSummary(Base):
    __tablename__ = "agent_summaries"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    ok: Mapped[bool | None] = mapped_column(Boolean)
    mode: Mapped[str | None] = mapped_column(String(16))
    arena_bytes: Mapped[int | None] = mapped_column(BigInteger)
    preload_bytes: Mapped[int | None] = mapped_column(BigInteger)
    vmlck_bytes: Mapped[int | None] = mapped_column(BigInteger)
    vmlck_end_bytes: Mapped[int | None] = mapped_column(BigInteger)
    hints_submitted: Mapped[int | None] = mapped_column(BigInteger)
    hints_overwritten: Mapped[int | None] = mapped_column(BigInteger)
    hints_completed: Mapped[int | None] = mapped_column(BigInteger)
    data: Mapped[dict] = mapped_column(JSON)


class Verdict(Base):
    __tablename__ = "verdicts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    rule: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    passed: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str] = mapped_column(Text)
    current: Mapped[bool] = mapped_column(Boolean, default=True)
    evaluated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class JournalEntry(Base):
    __tablename__ = "journal"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    t: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    campaign_id: Mapped[str | None] = mapped_column(ForeignKey("campaigns.id"), index=True)
    run_ref: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict | None] = mapped_column(JSON)


class Bandwidth(Base):
    """Raw read bandwidth of a host's pool device, cold (after drop_caches) and warm (the same
    files again, from the page cache), measured by the agent (`bench hosts bandwidth`). Always
    tied to the host and the boot it was measured in, never carried to another machine."""
    __tablename__ = "bandwidth"
    __table_args__ = (Index("ix_bandwidth_host_boot", "host_id", "boot_ref"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    boot_ref: Mapped[int] = mapped_column(ForeignKey("boots.id"))
    fingerprint_id: Mapped[int | None] = mapped_column(ForeignKey("fingerprints.id"))
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    device: Mapped[str | None] = mapped_column(String(64))
    pool_dir: Mapped[str] = mapped_column(Text)
    threads: Mapped[int] = mapped_column(Integer)
    bytes_per_pass: Mapped[int] = mapped_column(BigInteger)
    cold_seconds: Mapped[float] = mapped_column(Float)
    cold_device_bytes: Mapped[int | None] = mapped_column(BigInteger)
    warm_seconds: Mapped[float] = mapped_column(Float)
    warm_device_bytes: Mapped[int | None] = mapped_column(BigInteger)
    data: Mapped[dict] = mapped_column(JSON)


class EngineRun(Base):
    """What one end-to-end engine run measured (docs/engine.md, bench.judge.engine_gates.facts): one
    row per engine run, next to its runs row. Times in seconds on the host's monotonic clock;
    steady = wall - the cold load the engine reported. `pair_index`/`pair_order`/`pair_position`
    place the run in its balanced pair; `output_sha256` is the SHA-256 of the token ID
    sequence."""
    __tablename__ = "engine_runs"
    __table_args__ = (Index("ix_engine_runs_prompt_pair", "prompt", "pair_index"),)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    prompt: Mapped[str] = mapped_column(String(32))
    policy: Mapped[str] = mapped_column(String(16))
    pair_index: Mapped[int | None] = mapped_column(Integer)
    pair_order: Mapped[str | None] = mapped_column(String(16))
    pair_position: Mapped[int | None] = mapped_column(Integer)
    wall_s: Mapped[float | None] = mapped_column(Float)
    load_s: Mapped[float | None] = mapped_column(Float)
    steady_s: Mapped[float | None] = mapped_column(Float)
    backend_found: Mapped[bool] = mapped_column(Boolean)
    backend_line: Mapped[str | None] = mapped_column(Text)
    tokens: Mapped[int | None] = mapped_column(Integer)
    output_sha256: Mapped[str | None] = mapped_column(String(64))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[int | None] = mapped_column(Integer)
    timed_out: Mapped[bool] = mapped_column(Boolean)
    device_bytes: Mapped[int | None] = mapped_column(BigInteger)
    config_sha256: Mapped[str | None] = mapped_column(String(64))
    data: Mapped[dict] = mapped_column(JSON)
