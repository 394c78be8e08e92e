"""Sizes and cell names have one grammar (agents/hostrunner/grammar.py) with two faces: the
controller's (bench.units, bench.matrix.cells: Cell, InputError) and the host runner's
(hostrunner.spec: spec fields, SpecError). The grammar's own rules are tested through the
controller in test_cells_procfs.py and test_recall_demand_units.py; here, what each face adds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.agents.hostrunner import grammar, spec
from bench.agents.hostrunner.errors import SpecError
from bench.errors import InputError
from bench.matrix.cells import (DELIVERIES, MECHANISMS, MODES, POLICY_MODES, RECLAIMS, Cell,
                                engine_cell, parse_cell)
from bench.units import parse_kernel_size, parse_size

CAPACITY = st.one_of(st.integers(1, 10 ** 13),
                     st.builds(lambda n, u: n * u, st.integers(1, 4096),
                               st.sampled_from([10 ** 3, 10 ** 6, 10 ** 9, 1 << 20, 1 << 30])))
PREFETCH = st.one_of(st.none(), st.tuples(st.sampled_from(["oracle", "pilot", "prev_token"]),
                                          st.sampled_from(DELIVERIES)))
REPLAY = st.builds(lambda c, m, r, mode, pf: Cell(c, m, r, mode, *(pf or (None, None))),
                   CAPACITY, st.sampled_from(MECHANISMS), st.sampled_from(RECLAIMS),
                   st.sampled_from(MODES), PREFETCH)
ENGINE = st.builds(engine_cell, st.from_regex(r"[a-z0-9_]{1,32}", fullmatch=True),
                   st.sampled_from(sorted(POLICY_MODES)))
SPELLING = st.sampled_from([str, str.lower, str.upper])


@given(REPLAY, SPELLING)
def test_the_host_reads_a_replay_cell_as_the_spec_carries_it(cell, spelling):
    assert spec.parse_cell(spelling(cell.name)) == {
        "capacity_bytes": cell.capacity_bytes, "mechanism": cell.mechanism,
        "reclaim": cell.reclaim, "mode": cell.mode, "prefetch": cell.hints or "none",
        "delivery": cell.delivery}
    with pytest.raises(SpecError, match="want e2e-"):
        spec.parse_engine_cell(cell.name)


@given(ENGINE, SPELLING)
def test_the_host_reads_an_engine_cell_with_its_prompt_and_policy(cell, spelling):
    got = spec.parse_engine_cell(spelling(cell.name))
    assert got == {"capacity_bytes": 0, "mechanism": "none", "reclaim": "host",
                   "mode": cell.mode, "prefetch": "none", "delivery": None,
                   "prompt": cell.prompt, "policy": cell.policy}
    with pytest.raises(SpecError, match="is an engine cell"):
        spec.parse_cell(cell.name)


@pytest.mark.parametrize("name, words, choices", [
    ("64g-swap-mglru", "unknown mechanism 'swap'", True),
    ("64X-balloon-mglru", "not a size", True),
    ("64-none-mglru", "capacity 64 has no unit: write 64G", True),
    ("e2e-prose-pagecache", "an engine cell is e2e-{prompt}-{policy}", True),
    ("0-none-mglru", "must be positive", False),
])
def test_refusals_name_the_valid_choices_on_both_sides(name, words, choices):
    """The controller's InputError carries the choices in its hint; the host's one-line
    SpecError carries the same message and hint."""
    with pytest.raises(InputError) as ctl:
        parse_cell(name)
    with pytest.raises(SpecError) as host:
        spec.parse_cell(name)
    assert words in ctl.value.message and words in str(host.value)
    listed = "mechanisms: cgroup, balloon, memboot, none"
    assert (listed in (ctl.value.hint or ""), listed in str(host.value)) == (choices, choices)


@given(st.text(max_size=40))
def test_the_controller_raises_input_errors_never_the_grammars_value_error(text):
    for parse in (parse_cell, parse_size, parse_kernel_size):
        try:
            parse(text)
        except InputError as e:
            assert not isinstance(e, ValueError) and e.message
        except grammar.GrammarError:
            pytest.fail(f"{parse.__name__}({text!r}) leaked a GrammarError")


@given(st.integers(0, 1 << 62), st.sampled_from(["", "k", "M", "g", "T", "p", "E"]))
def test_kernel_sizes_are_binary_on_both_sides(n, unit):
    text = f"{n}{unit}"
    assert spec.parse_kernel_size(text) == parse_kernel_size(text) == \
        n * grammar.KERNEL_MULT[unit.upper()]
    assert spec.parse_kernel_size(f"{n}Gi") is None      # the kernel would misread it
