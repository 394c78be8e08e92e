"""The engine tier's shared fixture: the native agent, built once (the replay tests run it)."""

from pathlib import Path

import pytest

from tests.support import nativelib as nl


@pytest.fixture(scope="session")
def agent() -> Path:
    return nl.agent_or_skip()
