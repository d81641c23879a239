"""The golden model against plain numpy, and its timing rules."""

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.models.matrix_engine_model import MatMul, MatrixEngineModel, ideal_schedule, wrap_int32


def test_matches_numpy_tiled_matmul():
    rng = np.random.default_rng(1)
    config = TPUConfig(rows=4, cols=3, acc_rows=16)
    model = MatrixEngineModel(config)
    x = rng.integers(-128, 128, size=(5, 12))
    w = rng.integers(-128, 128, size=(12, 3))
    for t in range(3):
        model.push_tile(w[4 * t:4 * t + 4])
        model.matmul(MatMul(x[:, 4 * t:4 * t + 4], 2, accumulate=t > 0, switch=True))
    assert np.array_equal(model.acc[2:7], x @ w)
    assert not model.acc[:2].any() and not model.acc[7:].any()


def test_unsigned_rows_and_overwrite():
    config = TPUConfig(rows=2, cols=2, acc_rows=4)
    model = MatrixEngineModel(config)
    model.push_tile(np.array([[-128, 127], [1, -1]]))
    model.matmul(MatMul(np.array([[255, 255]]), 0, unsigned=True, switch=True))
    assert model.acc[0].tolist() == [-128 * 255 + 255, 127 * 255 - 255]
    model.matmul(MatMul(np.array([[1, 0]]), 0))
    assert model.acc[0].tolist() == [-128, 127]


def test_per_row_addresses_apply_in_order():
    config = TPUConfig(rows=1, cols=1, acc_rows=4)
    model = MatrixEngineModel(config)
    model.push_tile(np.array([[2]]))
    model.matmul(MatMul(np.array([[1], [2], [3]]), [1, 1, 1], accumulate=True, switch=True))
    assert model.acc[1, 0] == 12


def test_accumulation_wraps_at_32_bits():
    assert wrap_int32([2**31, -2**31 - 1, 2**32 + 5]).tolist() == [-2**31, 2**31 - 1, 5]
    config = TPUConfig(rows=1, cols=1, acc_rows=1)
    model = MatrixEngineModel(config)
    model.acc[0, 0] = 2**31 - 1
    model.push_tile(np.array([[1]]))
    model.matmul(MatMul(np.array([[1]]), 0, accumulate=True, switch=True))
    assert model.acc[0, 0] == -2**31


def test_rejects_bad_input():
    model = MatrixEngineModel(TPUConfig(rows=2, cols=2, acc_rows=4))
    with pytest.raises(ValueError, match="shape"):
        model.push_tile(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="int8"):
        model.push_tile(np.full((2, 2), 128))
    with pytest.raises(RuntimeError, match="no weight tile"):
        model.matmul(MatMul(np.zeros((1, 2)), 0, switch=True))
    with pytest.raises(RuntimeError, match="before any weight tile"):
        model.matmul(MatMul(np.zeros((1, 2)), 0))
    model.push_tile(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="-128..127"):
        model.matmul(MatMul(np.array([[200, 0]]), 0, switch=True))
    with pytest.raises(ValueError, match=r"expected \(B, 2\)"):
        model.matmul(MatMul(np.zeros((1, 3)), 0, unsigned=True))


@pytest.mark.parametrize("rows", [1, 2, 8, 16])
def test_schedule_has_no_bubbles_when_tiles_stream_at_least_rows_rows(rows):
    config = TPUConfig(rows=rows, cols=4)
    ops = [MatMul(np.zeros((b, rows)), 0, switch=True) for b in [rows, 2 * rows, rows, rows]]
    starts = [c for op in ideal_schedule(config, ops) for c in op]
    # The first tile takes `rows` cycles to stream in and one to capture.
    assert starts[0] == rows + 1
    assert starts == list(range(starts[0], starts[0] + len(starts)))


def test_schedule_short_ops_wait_for_the_next_tile():
    config = TPUConfig(rows=8, cols=8)
    ops = [MatMul(np.zeros((b, 8)), 0, switch=s) for b, s in [(2, True), (3, True), (1, False), (4, True)]]
    starts = ideal_schedule(config, ops)
    assert starts[0] == [9, 10]
    # Switches are at least `rows` cycles apart.
    assert starts[1] == [17, 18, 19]
    assert starts[2] == [20]
    assert starts[3][0] == 25
