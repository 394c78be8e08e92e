"""What a read leaves out, counted, so that the command can say so: runs of `bench demo`
campaigns, which results views leave out unless asked (bench.store.queries.load_runs; issue 23:
after `bench demo` every read command printed an empty table and said nothing). Read-only."""

from __future__ import annotations

from sqlalchemy import func, or_, select

from bench.matrix.cells import parse_cell
from bench.store.db import Store
from bench.store.spec_parts import CAMPAIGNS, RUNS, cells_hosts

DEMO_FIX = "--include-demo shows them (or --campaign ID, one demo campaign)"


def demo_note(n: int) -> str:
    """The words for n runs left out as demo runs (hidden_demo_runs)."""
    return f"{n} run{'' if n == 1 else 's'} of `bench demo` campaigns left out"


def hidden_demo_runs(store: Store, *, cells: tuple[str, ...] = (), host: str | None = None,
                     campaign: str | None = None, include_demo: bool = False) -> int:
    """How many ingested runs a read left out because their campaign is a demo one (load_runs'
    rule: none when `include_demo` or when `campaign` names one), of these `cells` (any, when
    empty) on `host`: what a read command tells the user it hid. Runs of hidden campaigns are
    not counted: `bench campaigns hide` hid them on purpose."""
    if include_demo or campaign:
        return 0
    run, camp = RUNS.c, CAMPAIGNS.c
    q = (select(func.count()).select_from(RUNS.join(CAMPAIGNS, run.campaign_id == camp.id))
         .where(camp.demo.is_(True), or_(camp.hidden.is_(None), camp.hidden.is_(False)),
                run.bundle_digest.is_not(None)))
    with store.engine.connect() as s:
        ids, hosts = cells_hosts(s)
        if cells:
            names = {parse_cell(c).name for c in cells}
            q = q.where(run.cell_id.in_([i for i, c in ids.items() if c[0] in names]))
        if host:
            q = q.where(run.host_id.in_([i for i, h in hosts.items() if h == host]))
        return int(s.execute(q).scalar_one())
