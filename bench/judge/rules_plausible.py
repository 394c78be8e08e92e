"""Plausibility rules (issue 22, item 1): a retained number must be physically possible and
agree with the run's other counters. Registered into bench.judge.retention.RULES on import
(retention imports this module last, so these rules follow the older ones in every table)."""

from __future__ import annotations
