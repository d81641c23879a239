"""What the compiler makes of a few small layers and of the MLPerf Tiny
models is what it made when the hashes below were recorded
(scripts/compiler_fingerprints.py: every part's program, weight image,
host region, tensor layouts and offsets, notes and per-part counts): a
check that a change meant to keep the compiler's output (a refactor of its
passes, a faster pass) keeps it, bit for bit, cycles included. The layers
cover bands (with halos, one slot), weight splits by N and K (M tiles
grouped for the accumulators), a dense output written a part at a time,
and parts planned again at rows of taps; the MLPerf Tiny models (TFLite
files of fixed SHA-256) cover whole networks on the default chip, up5k
and the 2x2 chip.

A change meant to change the output re-records them: ``python
scripts/compiler_fingerprints.py --record new.json --only random --only
dense_chunked --only conv_ksplit --only wide --only _int8_ --only
kws_ref_model_default --only pretrainedResnet_quant_default`` and copy the
hashes here, with the reason in the commit."""

import pytest

from tpu.compiler.backend import compile_graph
from tpu.compiler.mlperf_tiny import missing_reason, model_path
from tpu.compiler.tflite_frontend import import_tflite

from script_loader import load_script

fingerprints = load_script("compiler_fingerprints")

#: case -> (hash, cycles of the cycle model, chip parts)
RECORDED = {
    "random_conv0_ub160": ("9f04611a8fc8c5cd", 33696, 16),
    "random_conv1_ub256": ("f2e6030fdf57d769", 23306, 2),
    "random_conv4_ub160": ("3787b31fd4bb7af2", 9232, 1),
    "random_conv5_ub4096": ("b6a3db28d79abd18", 2640, 2),
    "random_split0_w1": ("adf180aa665fca0d", 15784, 213),
    "dense_chunked_b3": ("bc71af2ea104b7f1", 19496, 120),
    "conv_ksplit_b5": ("dbba00bf1751965e", 8559, 30),
    "wide_1x1_stride2": ("5f14d66cbac72c9f", 2716, 8),
}

#: (MLPerf Tiny model, chip) -> (hash, cycles, chip parts); the quick ones
#: (a second or two to compile each)
TINY_RECORDED = {
    ("ad01_int8", "default"): ("97ba1fb57e7c44b6", 62597, 12),
    ("kws_ref_model", "default"): ("0ff8be79b0cc855a", 96943, 10),
    ("pretrainedResnet_quant", "default"): ("c3e439f52442e412", 211808, 11),
    # (up5k's small activation pipeline, `serial_act`, made its ACTs 3 cycles longer;
    # the others' pooling average in three registered stages, 2, and their
    # pooling unit's input register 1 more)
    ("ad01_int8", "up5k"): ("e434d9b4df4418fb", 588641, 4128),
    ("ad01_int8", "2x2"): ("5cf38c595b7cae43", 495328, 4128),
}

CHIPS = {"default": fingerprints.DEFAULT, "up5k": fingerprints.UP5K_PROFILE,
         "2x2": fingerprints.SMALL_2X2}


def _recorded(compiled):
    return (fingerprints.fingerprint(compiled), sum(s.estimated_cycles for s in compiled.chip_steps),
            len(compiled.chip_steps))


@pytest.fixture(scope="module")
def cases():
    return fingerprints.random_layers()


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_compiled_model_is_as_recorded(cases, name):
    graph, config, batch = cases[name]
    got = _recorded(compile_graph(graph, config, batch))
    assert got == RECORDED[name], (
        f"{name}: the compiler's output changed (hash, cycles, parts {got}, recorded "
        f"{RECORDED[name]}); if that is meant, re-record (see the module docstring)")


@pytest.mark.parametrize("model, chip", sorted(TINY_RECORDED), ids=lambda v: str(v))
def test_mlperf_tiny_model_is_as_recorded(model, chip):
    reason = missing_reason(model)
    if reason:
        pytest.skip(reason)
    got = _recorded(compile_graph(import_tflite(model_path(model)), CHIPS[chip], 1))
    assert got == TINY_RECORDED[(model, chip)], (
        f"{model} on {chip}: the compiler's output changed (hash, cycles, parts {got}, recorded "
        f"{TINY_RECORDED[(model, chip)]}); if that is meant, re-record (see the module docstring)")
