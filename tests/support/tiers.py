"""Run the test suite one tier at a time (python -m tests.support.tiers [--tiers=a,b] [PYTEST
ARGS]), as tests/run does: each tier is its own pytest process, whose output passes through.
At the end: each tier's wall time, the 15 slowest tests of all tiers (pytest's --durations
lines, merged), and one closing line in pytest's own form summing every tier's counts.

A tier that fails does not stop the others (one run shows every failure); the exit status is
1 when any failed. A tier that collects no test is a failure, unless the arguments select
tests (-k, -m, ...), where only a run in which no tier selected any is. Arguments naming
paths (tests/unit/test_cli.py, a node id) run those in one pytest process instead."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

TIERS = ("unit", "local", "fleet", "vm", "twin")
SLOWEST = 15
NO_TESTS = 5                                            # pytest's exit code for "none collected"
SELECTORS = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--sw", "--stepwise")
# the order pytest's closing line names counts in (others follow, alphabetically)
ORDER = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "errors")
_COUNT = re.compile(r"(\d+) (\w+)")
_CLOSING = re.compile(r"^=*\s*(.*?) in (\d+(?:\.\d+)?)s\b")
_DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S.*)$")


def counts_of(line: str) -> dict[str, int] | None:
    """The counts of a pytest closing line ("3 passed, 1 warning in 2.10s"), plurals folded
    (warning -> warnings, error -> errors); None for any other line."""
    m = _CLOSING.match(line.strip())
    if not m:
        return None
    found = _COUNT.findall(m.group(1))
    if not found and m.group(1) != "no tests ran":
        return None
    out: dict[str, int] = {}
    for n, kind in found:
        kind = {"warning": "warnings", "error": "errors"}.get(kind, kind)
        out[kind] = out.get(kind, 0) + int(n)
    return out


def closing_line(counts: dict[str, int], seconds: float) -> str:
    """pytest's closing line for these counts: '1 failed, 9 passed, 2 skipped in 70.00s
    (0:01:10)'."""
    kinds = [k for k in ORDER if counts.get(k)] + sorted(k for k in counts if k not in ORDER
                                                         and counts[k])
    parts = []
    for k in kinds:
        n = counts[k]
        parts.append(f"{n} {k[:-1] if n == 1 and k in ('warnings', 'errors') else k}")
    took = f"{seconds:.2f}s"
    if seconds > 60:
        s = int(seconds)
        took += f" ({s // 3600}:{s // 60 % 60:02d}:{s % 60:02d})"
    return f"{', '.join(parts) or 'no tests ran'} in {took}"


def run_pytest(args: list[str]) -> tuple[int, list[str]]:
    """pytest with args in a child process, its output passed through and kept."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line.rstrip("\n"))
    return proc.wait(), lines


def stray_test_files(root: Path, tiers) -> list[str]:
    """Test files no tier runs (a new folder beside the tiers would never run in CI)."""
    found = {*root.glob("**/test_*.py"), *root.glob("**/*_test.py")}
    return sorted(str(p) for p in found if p.relative_to(root).parts[0] not in tiers)


def main(argv: list[str]) -> int:
    tiers: tuple[str, ...] = TIERS
    if argv and argv[0].startswith("--tiers="):
        tiers = tuple(argv.pop(0).removeprefix("--tiers=").split(","))
    paths = [a for a in argv if not a.startswith("-") and Path(a.split("::")[0]).exists()]
    selecting = any(a.split("=")[0] in SELECTORS for a in argv)
    if paths:
        runs = [("selected", argv)]
    else:
        stray = stray_test_files(Path("tests"), tiers) if tiers == TIERS else []
        if stray:
            print(f"tests/run: test files outside the tiers {', '.join(TIERS)}: "
                  f"{' '.join(stray)}", file=sys.stderr)
            return 1
        runs = [(t, [*argv, f"--durations={SLOWEST}", f"tests/{t}"]) for t in tiers]
    total: dict[str, int] = {}
    walls, slow, failed, none_collected = [], [], [], []
    start = time.monotonic()
    for name, args in runs:
        print(f"\n----- tests/run: tier {name} -----", flush=True)
        t0 = time.monotonic()
        rc, lines = run_pytest(args)
        walls.append((name, time.monotonic() - t0, rc))
        counts = next((c for c in map(counts_of, reversed(lines)) if c is not None), {})
        for k, n in counts.items():
            total[k] = total.get(k, 0) + n
        slow += [(float(m[1]), m[2], m[3]) for m in map(_DURATION.match, lines) if m]
        if rc == NO_TESTS:
            none_collected.append(name)
            if selecting:
                continue
        if rc != 0:
            failed.append(name)
            if not counts.get("failed") and not counts.get("errors"):
                total["errors"] = total.get("errors", 0) + 1     # a tier that failed whole
    if selecting and len(none_collected) == len(runs):
        failed.append("all (no tier selected a test)")
        total["errors"] = total.get("errors", 0) + 1
    if len(runs) > 1:                   # one run: pytest just printed them
        print(f"\n----- tests/run: {SLOWEST} slowest (all tiers) -----")
        for secs, when, test in sorted(slow, reverse=True)[:SLOWEST]:
            print(f"{secs:.2f}s {when:<8} {test}")
    print("----- tests/run: tier wall times -----")
    for name, secs, rc in walls:
        verdict = "ok" if rc == 0 else "nothing selected" if name not in failed else \
            "FAILED (collected no tests)" if rc == NO_TESTS else f"FAILED (exit {rc})"
        print(f"{name:<9} {secs:8.1f}s  {verdict}")
    if failed:
        print(f"tests/run: failed: {', '.join(failed)}")
    print(closing_line(total, time.monotonic() - start), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
