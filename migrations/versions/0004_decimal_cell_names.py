"""cell names in the paper's decimal units

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:00:00

Until 0003, cell names were lower case and read K/M/G/T as binary (`64g-balloon-mglru` was
64 GiB), while bench now reads `64G` as 64 x 10^9 bytes and writes binary capacities as
`64Gi` (bench/units.py, bench/matrix/cells.py). So that a stored name keeps meaning what was
measured, this revision renames, without touching any capacity_bytes:

- cells: every replay cell gets the canonical name of its stored capacity_bytes and axes
  (`64g-balloon-mglru`, 64 GiB -> `64Gi-balloon-mglru`; `768m-...` -> `768Mi-...`). Should
  two rows end on one name, they are merged into the lowest id (the row already named so, if
  any) and their runs repointed to it, so names stay unique. Engine cells (`e2e-...`) keep
  theirs.
- runs.spec: the `cell` of each stored spec becomes its run's new cell name (a run started
  before the upgrade is re-sent with that spec on resume, and the runner reads names the new
  way). The raw spec.json in raw_files stays as the host wrote it: ingest reads such legacy
  names with their binary capacity (bench.matrix.cells.legacy_cell).
- journal: the campaign records (`plan` entries: each run's cell, its candidates' cells and the
  boot's `mem`/`label` text, from its mem_bytes) and `reassign` entries' cell, so that resuming
  an old campaign plans the same capacities. Journal messages are history and stay as written.

The sizes are formatted here with a frozen copy of the rules, not with bench's code, so this
revision means the same thing whatever bench becomes. Downgrade writes the old spellings back
(binary, lower case; a decimal capacity made since becomes e.g. `62500000k`); merges are not
undone.
"""
import re

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

