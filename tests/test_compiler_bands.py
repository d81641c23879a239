"""Spatial tiling and weight splits: convolutions streamed in bands of
output rows through a unified buffer too small for their input and output,
layers whose weights exceed weight memory split by K with their M tiles two
at a time, and the refusal that names the memory size that would do. Every
compiled model runs on the golden chip and equals the reference, bit for
bit (seeds printed)."""

import numpy as np
import pytest

from tpu.compiler.backend import compile_graph
from tpu.compiler.errors import CompileError

from test_compiler_backend import SMALL, Builder, check, rng   # noqa: F401  (rng: a fixture)


def bands_of(compiled):
    return [note for note in compiled.notes if "bands of at most" in note]


def random_conv_case(rng):
    """A random convolution (kernel, stride, padding, channels, image), its
    pooling now and then."""
    kh, kw = (int(v) for v in rng.integers(1, 6, 2))
    sh, sw = (int(v) for v in rng.integers(1, 3, 2))
    pad = tuple(int(rng.integers(0, k)) for k in (kh, kw, kh, kw))
    h = int(rng.integers(kh + 8, 24))
    w = int(rng.integers(kw + 4, 16))
    cin, cout = (int(v) for v in rng.integers(1, 20, 2))
    pool = None
    oh = (h + pad[0] + pad[2] - kh) // sh + 1
    ow = (w + pad[1] + pad[3] - kw) // sw + 1
    if rng.random() < 0.4 and min(oh, ow) >= 3:
        pool = ("max" if rng.random() < 0.5 else "avg", 2, 2)
    return (h, w, cin), cout, (kh, kw), (sh, sw), pad, pool


def conv_graph(rng, shape, cout, kernel, stride, pad, pool, second=False):
    b = Builder(rng)
    x = b.input(shape)
    y = b.conv(x, cout, kernel, stride, pad, act="relu")
    if pool:
        y = b.pool(y, *pool)
    if second:       # a reader that pads, so the banded output is written into padding
        y = b.conv(y, 5, (3, 3), padding=(1, 1, 1, 1))
    return b.graph(y)


