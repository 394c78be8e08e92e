"""The host lock's owner record (bench.hosts.lock): written as one JSON line by the holder,
read back from an untrusted host file, typed and bounded, shown as one printable line."""

from __future__ import annotations

import json
import os
import socket

from bench.hosts.lock import Owner, default_owner, describe_holder, parse_owner, shown


def test_the_owner_a_campaign_writes_reads_back_as_the_campaign_and_its_controller():
    text = default_owner("bench campaign night-3", campaign="night-3")
    assert "\n" not in text and len(text) < 400
    o = parse_owner(text)
    assert o is not None and o.campaign == "night-3" and o.pid == os.getpid()
    assert o.controller == socket.gethostname() and o.purpose == "bench campaign night-3"
    assert o.describe() == (f"campaign night-3 (controller {socket.gethostname()}, pid "
                            f"{os.getpid()}, since {o.since})")
    plain = parse_owner(default_owner("bench run r1"))
    assert plain is not None and plain.campaign is None
    assert plain.describe().startswith("bench run r1 (controller ")


def test_wrong_types_and_hostile_text_are_typed_away_and_shown_as_text():
    o = parse_owner(json.dumps({"controller": 5, "pid": True, "since": ["x"],
                                "campaign": {"a": 1}, "purpose": "p"}))
    assert o == Owner("?", None, "?", "p", None)
    assert o.describe() == "p (controller ?, since ?)"
    assert parse_owner(json.dumps({"pid": -4})) == Owner("?", None, "?", "", None)
    assert parse_owner("[1, 2]") is None and parse_owner("") is None
    assert parse_owner("x" * 100_000) is None
    o = parse_owner(json.dumps({"controller": "h\x1b[2J\n", "pid": 3, "since": "t",
                                "campaign": "[red]c" + "z" * 500}))
    d = o.describe() if o else ""
    assert "\x1b" not in d and "\n" not in d and len(d) < 250, d
    assert d.startswith("campaign [red]c") and "controller h?[2J, pid 3" in d
    assert describe_holder("") == "unknown"
    assert describe_holder("old\tformat line\n") == "old?format line"
    assert len(shown("y" * 1000)) == 200 and shown("y" * 1000).endswith("...")
