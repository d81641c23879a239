"""The demo: its networks train to a useful accuracy from fixed seeds, their
int8 forms keep it, and (once compiled) the chip's golden model classifies
like ONNX Runtime."""

import numpy as np
import pytest

from tpu.compiler import demo_models, zoo


@pytest.fixture(scope="module")
def split():
    return demo_models.digits_split()


def test_split_is_fixed(split):
    x_train, x_test, y_train, y_test = split
    assert x_train.shape == (1437, 64) and x_test.shape == (360, 64)
    assert x_train.dtype == np.float32 and 0 <= x_train.min() and x_train.max() <= 1
    assert np.array_equal(np.bincount(y_test), np.bincount(demo_models.digits_split()[3]))
    assert np.array_equal(y_test, demo_models.digits_split()[3])


@pytest.mark.parametrize("name, floor", [("mlp", 0.90), ("cnn", 0.95)])
def test_training_reaches_accuracy(name, floor, split, tmp_path):
    x_train, x_test, y_train, y_test = split
    model = demo_models.demo_models(tmp_path, names=[name])[name]
    x = demo_models.model_input(name, x_test)
    float_accuracy = (zoo.ort_run(model, x)[0].argmax(1) == y_test).mean()
    print(f"{name}: float accuracy {float_accuracy:.4f}")
    assert float_accuracy >= floor
    quantized = zoo.quantize(model, demo_models.model_input(name, x_train[:256]), form="qdq")
    int8_accuracy = (zoo.ort_run(quantized, x)[0].argmax(1) == y_test).mean()
    print(f"{name}: ONNX Runtime int8 accuracy {int8_accuracy:.4f}")
    assert int8_accuracy >= floor - 0.01
    # the second call loads the cached model instead of training
    cached = demo_models.demo_models(tmp_path, names=[name])[name]
    assert cached.SerializeToString() == model.SerializeToString()