_DECIMAL = (("T", 10 ** 12), ("G", 10 ** 9), ("M", 10 ** 6), ("K", 10 ** 3))
_BINARY = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))
_OLD = (("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10))
_OLD_NAME = re.compile(r"^([0-9]+)([kmgt]?)-(.+)$")
_NEW_NAME = re.compile(r"^([0-9]+)((?:[KMGT]i?)?)-(.+)$")

cells = sa.table("cells", sa.column("id", sa.Integer), sa.column("name", sa.String),
                 sa.column("capacity_bytes", sa.BigInteger), sa.column("mechanism", sa.String),
                 sa.column("reclaim", sa.String), sa.column("mode", sa.String),
                 sa.column("hints", sa.String), sa.column("delivery", sa.String))
runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("cell_id", sa.Integer),
                sa.column("spec", sa.JSON))
journal = sa.table("journal", sa.column("id", sa.Integer), sa.column("kind", sa.String),
                   sa.column("data", sa.JSON))


def _new_size(n):
    for table in (_DECIMAL, _BINARY):
        for suffix, unit in table:
            if n and n % unit == 0:
                return f"{n // unit}{suffix}"
    return str(n)


def _old_size(n):
    for suffix, unit in _OLD:
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def _new_name_of(name):
    """An old (binary, lower-case) replay cell name in the new spelling; others unchanged."""
    m = _OLD_NAME.match(name) if isinstance(name, str) else None
    if not m:
        return name
    return f"{_new_size(int(m.group(1)) * dict(_OLD).get(m.group(2), 1))}-{m.group(3)}"


def _old_name_of(name):
    """A new replay cell name in the old spelling (downgrade); others unchanged."""
    m = _NEW_NAME.match(name) if isinstance(name, str) else None
    if not m:
        return name
    unit = dict(_DECIMAL + _BINARY).get(m.group(2), 1)
    return f"{_old_size(int(m.group(1)) * unit)}-{m.group(3)}"


def _name(row, size):
    """The name of a cells row from its stored axes (replay cells), spelled with `size`."""
    parts = [size(row.capacity_bytes), row.mechanism, row.reclaim]
    if row.mode != "pagecache":
        parts.append(row.mode)
    if row.hints is not None:
        parts += [row.hints, row.delivery]
    return "-".join(parts)


def _rename_cells(conn, size):
    """Rename every replay cell to its name spelled with `size`, merging rows that meet on a
    name (runs repointed to the survivor). Returns {old name: new name} of renamed rows."""
    rows = conn.execute(sa.select(cells).order_by(cells.c.id)).all()
    groups = {}
    for row in rows:
        if row.name.startswith("e2e-") or row.capacity_bytes <= 0:
            continue
        groups.setdefault(_name(row, size), []).append(row)
    renamed, moving = {}, []
    for target, members in groups.items():
        keep = next((r for r in members if r.name == target), members[0])
        for r in members:
            renamed[r.name] = target
            if r.id != keep.id:
                conn.execute(runs.update().where(runs.c.cell_id == r.id).values(cell_id=keep.id))
                conn.execute(cells.delete().where(cells.c.id == r.id))
        if keep.name != target:
            moving.append((keep.id, target))
    for cid, _ in moving:       # two steps, so that no rename meets a name not yet moved
        conn.execute(cells.update().where(cells.c.id == cid).values(name=f"~0004~{cid}"))
    for cid, target in moving:
        conn.execute(cells.update().where(cells.c.id == cid).values(name=target))
    return renamed


def _rewrite_specs(conn):
    """Each stored spec's cell is its run's cell name (after the rename)."""
    names = dict(conn.execute(sa.select(cells.c.id, cells.c.name)).all())
    for rid, cell_id, spec in conn.execute(sa.select(runs.c.id, runs.c.cell_id, runs.c.spec)):
        if isinstance(spec, dict) and "cell" in spec and spec["cell"] != names.get(cell_id):
            conn.execute(runs.update().where(runs.c.id == rid)
                         .values(spec={**spec, "cell": names[cell_id]}))


def _boot(boot, size):
    if not isinstance(boot, dict) or not boot.get("mem_bytes"):
        return boot
    mem = size(int(boot["mem_bytes"]))
    label = " ".join([f"mem={mem}"] + [p for p in str(boot.get("label", "")).split()
                                       if not p.startswith("mem=")])
    return {**boot, "mem": mem, "label": label}


def _record(rec, rename, size):
    """A campaign record (journal `plan` data) with its cells and boot texts respelled."""
    runs_ = {}
    for rid, r in (rec.get("runs") or {}).items():
        if not isinstance(r, dict):
            runs_[rid] = r
            continue
        cands = [{**c, "cell": rename(c.get("cell")), "boot": _boot(c.get("boot"), size)}
                 if isinstance(c, dict) else c for c in r.get("candidates") or []]
        runs_[rid] = {**r, "cell": rename(r.get("cell")), "boot": _boot(r.get("boot"), size),
                      "candidates": cands}
    return {**rec, "runs": runs_}


def _rewrite_journal(conn, rename, size):
    q = sa.select(journal.c.id, journal.c.kind, journal.c.data).where(
        journal.c.kind.in_(("plan", "reassign")))
    for jid, kind, data in conn.execute(q).all():
        if not isinstance(data, dict):
            continue
        new = _record(data, rename, size) if kind == "plan" else {
            **data, "cell": rename(data.get("cell"))}
        if new != data:
            conn.execute(journal.update().where(journal.c.id == jid).values(data=new))


def upgrade() -> None:
    conn = op.get_bind()
    renamed = _rename_cells(conn, _new_size)
    _rewrite_specs(conn)
    _rewrite_journal(conn, lambda n: renamed.get(n) or _new_name_of(n), _new_size)


def downgrade() -> None:
    conn = op.get_bind()
    renamed = _rename_cells(conn, _old_size)
    _rewrite_specs(conn)
    # the old boot texts had the suffix upper case (102G), the old cell names lower case
    _rewrite_journal(conn, lambda n: renamed.get(n) or _old_name_of(n),
                     lambda n: _old_size(n).upper())
