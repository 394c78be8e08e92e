"""Host-side programs: `agents/` of a checkout, `bench.agents` of an installed controller.

Shipped as they are to hosts by `bench hosts deploy` (everything under agents/ but caches).
Nothing here imports anything outside the Python standard library; see README.md.
"""
