"""The two ways a run stops early: a refused spec, or a failed step."""

from __future__ import annotations


class SpecError(Exception):
    """The spec is unusable: refused before anything on the host is touched."""


class RunFailed(Exception):
    """A step of the run failed; the message is the one-line reason."""