@pytest.mark.parametrize("case", range(8))
def test_random_convolutions_stream_in_bands(rng, case):
    """Random kernels, strides, paddings and pooling through a unified
    buffer of a third of what the layer's input and output need: the
    convolution is cut into bands of output rows, each reading its input
    rows with the halo (padding rows at the image's edges), and equals the
    reference."""
    for _ in range(case + 1):          # (each case its own draw from the seed)
        shape, cout, kernel, stride, pad, pool = random_conv_case(rng)
    graph = conv_graph(rng, shape, cout, kernel, stride, pad, pool, second=case % 2 == 1)
    print(shape, cout, kernel, stride, pad, pool)
    batch = 1 + case % 2
    whole = compile_graph(graph, SMALL, batch)
    need = whole.inputs[0].storage.rows + max(o.storage.rows for o in whole.outputs)
    config = SMALL.replace(ub_rows=max(need // 3, 96))
    try:
        compiled, _ = check(graph, config, batch, rng)
    except CompileError as error:
        # (too small even for bands of one row: the error says what would do)
        assert "--ub-rows" in str(error)
        rows = int(str(error).split("--ub-rows ")[1].split()[0])
        config = config.replace(ub_rows=rows)
        compiled, _ = check(graph, config, batch, rng)
    assert not bands_of(whole)
    if need > config.ub_rows:
        assert bands_of(compiled), compiled.notes


def test_bands_of_one_row_with_halo():
    """A 5x5 convolution of stride 1 whose bands must be one output row:
    each band reads five input rows, four of them its neighbours' too."""
    rng = np.random.default_rng(11)
    graph = conv_graph(rng, (12, 10, 16), 16, (5, 5), (1, 1), (2, 2, 2, 2), None)
    compiled, _ = check(graph, SMALL.replace(ub_rows=256), 1, rng)
    assert any("bands of at most 1 output rows" in n for n in bands_of(compiled)), compiled.notes


def test_refusal_names_the_unified_buffer_that_would_do(rng):
    """When even bands of one output row, read a block and a kernel row a
    part, do not fit (a padded input row of 152 pixels), the error says so
    and names a --ub-rows with which the model compiles and runs."""
    graph = conv_graph(rng, (6, 150, 8), 8, (3, 3), (1, 1), (1, 1, 1, 1), None)
    with pytest.raises(CompileError, match=r"bands of one output row.*--ub-rows \d+") as error:
        compile_graph(graph, SMALL.replace(ub_rows=128), 1)
    rows = int(str(error.value).split("--ub-rows ")[1].split()[0])
    assert rows > 128
    check(graph, SMALL.replace(ub_rows=rows), 1, rng)


def test_parts_of_fewer_blocks_for_a_wide_input(rng):
    """A 1x1 convolution of stride 2 whose one input row of 64 channels
    (8 blocks) exceeds the unified buffer: its parts take fewer weight
    tiles, each reading only its blocks of the band, instead of a refusal."""
    b = Builder(rng)
    x = b.input((8, 24, 64))
    y = b.conv(x, 16, (1, 1), (2, 2), act="relu")
    compiled, _ = check(b.graph(y), SMALL.replace(ub_rows=128), 1, rng)
    assert any(" k" in s.name for s in compiled.chip_steps), [s.name for s in compiled.chip_steps]


@pytest.mark.parametrize("batch", [3, 5])
def test_conv_split_by_k_beyond_the_accumulators(rng, batch):
    """A convolution whose block of output channels needs more weight tiles
    than weight memory holds, and whose output exceeds the accumulators:
    split by K with its M tiles as many at a time as the accumulators hold
    their sums (the weights loaded again per group), equal to the
    reference."""
    cfg = SMALL.replace(weight_mem_tiles=4)
    b = Builder(rng)
    x = b.input((10, 5, 9))
    y = b.conv(x, 10, (3, 3), padding=(1, 0, 1, 0), act="clamp")     # 9 taps x 2 blocks: 18
    compiled, profile = check(b.graph(y), cfg, batch, rng)
    assert any(" m" in s.name and " k" in s.name for s in compiled.chip_steps)
    assert sum(p["weights_loaded"] > 0 for p in profile) > 5


def test_dense_split_by_k_reads_only_its_rows(rng):
    """A dense layer of more input rows than the unified buffer holds, its
    weights beyond weight memory: each K part reads just its rows."""
    cfg = SMALL.replace(weight_mem_tiles=4, ub_rows=128)
    b = Builder(rng)
    x = b.input((640,))
    y = b.dense(x, 12, "relu")
    compiled, _ = check(b.graph(y), cfg, 2, rng)
    assert len(compiled.chip_steps) == 2 * 20       # 80 K tiles in fours, 2 N tiles


def test_random_weight_splits(rng):
    """Random layers over weight memories of 1 to 6 tiles: split by N and
    by K, and equal to the reference."""
    for _ in range(3):
        tiles = int(rng.integers(1, 7))
        b = Builder(rng)
        x = b.input((int(rng.integers(4, 9)), int(rng.integers(4, 9)), int(rng.integers(1, 20))))
        h = b.conv(x, int(rng.integers(1, 20)), (3, 3), padding=(1, 1, 1, 1), act="relu")
        f = b.reshape(h)
        y = b.dense(f, int(rng.integers(1, 12)))
        print(f"{tiles} weight tiles")
        check(b.graph(y), SMALL.replace(weight_mem_tiles=tiles), int(rng.integers(1, 4)), rng)


@pytest.mark.parametrize("batch", [1, 3])
def test_dense_output_written_a_part_at_a_time(rng, batch):
    """A dense layer of more output rows than the unified buffer holds, its
    weights split by N (and K): each part holds only its N tiles' blocks of
    the output and writes them to host memory, equal to the reference; so
    does a layer after it that reads the output back."""
    cfg = SMALL.replace(weight_mem_tiles=4, ub_rows=64)
    b = Builder(rng)
    x = b.input((24,))
    y = b.dense(x, 640, "relu")
    compiled, _ = check(b.graph(y), cfg, batch, rng)
    assert any("a part's N tiles at a time" in n for n in compiled.notes), compiled.notes
    b = Builder(rng)
    x = b.input((24,))
    h = b.dense(x, 640, "relu")
    y = b.dense(h, 10)
    compiled, _ = check(b.graph(y), cfg, batch, rng)
    assert any("a part's N tiles at a time" in n for n in compiled.notes), compiled.notes
