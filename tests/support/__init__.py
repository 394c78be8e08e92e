"""Helpers the test tiers share, imported as `tests.support.<module>` (the repository root is
on pytest's pythonpath, see pyproject): repository paths, trace records, the native agent's
build and loop-device file systems, native plans, the host runner driver, bundle generation,
netns-lab helpers and golden-file comparison."""
