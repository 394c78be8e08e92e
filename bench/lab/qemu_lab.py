"""What the two qemu labs (bench.lab.vm, x86_64; bench.lab.twin, aarch64) share around their
guests: the state file in the lab's state directory, the known_hosts that records the image's
host key at each guest's port, the post-mortem when a guest does not come up, the removal of
the runtime files, the SSH look at a guest for `lab_status`, and the command line
`python3 -m bench.lab.vm|twin up|down|status|build|power-cycle NAME`."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from bench.errors import BenchError

Log = Callable[[str], None]
# a command of the lab's command line: (its arguments, a logger) -> what it prints
Command = Callable[[argparse.Namespace, Log], object]


def load_state(sd: Path) -> dict:
    f = sd / "state.json"
    return json.loads(f.read_text()) if f.exists() else {"guests": {}}


def save_state(sd: Path, st: dict, *, private: bool = False) -> None:
    """Replace the state file at once (a temp file renamed over it); `private`: mode 0600 from
    its creation on (the twin's holds the BMC passwords)."""
    sd.mkdir(parents=True, exist_ok=True)
    tmp = sd / "state.tmp"
    if private:
        tmp.touch(mode=0o600)
    tmp.write_text(json.dumps(st, indent=2) + "\n")
    tmp.replace(sd / "state.json")


def known_hosts_line(port: int, host_pub: str) -> str:
    kind, key = host_pub.split()[:2]
    return f"[127.0.0.1]:{port} {kind} {key}\n"


def write_known_hosts(kh: Path, guests: Iterable[dict], host_pub: str) -> None:
    """Every guest answers with the image's host key, each on its own forwarded port."""
    kh.write_text("".join(known_hosts_line(g["port"], host_pub) for g in guests))


def keep_consoles(sd: Path, guests: Iterable[dict]) -> None:
    """Copy each guest's console log beside the state (lab_down removes the guest's
    directory) for the post-mortem of a lab that did not come up."""
    for g in guests:
        shutil.copyfile(g["console"], sd / f"failed-{g['name']}-console.log")


def remove_runtime_files(sd: Path) -> None:
    shutil.rmtree(sd / "hosts", ignore_errors=True)
    for f in ("known_hosts", "state.json"):
        (sd / f).unlink(missing_ok=True)


def ssh_look(transport_for: Callable, g: dict, argv: list[str], timeout: float) -> dict:
    """{ssh: ok, detail: what argv printed on the guest, on one line} or {ssh: error: ...}
    (reaching the guest's transport included)."""
    try:
        r = transport_for(g).run(argv, timeout=timeout)
    except BenchError as exc:
        return {"ssh": f"error: {exc}"}
    return {"ssh": "ok", "detail": " ".join(r.stdout.split())}


def shared_commands(lab_down: Callable[..., list[str]], lab_status: Callable[[], list[dict]],
                    build_image: Callable[..., dict]) -> dict[str, Command]:
    """down, status and build, the same in both labs."""
    return {"down": lambda a, tell: json.dumps(lab_down(log=tell)),
            "status": lambda a, tell: json.dumps(lab_status(), indent=2),
            "build": lambda a, tell: json.dumps(build_image(log=tell), indent=2)}


def lab_main(prog: str, argv: list[str] | None, commands: Mapping[str, Command],
             options: Callable[[dict[str, argparse.ArgumentParser]], None] | None = None) -> int:
    """Parse argv into one of `commands` (power-cycle takes the guest's NAME; `options` adds
    a lab's own), run it and print what it returns; a BenchError is one line and its exit
    code."""
    ap = argparse.ArgumentParser(prog=prog)
    sub = ap.add_subparsers(dest="cmd", required=True)
    parsers = {c: sub.add_parser(c) for c in commands}
    parsers["power-cycle"].add_argument("name")
    if options is not None:
        options(parsers)
    a = ap.parse_args(argv)

    def tell(m: str) -> None:
        print(m, file=sys.stderr)
    try:
        print(commands[a.cmd](a, tell))
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
