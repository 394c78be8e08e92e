"""The `engine` extra's packages, imported where they are needed: a missing one is an
InputError naming the install command, never an ImportError traceback."""

from __future__ import annotations

import importlib
from types import ModuleType

from bench.errors import InputError

INSTALL = "pip install 'bench[engine]'"


def need(module: str) -> ModuleType:
    """`module` (gguf, llama_cpp) imported, or an InputError saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InputError(f"bench engine needs the engine extra ({module} is not installed: "
                         f"{exc.msg})", hint=INSTALL) from None
    except OSError as exc:          # llama_cpp found but its shared library failed to load
        raise InputError(f"bench engine: {module} is installed but cannot load: {exc}",
                         hint=f"reinstall it: {INSTALL}") from None
