"""What the compiler makes of a few small layers is what it made when the
hashes below were recorded (scripts/compiler_fingerprints.py): a check that
a change meant to keep the compiler's output (a refactor of its passes, a
faster pass) keeps it, bit for bit, cycles included. The layers cover bands
(with halos, one slot), weight splits by N and K (M tiles grouped for the
accumulators), a dense output written a part at a time, and parts planned
again at rows of taps.

A change meant to change the output re-records them: ``python
scripts/compiler_fingerprints.py --record new.json --only random --only
dense_chunked --only conv_ksplit --only wide`` and copy the hashes here."""

import pytest

from tpu.compiler.backend import compile_graph

from script_loader import load_script

fingerprints = load_script("compiler_fingerprints")

#: case -> (hash, cycles of the cycle model, chip parts)
RECORDED = {
    "random_conv0_ub160": ("c2726d5c744b253c", 33684, 16),
    "random_conv1_ub256": ("42e2e57fc4cdad23", 23138, 2),
    "random_conv4_ub160": ("e3e1ce14853e2aec", 9146, 1),
    "random_conv5_ub4096": ("8760bdc16288f14d", 2595, 2),
    "random_split0_w1": ("07a541fda1d52b30", 15745, 213),
    "dense_chunked_b3": ("490496136b5e76a8", 19250, 120),
    "conv_ksplit_b5": ("98567514bb11a8b4", 8487, 30),
    "wide_1x1_stride2": ("f0ada04b06fe1b1d", 2704, 8),
}


@pytest.fixture(scope="module")
def cases():
    return fingerprints.random_layers()


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_compiled_model_is_as_recorded(cases, name):
    graph, config, batch = cases[name]
    compiled = compile_graph(graph, config, batch)
    got = (fingerprints.fingerprint(compiled), sum(s.estimated_cycles for s in compiled.chip_steps),
           len(compiled.chip_steps))
    assert got == RECORDED[name], (
        f"{name}: the compiler's output changed (hash, cycles, parts {got}, recorded "
        f"{RECORDED[name]}); if that is meant, re-record (see the module docstring)")
