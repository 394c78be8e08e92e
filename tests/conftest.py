import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def header(k=2, experts=8, layers=3, expert_bytes=4096, model="t"):
    return json.dumps({"model": model, "k": k, "experts_per_layer": experts, "layers": layers,
                       "expert_bytes": expert_bytes})


def rec(layer, experts, step=None, **extra):
    r = {"layer": layer, "experts": experts}
    if step is not None:
        r["step"] = step
    r.update(extra)
    return json.dumps(r)


@pytest.fixture
def write_trace(tmp_path):
    """Write lines to a trace file and return its path."""
    counter = iter(range(10_000))

    def _write(lines, name=None):
        p = tmp_path / (name or f"trace{next(counter)}.jsonl")
        p.write_text("\n".join(lines) + "\n")
        return p
    return _write


@pytest.fixture(scope="session")
def tiny_traces(tmp_path_factory):
    """Four domains of the tiny preset, written by the real generator."""
    from bench.trace.synth import generate, preset
    d = tmp_path_factory.mktemp("tiny")
    paths = []
    for dom in range(4):
        p = d / f"tiny-{dom}.jsonl"
        p.write_text("\n".join(generate(preset("tiny", domain=dom, tokens=120))) + "\n")
        paths.append(p)
    return paths
