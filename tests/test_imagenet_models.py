"""ResNet-18 and MobileNetV2 (`tpu.compiler.imagenet_models`) at 32x32, the
same architectures as at 224x224 on smaller feature maps: their QDQ int8
forms import (depthwise convolutions as block-diagonal Conv2D, residual
Adds), compile and run on the golden chip equal to ONNX Runtime, bit for
bit. At 224x224 they are a benchmark (scripts/bench_imagenet.py,
docs/compiler.md): minutes of golden-chip time on a small array."""

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.compiler import imagenet_models, ir, zoo
from tpu.compiler.onnx_frontend import import_onnx
from tpu.compiler.session import InferenceSession

from conftest import base_seed


SIZE = 32
#: TPU v1's array, unified buffer and accumulators
V1 = TPUConfig(rows=256, cols=256, ub_rows=24 * 2**20 // 256, acc_rows=4096,
               weight_mem_bytes_per_cycle=48)


@pytest.fixture(scope="module")
def models():
    return {name: imagenet_models.quantized(name, SIZE) for name in imagenet_models.MODELS}


def test_architectures(models):
    resnet = import_onnx(models["resnet18"])
    convs = [layer for layer in resnet.layers if isinstance(layer, ir.Conv2D)]
    # 17 convolutions and 3 on the shortcuts (and the global average pool
    # when it requantizes: a summing convolution)
    assert len([n for n in models["resnet18"].graph.node if n.op_type == "Conv"]) == 20
    assert len(convs) >= 20 and len([a for a in resnet.layers if isinstance(a, ir.Add)]) == 8
    assert convs[0].weight.shape == (7, 7, 3, 64) and convs[0].stride == (2, 2)
    assert [d.weight.shape for d in resnet.layers if isinstance(d, ir.Dense)] == [(512, 1000)]
    mobile = import_onnx(models["mobilenet_v2"])
    depthwise = [c for c in mobile.layers if isinstance(c, ir.Conv2D) and c.weight.shape[0] == 3
                 and c.weight.shape[2] > 3]
    assert len(depthwise) == 17 and len([a for a in mobile.layers if isinstance(a, ir.Add)]) == 10
    for conv in depthwise:
        cin, cout = conv.weight.shape[2:]
        off = np.ones((cin, cout), bool)
        off[np.arange(cout), np.arange(cout)] = False
        assert cin == cout and not conv.weight[:, :, off].any()
    assert mobile.tensor(mobile.outputs[0].tensor).shape == (1000,)


@pytest.mark.parametrize("name, config, batch", [
    ("resnet18", V1, 2), ("mobilenet_v2", V1, 2),
    ("mobilenet_v2", TPUConfig(rows=16, cols=16), 1)],
    ids=["resnet18-256x256", "mobilenet_v2-256x256", "mobilenet_v2-16x16"])
def test_golden_chip_equals_onnxruntime(models, name, config, batch):
    seed = base_seed()
    print("seed", seed)
    x = np.random.default_rng(seed).standard_normal((batch, 3, SIZE, SIZE)).astype(np.float32)
    session = InferenceSession(models[name], backend="golden", config=config, batch=batch)
    (ours,) = session.run(None, {"input": x})
    (theirs,) = zoo.ort_run(models[name], x)
    assert ours.shape == theirs.shape == (batch, 1000)
    assert np.array_equal(ours, theirs), \
        f"{np.mean(ours != theirs):.2%} of the outputs differ from ONNX Runtime's"
    # not a degenerate network: the classes' scores differ
    assert len(np.unique(theirs)) > 100


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="multiple of 32"):
        imagenet_models.resnet18(48)
    with pytest.raises(ValueError, match="unknown model"):
        imagenet_models.quantized("vgg16")
