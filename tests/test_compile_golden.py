"""The compiler's output stays what it was: the MLPerf Tiny models (TFLite
files of fixed SHA-256, so their compiled artifacts are fixed too) compile
to the recorded digest (`scripts/compile_golden.py`: every part's program
bytes, weights, cycle estimate and MAC counts, the weight image and the
constants) and the recorded cycle model cycles. A change meant only to make
the compiler faster or clearer must leave these alone; a change of the
compiler's output updates them with the reason in its commit
(``scripts/compile_golden.py --only tiny`` prints the new ones). The
script checks more models (the zoo's, the demo's and ResNet-18 and
MobileNetV2 at 224x224)."""

import pytest

from tpu.compiler.backend import compile_graph
from tpu.compiler.mlperf_tiny import missing_reason, model_path
from tpu.compiler.tflite_frontend import import_tflite

from script_loader import load_script


golden = load_script("compile_golden")

#: (model, chip) -> (digest, cycles), as recorded before the compile-speed work
#: (the cycles; the digests again once they stopped hashing the TPUConfig)
RECORDED = {
    ("ad01_int8", "default"): (
        "e8990f76a5143622e2689f75ea2b0ec4aa5f9b870e182cfa98c0655e0a70df12", 62030),
    ("kws_ref_model", "default"): (
        "ab27e62196eee41eb6d7b5a8f03bac175e21355c00c0271daf05e7fe4d00e55c", 96394),
    ("pretrainedResnet_quant", "default"): (
        "37720d751ca7f0d793c48cc32c477cc92f91389f8fd2f4f0cb17bbc0d1817b08", 211676),
    # (up5k's small activation pipeline, `serial_act`, made its ACTs 3 cycles longer)
    ("ad01_int8", "up5k"): (
        "e8ecc868cea9f0aee041e12ca1a8e0b0d01f725e3a46bde230dde9fb3764bb83", 588641),
    ("ad01_int8", "2x2"): (
        "f9885ddd47caa9be97f5c545a63618b37160167486040a208bd7a91dc654482a", 492820),
}

CHIPS = {"default": golden.TPUConfig(), "up5k": golden.UP5K_PROFILE, "2x2": golden.SMALL_2X2}


@pytest.mark.parametrize("model, chip", sorted(RECORDED), ids=lambda v: str(v))
def test_compiled_artifact_is_unchanged(model, chip):
    reason = missing_reason(model)
    if reason:
        pytest.skip(reason)
    compiled = compile_graph(import_tflite(model_path(model)), CHIPS[chip], 1)
    digest, cycles = golden.digest(compiled)
    assert (digest, cycles) == RECORDED[(model, chip)]
