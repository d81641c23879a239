"""ONNX Runtime's rounding (ACT's ``mlas_round``) on the whole chip's RTL,
under both simulators: a compiled QLinearConv of constructed ties (half of
them where the chip's one rounding differs, and ``float32(x)``'s own ties
above 2**24) on the default chip and on a chip with the ulx3s16 profile's
activation form (one requantizer shared by the columns, 16-bit pieces, as
the profile builds it with the mode since 7 December 2026), equal
to the golden model and to ONNX Runtime element for element. The uint8
layer's ACTs carry mlas_round alone (single_round cleared), the int8
layer's both flags, as the compiler sets them."""

import numpy as np
import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.models.activation_model import multiply_by_quantized_multiplier_single_round, type_range
from tpu.sim.stimulus.mlas_ties import conversion_ties, differing_ties
from test_mlas_rounding import _conv_acc, _qlinearconv_model, _quantized_io, _scale

#: Each column's input offsets from the zero point: the tie itself (0), its
#: neighbours and a few further off, a 4x4 image.
OFFSETS = np.array([0, 1, -1, 2, -2, 3, -3, 7, -7, 31, -31, 64, -64, 100, -100, 127])

CONFIGS = {
    "default": TPUConfig(),
    # The ulx3s16 profile's activation unit: a requantizer shared by the
    # columns, its product in 4 cycles of 16-bit pieces (not the compact
    # form).
    "ulx3s16_lane": TPUConfig(rows=4, cols=4, acc_rows=64, ub_rows=256, weight_mem_tiles=16,
                              requantizers=1, requantizer_multiplier_width=16),
}


def _tie_model(rng, unsigned):
    """A QLinearConv of one input channel, weight 1 and scales 1, whose
    channels' biases are the ties (40 of `differing_ties`, 8 of
    `conversion_ties`) and whose scales are their float32 multipliers, so
    that each output is a tie's (or a neighbour's) requantization."""
    from onnx import TensorProto
    qmin, qmax = type_range(unsigned)
    ties, m, shift = differing_ties(rng, 40)
    keep = (np.abs(ties) < (1 << 31) - 512) & (shift >= -31)
    ties, m, shift = ties[keep], m[keep], shift[keep]
    cx, cm, cs = conversion_ties(rng, 8)
    ties, m, shift = (np.concatenate(p) for p in ((ties, cx), (m, cm), (shift, cs)))
    zx = 128 if unsigned else 0
    x = (zx + OFFSETS).reshape(1, 1, 4, 4)
    w = np.ones((ties.size, 1, 1, 1), np.int64)
    quarter = (qmax - qmin + 1) // 4          # the zero point in the middle half: few clamp
    zy = int(rng.integers(qmin + quarter, qmax - quarter + 1))
    acc = _conv_acc(x, zx, w, ties, 1, 0, 1)
    x_type = TensorProto.UINT8 if unsigned else TensorProto.INT8
    model = _quantized_io(_qlinearconv_model(x_type, x.shape, acc.shape, 1.0, zx, w,
                                             _scale(m, shift), 1.0, zy, ties, 1, 0, 1),
                          x_type, zx, zy)
    once = np.clip(multiply_by_quantized_multiplier_single_round(
        acc, (m << 7).reshape(1, -1, 1, 1), shift.reshape(1, -1, 1, 1)) + zy, qmin, qmax)
    return model, (x - zx).astype(np.float32), once - zy


def _mlas_round_alone(compiled):
    """`compiled` with its ACTs' single_round cleared where mlas_round is
    set: the flag alone rounds once too (docs/isa.md), which the activation
    unit passes to the pipeline as single_round."""
    from dataclasses import replace
    from tpu.compiler.artifact import ChipStep
    from tpu.isa import Act, decode
    steps, changed = [], 0
    for step in compiled.steps:
        if isinstance(step, ChipStep):
            words = [step.program[i:i + 16] for i in range(0, len(step.program), 16)]
            alone = [replace(ins, single_round=False).encode()
                     if isinstance(ins := decode(w), Act) and ins.mlas_round else w for w in words]
            changed += sum(a != w for a, w in zip(alone, words))
            step = replace(step, program=b"".join(alone))
        steps.append(step)
    assert changed
    return replace(compiled, steps=steps)


@pytest.mark.rtl
@pytest.mark.parametrize("unsigned", [False, True], ids=["int8", "uint8"])
@pytest.mark.parametrize("name", CONFIGS)
def test_compiled_ties_on_the_chip(simulator, name, unsigned):
    pytest.importorskip("onnxruntime")
    from tpu.compiler import zoo
    from tpu.compiler.session import InferenceSession
    seed = base_seed() + 20 + unsigned
    print(f"seed {seed} (replay with TPU_SEED={base_seed()})")
    config = CONFIGS[name]
    model, xf, once = _tie_model(np.random.default_rng(seed), unsigned)
    (theirs,) = zoo.ort_run(model, xf)
    compiled = InferenceSession(model, backend="golden", config=config).compiled
    if unsigned:
        compiled = _mlas_round_alone(compiled)
    (golden,) = InferenceSession(compiled, backend="golden").run(None, {"xf": xf})
    (ours,) = InferenceSession(compiled, backend=simulator).run(None, {"xf": xf})
    assert np.array_equal(golden, theirs), f"seed {seed}: the golden model differs from ONNX Runtime"
    bad = np.flatnonzero(ours.reshape(-1) != golden.reshape(-1))
    assert bad.size == 0, f"seed {seed}: {bad.size} of {ours.size} differ from the golden model"
    differ = np.count_nonzero(once.reshape(-1) != ours.reshape(-1))
    print(f"{ours.size} values equal; the one rounding differs in {differ}")
    assert differ >= 5
