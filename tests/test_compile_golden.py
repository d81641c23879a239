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
RECORDED = {
    ("ad01_int8", "default"): (
        "45e8fb78c5c189d6ee0dfdfa70d09e00d855ba65ae886b09c6d6a292f659b613", 62030),
    ("kws_ref_model", "default"): (
        "e2c812f2cbdbd39447e1733f993f133fda75a375b6c1cd1bc8bfb0ad4027c6fc", 96394),
    ("pretrainedResnet_quant", "default"): (
        "71933b7dd3f45cc9da8e306a920a637c140c12a9badff29ab46495307d03a2b1", 211676),
    ("ad01_int8", "up5k"): (
        "d2bcd66801e7d07df996b131c5b3d25ebd2944269d0fa94a5ac33b42f2afdab1", 586133),
    ("ad01_int8", "2x2"): (
        "c81d3deb5e26fac22e94605e5a3539864d3f09ae79a0e506563ad3a3253a5945", 492820),
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
