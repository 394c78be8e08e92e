"""Example facts files for planning without the hosts (`bench hosts facts --example NAME`, then
`bench schedule --dry-run --facts FILE`): bench/data/facts/NAME.json holds one host's facts as
the probe lays them out, and what they describe (`about`). The file printed is the object form
`bench schedule --facts` reads ({host: facts}), one copy per host name, with the description
as its `_about` key (keys starting with "_" are no host names: the reader skips them). Pure but
for reading the packaged file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources

from bench.errors import InputError

EXAMPLES = ("gh200",)
DEFAULT_HOSTS = ("gh200-a", "gh200-b")     # the example inventory's hosts (hosts/, hosts init)


def example_facts(name: str, hosts: Sequence[str] = DEFAULT_HOSTS) -> dict:
    """The facts file of example `name` for `hosts`: {"_about": ..., host: facts, ...}."""
    if name not in EXAMPLES:
        raise InputError(f"no example facts named {name!r}", hint="examples: "
                         + ", ".join(EXAMPLES) + "; for your own hosts: `bench hosts probe "
                         "--json > FILE`")
    if not hosts:
        raise InputError("name at least one host to write the example's facts for")
    doc = json.loads(resources.files("bench").joinpath("data", "facts", f"{name}.json")
                     .read_text(encoding="utf-8"))
    out: dict = {"_about": doc["about"]}
    for h in hosts:
        out[h] = json.loads(json.dumps(doc["facts"]))     # each host its own copy
    return out
