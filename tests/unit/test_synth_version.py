"""The synth generator's version tripwire: a trace generated from fixed parameters has the
digest recorded for the current GENERATOR_VERSION. If this fails, the generator's output
changed: bump GENERATOR_VERSION (cached workload traces are named by it, bench.plan.workload)
and record the new digest here."""

from __future__ import annotations

import hashlib

from bench.trace.synth import GENERATOR_VERSION, generate, params_digest, preset

DIGESTS = {2: "435398092b28e131ce9f612a62024166014d9e6d66b02310523ffa9c802dc67d"}


def test_generator_output_is_pinned_to_its_version():
    text = "\n".join(generate(preset("tiny", seed=3, domain=1))) + "\n"
    got = hashlib.sha256(text.encode()).hexdigest()
    assert DIGESTS[GENERATOR_VERSION] == got, got


def test_digest_names_parameters_and_version():
    a, b = preset("tiny", seed=0), preset("tiny", seed=1)
    assert params_digest(a) != params_digest(b) and params_digest(a) == params_digest(a)
