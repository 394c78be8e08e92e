"""The retention rules' registry (bench.judge.retention): a rule's record, a verdict, the list
every rule module registers into with `@rule(name, version, kinds)`. A module of its own so
that the rule families kept outside retention.py (rules_plausible, rules_memory) register
without importing retention, which imports them (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.judge.bundle import Bundle

KINDS = ("agent", "engine")


@dataclass(frozen=True)
class Rule:
    name: str
    version: int
    check: Callable[[Bundle, dict], tuple[bool, str]]
    doc: str
    kinds: tuple[str, ...] = KINDS


@dataclass(frozen=True)
class Verdict:
    rule: str
    version: int
    passed: bool
    reason: str


RULES: list[Rule] = []


def rule(name: str, version: int, kinds: tuple[str, ...] = KINDS):
    def deco(fn):
        RULES.append(Rule(name, version, fn, (fn.__doc__ or "").strip(), kinds))
        return fn
    return deco
