"""Memory-arithmetic rules (issue 22, item 2): at loop entry what each capacity mechanism set up
sums (a balloon's lock, MemAvailable against C, a cgroup's limit and usage, a mem= boot's
MemTotal). Registered into bench.judge.retention.RULES on import (retention imports this module
last, so these rules follow the older ones in every table)."""

from __future__ import annotations
