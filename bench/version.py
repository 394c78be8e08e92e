"""The controller's version as runs record it (spec.json `controller_version`, the fingerprint):
the package version plus a digest of the controller's source, `0.1.0+src.<12 hex digits>`, so
a changed controller is a changed version even when nobody bumps `bench.__version__` (which
stays the package version, as `bench --version` prints it).

The digest is sha256 over every `*.py` file of the installed package, in byte order of their
names relative to the package (`cli/app.py`, `agents/hostrunner/run.py`, ...): for each, the
name, a NUL byte, the file's bytes and a NUL byte. The packages an editable checkout maps from
outside `bench/` (pyproject's package-dir: `agents/`, `migrations/`) are found where Python
imports them from and named as a wheel lays them out, so a wheel and an editable install of
the same source carry the same version. The shipped host runner is part of it; the C agent is
not (runs record its own source hash). Computed once per process, on first use (about 100
files, a few milliseconds).
"""

from __future__ import annotations

import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

from bench import __version__

PACKAGE_DIR = Path(__file__).resolve().parent
MAPPED = ("agents", "migrations")        # sub-packages an editable checkout keeps outside bench/


def source_files(root: Path = PACKAGE_DIR,
                 mapped: dict[str, Path] | None = None) -> list[tuple[str, Path]]:
    """(name relative to the package, path) of every source file, in the digest's order.
    `mapped`: sub-package name -> the directory it imports from (default: as imported)."""
    if mapped is None:
        mapped = {}
        for name in MAPPED:
            spec = importlib.util.find_spec(f"bench.{name}")
            for loc in (spec.submodule_search_locations or []) if spec else []:
                mapped[name] = Path(loc).resolve()
    found = {p.relative_to(root).as_posix(): p for p in root.rglob("*.py")
             if "__pycache__" not in p.parts}
    for name, base in mapped.items():
        if base != root / name:                 # outside the package: an editable checkout
            found.update({f"{name}/{p.relative_to(base).as_posix()}": p
                          for p in base.rglob("*.py") if "__pycache__" not in p.parts})
    return sorted(found.items(), key=lambda kv: kv[0].encode())


def source_sha256(files: list[tuple[str, Path]] | None = None) -> str:
    h = hashlib.sha256()
    for name, path in source_files() if files is None else files:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def controller_version() -> str:
    """`<package version>+src.<first 12 hex digits of source_sha256>` (PEP 440 local
    version), computed once."""
    return f"{__version__}+src.{source_sha256()[:12]}"
