"""The engine tier's shared fixture: the native agent, built once (the replay tests run it)."""

import shutil
from pathlib import Path

import pytest

from tests.support import nativelib as nl


@pytest.fixture(scope="session")
def agent() -> Path:
    for tool in ("make", "cc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (build-essential)")
    return nl.build_agent()
