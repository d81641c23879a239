"""End-to-end programs for the chip, each with the results it must produce.

Every builder returns a `ChipProgram`: the program as assembly text (assembled
by `tpu.asm.assemble`), the weight-memory tiles and host-memory image it
starts from, and the results plain integer arithmetic gives for it: host bytes
the program writes and, for the directed programs, UB rows, accumulator rows
and interrupt codes. The expected results are computed here directly from the
ISA's definition (docs/isa.md, docs/activation_pipeline.md) in numpy and
Python integers, independently of the golden model `tpu/models/chip_model.py`; the
tests run each program on the RTL core (`sim/testbenches/tb_core_programs.py`), which is
also compared with the golden model as a whole.

Networks:

* `mlp_program`: a two-layer perceptron, int8 activations and weights, per
  column requantization, ReLU between the layers, tiled in K and N.
* `conv_program`: a 3x3 (or k x k) convolution from the UB without an im2col
  copy (MMC's CONV addressing, one MMC per kernel tap), ReLU, then pooling
  (max, average, global average), with optional padding and uint8 input.

Directed programs, one or a few instructions in isolation with known results:
`dma_program`, `mmc_program`, `act_functions_program`,
`act_pooling_program`, `control_program`.

`PROGRAMS` maps a name to the builder of every program, all on
`PROGRAM_CONFIG`.
"""

import json
from dataclasses import dataclass, field

import numpy as np

from ...asm import assemble
from ...config import TPUConfig
from ...isa import ldl_rows, ldq_rows
from ...models.activation_model import quantize_multiplier, sigmoid_table, tanh_table


__all__ = [
    "PROGRAM_CONFIG", "ChipProgram", "PROGRAMS",
    "mlp_program", "mlp_shape", "conv_program",
    "dma_program", "mmc_program", "act_functions_program", "act_pooling_program",
    "control_program",
    "multiply_by_quantized_multiplier", "requantize", "round_average", "ldq_table", "blocked",
]


#: The chip the programs are written for: an 8x8 array, with room for the
#: MLP's 15 weight tiles and a convolution of a padded 10x10 image.
PROGRAM_CONFIG = TPUConfig(rows=8, cols=8, acc_rows=64, ub_rows=256, weight_mem_tiles=16,
                           weight_fifo_tiles=4, weight_mem_latency=8,
                           weight_mem_bytes_per_cycle=8, pool_max_width=8)

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


# ---------------------------------------------------------------------------------------
# The program container


@dataclass
class ChipProgram:
    """A program, what it starts from, and what it must produce.

    Attributes
    ----------
    name : str
    config : TPUConfig
    text : str
        Assembly source.
    weights : ndarray (tiles, rows, cols) int8
        Weight-memory tiles ``0 .. tiles - 1`` (the rest are never read).
    host : dict of int -> bytes
        Host memory before the program runs (address -> bytes).
    expected_host : dict of int -> bytes
        Host bytes the program writes.
    expected_ub : dict of int -> bytes
        UB rows after the program (row -> ``config.rows`` bytes).
    expected_acc : dict of int -> list of int
        Accumulator rows after the program (row -> ``config.cols`` int32).
    interrupts : list of int
        INT codes in order (the final HALT's interrupt not included).
    reference : dict of str -> ndarray
        The intermediate results of the reference computation, for reading.
    """

    name: str
    config: TPUConfig
    text: str
    weights: np.ndarray
    host: dict = field(default_factory=dict)
    expected_host: dict = field(default_factory=dict)
    expected_ub: dict = field(default_factory=dict)
    expected_acc: dict = field(default_factory=dict)
    interrupts: list = field(default_factory=list)
    reference: dict = field(default_factory=dict)

    def assemble(self):
        """The encoded program (checked against `config` while assembling)."""
        return assemble(self.text, f"<{self.name}>", self.config)

    def save(self, path):
        """Write everything a testbench needs to an ``.npz`` file (no pickles)."""
        def segments(mapping):
            addrs = sorted(mapping)
            data = b"".join(bytes(mapping[a]) for a in addrs)
            return (np.array(addrs, dtype=np.uint64),
                    np.array([len(mapping[a]) for a in addrs], dtype=np.int64),
                    np.frombuffer(data, dtype=np.uint8))
        R, C = self.config.rows, self.config.cols
        host_addr, host_len, host_data = segments(self.host)
        out_addr, out_len, out_data = segments(self.expected_host)
        ub_rows = sorted(self.expected_ub)
        acc_rows = sorted(self.expected_acc)
        np.savez(
            path,
            name=np.array(self.name), config=np.array(json.dumps(self.config.to_dict())),
            text=np.array(self.text),
            program=np.frombuffer(self.assemble(), dtype=np.uint8),
            weights=np.asarray(self.weights, dtype=np.int8).reshape(-1, R, C),
            host_addr=host_addr, host_len=host_len, host_data=host_data,
            out_addr=out_addr, out_len=out_len, out_data=out_data,
            ub_rows=np.array(ub_rows, dtype=np.int64),
            ub_data=np.array([list(self.expected_ub[r]) for r in ub_rows],
                             dtype=np.uint8).reshape(-1, R),
            acc_rows=np.array(acc_rows, dtype=np.int64),
            acc_data=np.array([list(self.expected_acc[r]) for r in acc_rows],
                              dtype=np.int64).reshape(-1, C),
            interrupts=np.array(self.interrupts, dtype=np.int64),
        )

    @classmethod
    def load(cls, path):
        """The program `save` wrote (without `reference`), and its encoded bytes."""
        with np.load(path, allow_pickle=False) as f:
            def segments(prefix):
                out, offset = {}, 0
                for addr, n in zip(f[f"{prefix}_addr"].tolist(), f[f"{prefix}_len"].tolist()):
                    out[int(addr)] = f[f"{prefix}_data"][offset:offset + n].tobytes()
                    offset += n
                return out
            program = cls(
                name=str(f["name"]), config=TPUConfig(**json.loads(str(f["config"]))),
                text=str(f["text"]), weights=f["weights"].copy(),
                host=segments("host"), expected_host=segments("out"),
                expected_ub={int(r): d.tobytes() for r, d in zip(f["ub_rows"], f["ub_data"])},
                expected_acc={int(r): d.tolist() for r, d in zip(f["acc_rows"], f["acc_data"])},
                interrupts=f["interrupts"].tolist())
            return program, f["program"].tobytes()


# ---------------------------------------------------------------------------------------
# Reference arithmetic, in Python integers, from the ISA's definition


def _wrap32(x):
    return ((int(x) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def multiply_by_quantized_multiplier(x, multiplier, shift):
    """TFLite's ``MultiplyByQuantizedMultiplier`` on one int32, in Python
    integers: ``x << max(shift, 0)`` wrapping at 32 bits, gemmlowp's
    ``SaturatingRoundingDoublingHighMul`` (64-bit product, nudge, division
    truncating toward zero), then ``RoundingDivideByPOT`` by ``max(-shift, 0)``
    (ties away from zero)."""
    x, multiplier, shift = int(x), int(multiplier), int(shift)
    x = _wrap32(x << max(shift, 0))
    if x == multiplier == INT32_MIN:
        high = INT32_MAX
    else:
        product = x * multiplier
        nudged = product + ((1 << 30) if product >= 0 else 1 - (1 << 30))
        high = abs(nudged) >> 31
        high = high if nudged >= 0 else -high
    right = max(-shift, 0)
    mask = (1 << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def requantize(acc, bias, multiplier, shift, zero_point, low, high):
    """Per column ``n``: ``clamp(MBQM(acc + bias[n]) + zero_point, low, high)``
    over a 2-D array of accumulator sums (the bias addition wraps at 32 bits,
    as the chip's does; the zero-point addition and clamp are exact)."""
    acc = np.asarray(acc, dtype=np.int64)
    out = np.zeros(acc.shape, dtype=np.int64)
    for i in range(acc.shape[0]):
        for n in range(acc.shape[1]):
            y = multiply_by_quantized_multiplier(_wrap32(int(acc[i, n]) + int(bias[n])),
                                                 multiplier[n], shift[n])
            out[i, n] = min(max(y + zero_point, low), high)
    return out


def round_average(total, count):
    """TFLite's integer average: ``(s + n/2) / n`` for ``s > 0``, else
    ``(s - n/2) / n``, C division (ties away from zero)."""
    total, count = int(total), int(count)
    magnitude = (abs(total) + count // 2) // count
    return magnitude if total > 0 else -magnitude


def _saturate9(value):
    """How ACT uses OUT_ZERO_POINT, CLAMP_MIN and CLAMP_MAX: saturated to -256..255."""
    return min(max(int(value), -256), 255)


def _bounds(func, unsigned, zero_point=0, clamp_min=0, clamp_max=0):
    """The clamp of ACT's `func` (docs/isa.md, ACT): ``(low, high)``."""
    low, high = (0, 255) if unsigned else (-128, 127)
    if func == "relu":
        low = max(low, _saturate9(zero_point))
    elif func == "clamp":
        low, high = max(low, _saturate9(clamp_min)), min(high, _saturate9(clamp_max))
    return low, high


def _pool_windows(image, size, stride, reduce):
    """VALID `size` x `size` windows with `stride` over ``(h, w, c)``, raster order."""
    h, w, c = image.shape
    out_h, out_w = (h - size) // stride + 1, (w - size) // stride + 1
    out = np.zeros((out_h, out_w, c), dtype=np.int64)
    for oy in range(out_h):
        for ox in range(out_w):
            window = image[oy * stride:oy * stride + size, ox * stride:ox * stride + size]
            for ch in range(c):
                out[oy, ox, ch] = reduce(window[:, :, ch].reshape(-1))
    return out


def _max_pool(image, size, stride):
    return _pool_windows(image, size, stride, lambda v: int(v.max()))


def _avg_pool(image, size, stride):
    return _pool_windows(image, size, stride, lambda v: round_average(v.sum(), v.size))


def _global_avg(rows):
    rows = np.asarray(rows, dtype=np.int64)
    return np.array([[round_average(rows[:, ch].sum(), rows.shape[0])
                      for ch in range(rows.shape[1])]], dtype=np.int64)


def ldq_table(config, bias, multiplier, shift):
    """The bytes of LDQ's table (docs/isa.md, LDQ): biases (int32), multipliers
    (int32) and shifts (int8), each section starting at a new UB row,
    ``ldq_rows(config)`` rows in all."""
    R, C = config.rows, config.cols
    words = -(-4 * C // R)
    table = bytearray(ldq_rows(config) * R)
    table[0:4 * C] = np.asarray(bias, dtype="<i4").tobytes()
    table[words * R:words * R + 4 * C] = np.asarray(multiplier, dtype="<i4").tobytes()
    table[2 * words * R:2 * words * R + C] = np.asarray(shift, dtype=np.int8).tobytes()
    return bytes(table)


def blocked(matrix, width):
    """Bytes of an int8/uint8 matrix ``(B, K)`` stored as the chip holds it:
    column block ``j`` (columns ``j*width .. j*width + width - 1``) is ``B``
    consecutive rows of `width` bytes, the blocks one after another."""
    matrix = np.asarray(matrix)
    b, k = matrix.shape
    assert k % width == 0
    return matrix.reshape(b, k // width, width).transpose(1, 0, 2).astype(np.uint8).tobytes()


def _bytes(values):
    """int8/uint8 values as bytes (two's complement)."""
    return (np.asarray(values, dtype=np.int64) & 0xFF).astype(np.uint8).tobytes()


def _tiles(matrix, rows, cols):
    """Weight tiles of a ``(K, N)`` int8 matrix, N-block-major: tile
    ``n * (K / rows) + k`` holds ``matrix[k*rows:(k+1)*rows, n*cols:(n+1)*cols]``."""
    K, N = matrix.shape
    return [matrix[k * rows:(k + 1) * rows, n * cols:(n + 1) * cols]
            for n in range(N // cols) for k in range(K // rows)]


class _Text:
    """Assembly lines with aligned comments."""

    def __init__(self, *header):
        self.lines = [f"; {line}" if line else ";" for line in header]

    def comment(self, text=""):
        self.lines.append(f"; {text}" if text else "")

    def __call__(self, instruction, comment=None):
        self.lines.append(f"{instruction:<62} ; {comment}" if comment else instruction)

    def text(self):
        return "\n".join(self.lines) + "\n"


def _multipliers(rng, acc, target):
    """A real multiplier per column that maps the column's largest sum to about
    `target` (times a random factor, so some columns saturate), as
    ``(multiplier, shift)`` from `quantize_multiplier`."""
    acc = np.asarray(acc, dtype=np.int64)
    out = []
    for n in range(acc.shape[1]):
        peak = max(1, int(np.abs(acc[:, n]).max()))
        out.append(quantize_multiplier(target / peak * rng.uniform(0.7, 1.6)))
    return (np.array([m for m, _ in out], dtype=np.int64),
            np.array([s for _, s in out], dtype=np.int64))


def _check_int32(*arrays):
    for a in arrays:
        assert np.all((np.asarray(a) >= INT32_MIN) & (np.asarray(a) <= INT32_MAX)), \
            "the reference needs sums that fit int32"


# ---------------------------------------------------------------------------------------
# Two-layer MLP

MLP_HOST_X = 0x10000
MLP_HOST_Q = 0x20000
MLP_HOST_Y = 0x30000


def mlp_shape(config):
    """Keyword arguments of `mlp_program` for a two-layer MLP that fits
    `config`: the 8x8 chip's sizes (a batch of 16, ``k1 = n1 = 24``,
    ``n2 = 16``) where they divide the array and fit, else 3x3 and 3x2
    tiles, smaller where the memories are small. Raises ValueError naming
    the memory when not even one tile a layer and one row fit."""
    m = min(config.rows, config.cols)
    shapes = [dict(batch=16, k1=24, n1=24, n2=16)] if not (24 % config.rows or 24 % m or 16 % m) \
        else []
    shapes += [dict(batch=batch, k1=kt1 * config.rows, n1=nt1 * m, n2=nt2 * m)
               for batch, kt1, nt1, nt2 in _MLP_SHAPES]
    for shape in shapes:
        reason = _mlp_unfit(config, **shape)
        if reason is None:
            return shape
    raise ValueError(reason)


# (batch, K tiles of layer 1, N tiles of layer 1, N tiles of layer 2), largest first.
_MLP_SHAPES = [(16, 3, 3, 2), (8, 2, 2, 1), (4, 1, 1, 1), (1, 1, 1, 1)]


def _mlp_unfit(config, *, batch, k1, n1, n2):
    """None if the MLP of these sizes fits `config`, else why not."""
    R, C = config.rows, config.cols
    m = min(R, C)
    kt1, nt1, nt2 = k1 // R, n1 // m, n2 // m
    kt2 = nt1
    ub = batch * (kt1 + kt2 + nt2) + (nt1 + nt2) * ldq_rows(config)
    if ub > config.ub_rows:
        return f"the MLP needs {ub} UB rows, ub_rows is {config.ub_rows}"
    if max(nt1, nt2) * batch > config.acc_rows:
        return (f"the MLP needs {max(nt1, nt2) * batch} accumulator rows, "
                f"acc_rows is {config.acc_rows}")
    tiles = kt1 * nt1 + kt2 * nt2
    if tiles > config.weight_mem_tiles:
        return f"the MLP needs {tiles} weight tiles, weight_mem_tiles is {config.weight_mem_tiles}"
    return None


def mlp_program(seed=1, *, batch=16, k1=None, n1=None, n2=None, x_zero=-3, h_zero=-10, y_zero=4,
                config=PROGRAM_CONFIG):
    """A two-layer perceptron on a batch of int8 inputs.

    ``h = relu(requant(x @ W1 + b1))``, ``y = requant(h @ W2 + b2)``, with
    TFLite's asymmetric int8 activations (zero points `x_zero`, `h_zero`,
    `y_zero`), symmetric int8 weights and per-column multipliers. The zero
    points of the inputs are folded into the biases the chip gets
    (``b - zero * column sums of W``); the reference subtracts them instead.

    Layout: activations are stored in column blocks of ``config.rows``
    (`blocked`), the block for K tile ``k`` being ``batch`` consecutive UB
    rows. ACT stores ``m = min(rows, cols)`` channels of a result row (the
    rest of a UB row is zero), so each N tile carries `m` channels of `h`
    and `y`, its other columns are computed and dropped, and the hidden
    layer's N tiles are the second layer's K tiles as they are, their rows
    from `m` on meeting the zero bytes. `k1` is a multiple of ``rows``, `n1`
    and `n2` of `m`; by default 3, 3 and 2 tiles (24, 24 and 16 on 8x8).
    The output goes to host memory at ``MLP_HOST_Y`` in the same blocked
    layout, ``rows`` bytes a row.

    Weight tiles are requested as the weight FIFO allows: an N tile's K
    tiles in one RW before its first MMC when they fit the
    ``weight_fifo_tiles + 2`` tiles that may be requested ahead, else in
    several, each as soon as the FIFO has room.
    """
    cfg = config
    R, C = cfg.rows, cfg.cols
    m = min(R, C)
    k1 = 3 * R if k1 is None else k1
    n1 = 3 * m if n1 is None else n1
    n2 = 2 * m if n2 is None else n2
    if k1 <= 0 or n1 <= 0 or n2 <= 0 or k1 % R or n1 % m or n2 % m:
        raise ValueError(f"k1 must be a positive multiple of rows ({R}), n1 and n2 of "
                         f"min(rows, cols) ({m})")
    rng = np.random.default_rng(seed)
    kt1, nt1, nt2 = k1 // R, n1 // m, n2 // m
    kt2 = nt1
    B = batch
    # The columns of the chip's N tiles that carry channels, and the rows of
    # the second layer's K tiles that meet them.
    real1 = np.array([n * C + j for n in range(nt1) for j in range(m)])
    real2 = np.array([n * C + j for n in range(nt2) for j in range(m)])
    real_k2 = np.array([k * R + j for k in range(kt2) for j in range(m)])

    # The data, over every column of the tiles.
    x = rng.integers(-128, 128, size=(B, k1))
    w1 = rng.integers(-127, 128, size=(k1, nt1 * C))
    w2 = rng.integers(-127, 128, size=(kt2 * R, nt2 * C))
    b1 = rng.integers(-20000, 20000, size=nt1 * C)
    b2 = rng.integers(-20000, 20000, size=nt2 * C)

    # Reference: integer arithmetic straight from the definition.
    acc1 = (x - x_zero) @ w1 + b1
    m1, s1 = _multipliers(rng, acc1, 110)
    low, high = _bounds("relu", False, h_zero)
    h_all = requantize(acc1, np.zeros(nt1 * C, dtype=np.int64), m1, s1, h_zero, low, high)
    h = h_all[:, real1]
    acc2 = (h - h_zero) @ w2[real_k2] + b2
    m2, s2 = _multipliers(rng, acc2, 110)
    y_all = requantize(acc2, np.zeros(nt2 * C, dtype=np.int64), m2, s2, y_zero, -128, 127)
    y = y_all[:, real2]
    # What the chip is given: the zero points folded into the biases.
    chip_b1 = b1 - x_zero * w1.sum(axis=0)
    chip_b2 = b2 - h_zero * w2[real_k2].sum(axis=0)
    # The hidden layer as the UB holds it: m channels and R - m zero bytes a block.
    h_ub = np.zeros((B, kt2 * R), dtype=np.int64)
    h_ub[:, real_k2] = h
    y_host = np.zeros((B, nt2 * R), dtype=np.int64)
    y_host[:, np.array([n * R + j for n in range(nt2) for j in range(m)])] = y
    _check_int32(acc1, acc2, chip_b1, chip_b2, x @ w1 + chip_b1, h_ub @ w2 + chip_b2)

    # Memory map.
    q_rows = ldq_rows(cfg)
    ub_x, ub_h = 0, B * kt1
    ub_y = ub_h + B * kt2
    ub_q = ub_y + B * nt2
    n_tables = nt1 + nt2
    unfit = _mlp_unfit(cfg, batch=B, k1=k1, n1=n1, n2=n2)
    if unfit:
        raise ValueError(unfit)
    tiles = _tiles(w1, R, C) + _tiles(w2, R, C)
    tables = b"".join(
        [ldq_table(cfg, chip_b1[n * C:(n + 1) * C], m1[n * C:(n + 1) * C], s1[n * C:(n + 1) * C])
         for n in range(nt1)] +
        [ldq_table(cfg, chip_b2[n * C:(n + 1) * C], m2[n * C:(n + 1) * C], s2[n * C:(n + 1) * C])
         for n in range(nt2)])

    shape = "" if R == C else f", {m} channels of each N tile stored"
    t = _Text(f"Two-layer MLP on the {R}x{C} chip: y = requant(relu(requant(x W1 + b1)) W2 + b2)",
              f"x: {B} x {k1} int8, W1: {k1} x {n1} ({kt1}x{nt1} tiles), "
              f"W2: {n1} x {n2} ({kt2}x{nt2} tiles){shape}",
              f"UB rows: x {ub_x}..{ub_h - 1}, h {ub_h}..{ub_y - 1}, y {ub_y}..{ub_q - 1}, "
              f"LDQ tables {ub_q}..{ub_q + n_tables * q_rows - 1}",
              f"activations in column blocks of {R}: block k is {B} UB rows")
    t.comment()
    t(f"rhm   ub={ub_x}, rows={B * kt1}, host=0x{MLP_HOST_X:x}", "x, column-blocked")
    t(f"rhm   ub={ub_q}, rows={n_tables * q_rows}, host=0x{MLP_HOST_Q:x}",
      f"{n_tables} LDQ tables (bias, multiplier, shift)")
    ahead = cfg.weight_fifo_tiles + 2
    requested = 0           # tiles requested so far; tile i is the i-th switched to
    table = 0
    for layer, (ub_in, ub_out, kt, nt, first_tile, zero, func) in enumerate(
            [(ub_x, ub_h, kt1, nt1, 0, h_zero, "relu"),
             (ub_h, ub_y, kt2, nt2, kt1 * nt1, y_zero, "none")], 1):
        t.comment()
        t.comment(f"layer {layer}: {kt} K tiles accumulate into each of {nt} N tiles")
        for n in range(nt):
            first = first_tile + n * kt
            for k in range(kt):
                if first + k == requested:
                    count = min(first + kt, first + k + ahead) - requested
                    t(f"rw    tile={requested}, count={count}",
                      f"W{layer} column block {n}: its {kt} K tiles" if count == kt else
                      f"W{layer} column block {n}: K tiles {k}..{k + count - 1}")
                    requested += count
                flags = ", switch" + (", accumulate" if k else "")
                t(f"mmc   ub={ub_in + k * B}, rows={B}, acc={n * B}{flags}",
                  f"acc[{n * B}..{n * B + B - 1}] {'+=' if k else '='} "
                  f"block {k} x W{layer}[{k},{n}]")
        t(f"cfg   reg=out_zero_point, value={zero}", f"zero point of {'h' if layer == 1 else 'y'}")
        for n in range(nt):
            t(f"ldq   ub={ub_q + table * q_rows}", f"bias, multiplier, shift of N tile {n}")
            t(f"act   acc={n * B}, ub={ub_out + n * B}, rows={B}" +
              (f", func={func}" if func != "none" else ""),
              f"{'h' if layer == 1 else 'y'} block {n}")
            table += 1
    t.comment()
    t(f"whm   ub={ub_y}, rows={B * nt2}, host=0x{MLP_HOST_Y:x}", "y, column-blocked")
    t("halt")

    return ChipProgram(
        name="mlp", config=cfg, text=t.text(), weights=np.array(tiles, dtype=np.int8),
        host={MLP_HOST_X: blocked(x, R), MLP_HOST_Q: tables},
        expected_host={MLP_HOST_Y: blocked(y_host, R)},
        reference=dict(x=x, w1=w1[:, real1], b1=b1[real1], m1=m1, s1=s1, acc1=acc1[:, real1], h=h,
                       w2=w2[real_k2][:, real2], b2=b2[real2], m2=m2, s2=s2,
                       acc2=acc2[:, real2], y=y, x_zero=x_zero, h_zero=h_zero, y_zero=y_zero))


# ---------------------------------------------------------------------------------------
# Convolution with pooling

CONV_HOST_IMAGE = 0x40000
CONV_HOST_Q = 0x48000
CONV_HOST_OUT = 0x50000     # pooling variant i writes to CONV_HOST_OUT + i * 0x1000

_POOL_ARGS = {
    "none": "",
    "max": ", pool=max, pool_size={k}, pool_stride={s}, in_w={w}",
    "avg": ", pool=avg, pool_size={k}, pool_stride={s}, in_w={w}",
    "global_avg": ", pool=global_avg",
}


def conv_program(seed=2, *, size=8, c_in=8, c_out=None, kernel=3, stride=1, padding=0,
                 pools=("max",), pool_size=2, pool_stride=2, unsigned_input=False,
                 unsigned_output=False, x_zero=None, out_zero=None, name="conv",
                 config=PROGRAM_CONFIG):
    """A `kernel` x `kernel` convolution of one `size` x `size` image with
    `c_in` channels into `c_out` (default ``config.cols``), ReLU, and one ACT
    per entry of `pools` (``none``, ``max``, ``avg``, ``global_avg``) over the
    same accumulators, each result written to host memory.

    The padded image is stored one pixel per UB row (its channels across the
    row), ``size + 2 * padding`` pixels per image row; padding pixels hold the
    input zero point, i.e. a real zero. One MMC per kernel tap reads the
    pixels that tap needs with CONV addressing and accumulates.
    """
    cfg = config
    R, C = cfg.rows, cfg.cols
    c_out = C if c_out is None else c_out
    if not (1 <= c_in <= R and 1 <= c_out <= C):
        raise ValueError(f"c_in must be 1..{R} and c_out 1..{C}")
    rng = np.random.default_rng(seed)
    x_zero = (128 if unsigned_input else -5) if x_zero is None else x_zero
    out_zero = (20 if unsigned_output else -12) if out_zero is None else out_zero
    lo_in, hi_in = (0, 256) if unsigned_input else (-128, 128)
    side = size + 2 * padding
    out_side = (side - kernel) // stride + 1
    n_out = out_side * out_side

    x = rng.integers(lo_in, hi_in, size=(size, size, c_in))
    w = rng.integers(-127, 128, size=(kernel, kernel, c_in, c_out))
    bias = rng.integers(-5000, 5000, size=c_out)

    # Reference: direct convolution of the real (zero-point-free) image with
    # zero padding.
    real = np.zeros((side, side, c_in), dtype=np.int64)
    real[padding:padding + size, padding:padding + size] = x - x_zero
    acc = np.zeros((out_side, out_side, c_out), dtype=np.int64)
    for oy in range(out_side):
        for ox in range(out_side):
            for co in range(c_out):
                total = int(bias[co])
                for dy in range(kernel):
                    for dx in range(kernel):
                        for ci in range(c_in):
                            total += int(real[oy * stride + dy, ox * stride + dx, ci]) * \
                                int(w[dy, dx, ci, co])
                acc[oy, ox, co] = total
    # All `cols` columns: unused output channels have zero weights and
    # parameters.
    acc_cols = np.zeros((n_out, C), dtype=np.int64)
    acc_cols[:, :c_out] = acc.reshape(n_out, c_out)
    mult, shift = _multipliers(rng, acc_cols, 200 if unsigned_output else 100)
    mult[c_out:], shift[c_out:] = 0, 0
    low, high = _bounds("relu", unsigned_output, out_zero)
    act = requantize(acc_cols, np.zeros(C, dtype=np.int64), mult, shift, out_zero, low, high)
    image = act.reshape(out_side, out_side, C)
    results = []
    for pool in pools:
        if pool == "none":
            results.append(act)
        elif pool == "max":
            results.append(_max_pool(image, pool_size, pool_stride).reshape(-1, C))
        elif pool == "avg":
            results.append(_avg_pool(image, pool_size, pool_stride).reshape(-1, C))
        elif pool == "global_avg":
            results.append(_global_avg(act))
        else:
            raise ValueError(f"unknown pooling {pool!r}")

    # What the chip is given.
    chip_bias = np.zeros(C, dtype=np.int64)
    chip_bias[:c_out] = bias - x_zero * w.sum(axis=(0, 1, 2))
    _check_int32(acc, chip_bias)
    stored = np.zeros((side, side, R), dtype=np.int64)
    stored[:, :, :c_in] = x_zero
    stored[padding:padding + size, padding:padding + size, :c_in] = x
    tiles = np.zeros((kernel * kernel, R, C), dtype=np.int64)
    for dy in range(kernel):
        for dx in range(kernel):
            tiles[dy * kernel + dx, :c_in, :c_out] = w[dy, dx]

    # Memory map.
    q_rows = ldq_rows(cfg)
    ub_image = 0
    ub_q = side * side
    ub_out = [ub_q + q_rows]
    for result in results:
        ub_out.append(ub_out[-1] + len(result))
    if ub_out[-1] > cfg.ub_rows or n_out > cfg.acc_rows or kernel * kernel > cfg.weight_mem_tiles:
        raise ValueError("the convolution does not fit the chip")
    if kernel > cfg.weight_fifo_tiles + 2:
        raise ValueError("a kernel row needs more weight tiles than RW may request ahead")

    signed = "uint8" if unsigned_input else "int8"
    t = _Text(f"{kernel}x{kernel} convolution, stride {stride}, padding {padding}, of one "
              f"{size}x{size} {signed} image, {c_in} -> {c_out} channels, ReLU, "
              f"pooling: {', '.join(pools)}",
              f"UB rows: image {ub_image}..{ub_q - 1} (pixel (y, x) at y*{side} + x), "
              f"LDQ table {ub_q}..{ub_q + q_rows - 1}, results from {ub_out[0]}",
              f"accumulator rows 0..{n_out - 1}: the {out_side}x{out_side} output pixels")
    t.comment()
    t(f"rhm   ub={ub_image}, rows={side * side}, host=0x{CONV_HOST_IMAGE:x}",
      f"the {'padded ' if padding else ''}image")
    t(f"rhm   ub={ub_q}, rows={q_rows}, host=0x{CONV_HOST_Q:x}", "bias, multiplier, shift")
    conv = f"conv(out_w={out_side}, col_step={stride}, row_step={stride * side})"
    unsigned_flag = ", unsigned" if unsigned_input else ""
    for dy in range(kernel):
        t(f"rw    tile={dy * kernel}, count={kernel}", f"kernel row {dy}")
        for dx in range(kernel):
            flags = ", switch" + (", accumulate" if dy or dx else "") + unsigned_flag
            t(f"mmc   ub={ub_image + dy * side + dx}, rows={n_out}, acc=0{flags}, {conv}",
              f"tap ({dy}, {dx})")
    t(f"ldq   ub={ub_q}")
    t(f"cfg   reg=out_zero_point, value={out_zero}")
    out_flag = ", unsigned" if unsigned_output else ""
    for i, (pool, result) in enumerate(zip(pools, results)):
        args = _POOL_ARGS[pool].format(k=pool_size, s=pool_stride, w=out_side)
        t(f"act   acc=0, ub={ub_out[i]}, rows={n_out}, func=relu{args}{out_flag}",
          f"{pool} pooling: {len(result)} row{'s' if len(result) > 1 else ''}"
          if pool != "none" else "no pooling")
    for i, result in enumerate(results):
        t(f"whm   ub={ub_out[i]}, rows={len(result)}, host=0x{CONV_HOST_OUT + i * 0x1000:x}")
    t("halt")

    return ChipProgram(
        name=name, config=cfg, text=t.text(), weights=tiles.astype(np.int8),
        host={CONV_HOST_IMAGE: _bytes(stored.reshape(-1)),
              CONV_HOST_Q: ldq_table(cfg, chip_bias, mult, shift)},
        expected_host={CONV_HOST_OUT + i * 0x1000: _bytes(r) for i, r in enumerate(results)},
        reference=dict(x=x, w=w, bias=bias, acc=acc, multiplier=mult, shift=shift, act=act,
                       **{f"pool_{p}": r for p, r in zip(pools, results)}))


# ---------------------------------------------------------------------------------------
# Directed programs


def dma_program(seed=3, *, config=PROGRAM_CONFIG):
    """RHM and WHM of random bytes at odd host addresses, overlapping
    sources, partial copies back, zero-row copies, the last UB row."""
    cfg = config
    R = cfg.rows
    rng = np.random.default_rng(seed)
    src = 0x10003
    data = rng.integers(0, 256, size=16 * R, dtype=np.uint8).tobytes()
    last = cfg.ub_rows - 1
    t = _Text("RHM/WHM round trips at odd host addresses")
    t(f"rhm   ub=7, rows=5, host=0x{src:x}", "host bytes 0..5R-1 -> UB 7..11")
    t(f"rhm   ub=20, rows=3, host=0x{src + 14:x}", "overlapping source, 14 bytes on")
    t(f"rhm   ub={last}, rows=1, host=0x{src + 5 * R:x}", "the last UB row")
    t("rhm   ub=30, rows=0, host=0xffffffffffffffff", "no rows: does nothing")
    t("whm   ub=7, rows=5, host=0x20001", "round trip")
    t("whm   ub=21, rows=2, host=0x20407", "part of the second copy")
    t(f"whm   ub={last}, rows=1, host=0x20805")
    t("whm   ub=0, rows=0, host=0x30000", "no rows: does nothing")
    t("rhm   ub=40, rows=2, host=0x20001", "read back what WHM wrote: RHM waits for it")
    t("halt")
    ub = {7 + i: data[i * R:(i + 1) * R] for i in range(5)}
    ub.update({20 + i: data[14 + i * R:14 + (i + 1) * R] for i in range(3)})
    ub[last] = data[5 * R:6 * R]
    ub.update({40: data[0:R], 41: data[R:2 * R]})
    ub.update({30: bytes(R), 0: bytes(R)})
    return ChipProgram(
        name="dma", config=cfg, text=t.text(), weights=np.zeros((0, R, cfg.cols), dtype=np.int8),
        host={src: data},
        expected_host={0x20001: data[:5 * R], 0x20407: data[14 + R:14 + 3 * R],
                       0x20805: data[5 * R:6 * R]},
        expected_ub=ub)


def mmc_program(seed=4, *, config=PROGRAM_CONFIG):
    """RW and MMC: switch, keep the tile, accumulate, unsigned activations,
    a convolution stride, zero rows."""
    cfg = config
    R, C = cfg.rows, cfg.cols
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(8, R))
    raw[0, 0], raw[1, 1] = 128, 255          # extremes of both readings
    signed = np.where(raw >= 128, raw - 256, raw)
    tiles = rng.integers(-128, 128, size=(3, R, C))
    tiles[0, 0, 0] = -128
    t = _Text("RW and MMC in isolation")
    t("rhm   ub=0, rows=8, host=0x10000")
    t("rw    tile=0, count=2")
    t("mmc   ub=0, rows=8, acc=0, switch", "acc 0..7 = x @ T0 (int8)")
    t("mmc   ub=0, rows=8, acc=8, unsigned", "acc 8..15 = x @ T0 (uint8), same tile")
    t("mmc   ub=0, rows=8, acc=0, switch, accumulate", "acc 0..7 += x @ T1")
    t("mmc   ub=2, rows=4, acc=8, accumulate, unsigned", "acc 8..11 += x[2..5] @ T1 (uint8)")
    t("rw    tile=2, count=1")
    t("mmc   ub=0, rows=0, acc=63", "no rows: does nothing, switches nothing")
    t("mmc   ub=0, rows=6, acc=16, switch, conv(out_w=2, col_step=3, row_step=2)",
      "rows 0, 3, 2, 5, 4, 7 @ T2")
    t("mmc   ub=1, rows=4, acc=16, accumulate, conv(out_w=4, col_step=0, row_step=1)",
      "row 1 four times, += @ T2")
    t("halt")
    acc = {}
    first = signed @ tiles[0] + signed @ tiles[1]
    second = raw @ tiles[0]
    second[0:4] += raw[2:6] @ tiles[1]
    order = [0, 3, 2, 5, 4, 7]
    third = signed[order] @ tiles[2]
    third[:4] += signed[[1, 1, 1, 1]] @ tiles[2]
    for i in range(8):
        acc[i], acc[8 + i] = first[i].tolist(), second[i].tolist()
    for i in range(6):
        acc[16 + i] = third[i].tolist()
    acc[63] = [0] * C
    return ChipProgram(
        name="mmc", config=cfg, text=t.text(), weights=tiles.astype(np.int8),
        host={0x10000: _bytes(raw.reshape(-1))}, expected_acc=acc)


def _act_setup(rng, cfg, rows):
    """Random activations, a weight tile, their sums, and per-column bias,
    multiplier and shift for the ACT tests."""
    R, C = cfg.rows, cfg.cols
    x = rng.integers(-128, 128, size=(rows, R))
    tile = rng.integers(-128, 128, size=(1, R, C))
    # Columns 2 and 3 get small sums, so their left shift and identity
    # multipliers give results across the int8 range.
    tile[0, :, 2] = 0
    tile[0, 0, 2] = 1
    tile[0, :, 3] = rng.integers(-1, 2, size=R)
    acc = x @ tile[0]
    bias = rng.integers(-3000, 3000, size=C)
    bias[2], bias[3] = 0, rng.integers(-40, 40)
    # Per column: a typical right shift, a left shift, the identity, a
    # negative multiplier, zero, and the extremes of both directions.
    mult, shift = _multipliers(rng, acc + bias, 100)
    mult[1], shift[1] = quantize_multiplier(0.003)               # shift -8
    mult[2], shift[2] = quantize_multiplier(1.2)                 # a left shift
    mult[3], shift[3] = INT32_MAX, 0                              # the identity
    mult[4] = -mult[4]                                            # a negative multiplier
    mult[5], shift[5] = 0, 0                                      # zero
    if C > 6:
        mult[6], shift[6] = 1 << 30, -31                          # the largest right shift
    if C > 7:
        mult[7], shift[7] = INT32_MAX, -7                         # a power of two: x / 128
    return x, tile, acc, bias, mult, shift


def act_functions_program(seed=5, *, config=PROGRAM_CONFIG):
    """ACT with every function (none, relu, clamp, sigmoid, tanh), int8 and
    uint8 output, CFG registers (saturated to -256..255), LDQ and LDL tables
    replaced between ACTs."""
    cfg = config
    R, C = cfg.rows, cfg.cols
    rng = np.random.default_rng(seed)
    n = 12
    q_rows, l_rows = ldq_rows(cfg), ldl_rows(cfg)
    ub_q, ub_q2 = n, n + q_rows
    ub_lut = ub_q2 + q_rows
    out = ub_lut + l_rows
    x, tile, acc, bias, mult, shift = _act_setup(rng, cfg, n)
    bias2 = rng.integers(-100000, 100000, size=C)
    mult2, shift2 = _multipliers(rng, acc + bias2, 100)
    sig = sigmoid_table(0.05, -3, 1 / 256, -128, False)
    tanh = tanh_table(0.04, 2, 1 / 128, 0, False)
    sig_u = sigmoid_table(0.05, 100, 1 / 256, 0, True)

    expected = {}
    t = _Text("ACT with every function; CFG, LDQ, LDL")
    t(f"rhm   ub=0, rows={n}, host=0x10000", "activations")
    t(f"rhm   ub={ub_q}, rows={2 * q_rows}, host=0x11000", "two LDQ tables")
    t("rw    tile=0, count=1")
    t(f"mmc   ub=0, rows={n}, acc=0, switch")
    t(f"ldq   ub={ub_q}")
    state = dict(bias=bias, mult=mult, shift=shift, zero=0, cmin=0, cmax=0, lut=None)
    ub = out

    def act(func, unsigned=False, comment=None):
        nonlocal ub
        flag = ", unsigned" if unsigned else ""
        t(f"act   acc=0, ub={ub}, rows={n}" + (f", func={func}" if func != "none" else "") + flag,
          comment)
        table_func = func in ("sigmoid", "tanh")
        low, high = _bounds(func, unsigned, state["zero"], state["cmin"], state["cmax"])
        v = requantize(acc, state["bias"], state["mult"], state["shift"],
                       _saturate9(state["zero"]), low, high)
        if table_func:
            v = state["lut"][v if unsigned else v + 128]
        for i in range(n):
            expected[ub + i] = _bytes(v[i])
        ub += n

    def cfg_reg(reg, value):
        t(f"cfg   reg={reg}, value={value}")
        state[{"out_zero_point": "zero", "clamp_min": "cmin", "clamp_max": "cmax"}[reg]] = value

    act("none", comment="registers at reset: zero point 0")
    cfg_reg("out_zero_point", 5)
    act("none")
    act("relu")
    act("relu", unsigned=True, comment="uint8: max(q, 5)")
    cfg_reg("clamp_min", -20)
    cfg_reg("clamp_max", 60)
    act("clamp")
    cfg_reg("clamp_min", -1000)
    act("clamp", comment="clamp_min acts as -256")
    cfg_reg("clamp_max", 1000)
    act("clamp", unsigned=True, comment="clamp_max acts as 255")
    cfg_reg("out_zero_point", -3)
    t(f"rhm   ub={ub_lut}, rows={l_rows}, host=0x12000", "the sigmoid table")
    t(f"ldl   ub={ub_lut}")
    state["lut"] = sig
    act("sigmoid")
    t(f"rhm   ub={ub_lut}, rows={l_rows}, host=0x12100", "the tanh table, over the sigmoid's")
    t(f"ldl   ub={ub_lut}")
    state["lut"] = tanh
    cfg_reg("out_zero_point", 2)
    act("tanh")
    t(f"rhm   ub={ub_lut}, rows={l_rows}, host=0x12200", "a uint8 sigmoid table")
    t(f"ldl   ub={ub_lut}")
    state["lut"] = sig_u
    cfg_reg("out_zero_point", 100)
    act("sigmoid", unsigned=True)
    cfg_reg("out_zero_point", -300)
    act("relu", comment="zero point acts as -256")
    t(f"ldq   ub={ub_q2}", "replace the table")
    state.update(bias=bias2, mult=mult2, shift=shift2)
    cfg_reg("out_zero_point", -7)
    act("none")
    t("halt")
    if ub > cfg.ub_rows:
        raise ValueError("the ACT test does not fit the unified buffer")

    tables = ldq_table(cfg, bias, mult, shift) + ldq_table(cfg, bias2, mult2, shift2)
    return ChipProgram(
        name="act_functions", config=cfg, text=t.text(), weights=tile.astype(np.int8),
        host={0x10000: _bytes(x.reshape(-1)), 0x11000: tables,
              **{0x12000 + 0x100 * i: bytes(tab.astype(np.uint8).tolist()).ljust(l_rows * R, b"\0")
                 for i, tab in enumerate((sig, tanh, sig_u))}},
        expected_ub={**expected, ub_lut: bytes(sig_u[:R].astype(np.uint8).tolist())},
        reference=dict(acc=acc, bias=bias, multiplier=mult, shift=shift))


def act_pooling_program(seed=6, *, config=PROGRAM_CONFIG):
    """ACT with every pooling mode: max and average windows of sizes 1..4 and
    strides 1..3, global average, int8 and uint8, an image narrower than
    the batch."""
    cfg = config
    C = cfg.cols
    rng = np.random.default_rng(seed)
    in_h, in_w = 4, 6
    n = in_h * in_w
    ub_q = n
    out = ub_q + ldq_rows(cfg)
    x, tile, acc, bias, mult, shift = _act_setup(rng, cfg, n)
    zero = -4
    t = _Text(f"ACT with every pooling mode, over a {in_h}x{in_w} image")
    t(f"rhm   ub=0, rows={n}, host=0x10000", "activations")
    t(f"rhm   ub={ub_q}, rows={ldq_rows(cfg)}, host=0x11000", "LDQ table")
    t("rw    tile=0, count=1")
    t(f"mmc   ub=0, rows={n}, acc=0, switch")
    t(f"ldq   ub={ub_q}")
    t(f"cfg   reg=out_zero_point, value={zero}")
    expected = {}
    ub = out

    def values(func, unsigned):
        low, high = _bounds(func, unsigned, zero)
        return requantize(acc, bias, mult, shift, zero, low, high)

    def act(pool, func="none", unsigned=False, k=None, s=None, w=in_w, rows=n, first=0):
        nonlocal ub
        v = values(func, unsigned)[first:first + rows]
        if pool == "max":
            result = _max_pool(v.reshape(rows // w, w, C), k, s).reshape(-1, C)
        elif pool == "avg":
            result = _avg_pool(v.reshape(rows // w, w, C), k, s).reshape(-1, C)
        elif pool == "global_avg":
            result = _global_avg(v)
        else:
            result = v
        args = (f", func={func}" if func != "none" else "") + \
            (f", pool={pool}" if pool != "none" else "") + \
            (f", pool_size={k}, pool_stride={s}, in_w={w}" if pool in ("max", "avg") else "") + \
            (", unsigned" if unsigned else "")
        t(f"act   acc={first}, ub={ub}, rows={rows}{args}",
          f"{len(result)} row{'s' if len(result) > 1 else ''}")
        for i, row in enumerate(result):
            expected[ub + i] = _bytes(row)
        ub += len(result)

    act("max", "relu", k=2, s=2)
    act("max", k=3, s=1)
    act("max", k=1, s=2)
    act("max", "relu", unsigned=True, k=2, s=1)
    act("avg", k=2, s=2)
    act("avg", k=3, s=2)
    act("avg", k=4, s=1)
    act("avg", "relu", unsigned=True, k=2, s=3)
    act("avg", k=2, s=1, w=5, rows=20, first=2)
    act("global_avg")
    act("global_avg", "relu", unsigned=True)
    act("global_avg", rows=5, first=7)
    act("none", rows=3, first=20)
    t("halt")
    if ub > cfg.ub_rows:
        raise ValueError("the pooling test does not fit the unified buffer")
    return ChipProgram(
        name="act_pooling", config=cfg, text=t.text(), weights=tile.astype(np.int8),
        host={0x10000: _bytes(x.reshape(-1)), 0x11000: ldq_table(cfg, bias, mult, shift)},
        expected_ub=expected,
        reference=dict(acc=acc, bias=bias, multiplier=mult, shift=shift))


def control_program(seed=7, *, config=PROGRAM_CONFIG):
    """NOP, SYNC, INT codes in order, HALT: nothing after it runs."""
    cfg = config
    R = cfg.rows
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=4 * R, dtype=np.uint8).tobytes()
    t = _Text("NOP, SYNC, INT and HALT")
    t("nop")
    t("rhm   ub=0, rows=2, host=0x10000")
    t("sync", "waits for the RHM")
    t("int   code=0x1234")
    t("nop")
    t("whm   ub=0, rows=2, host=0x20000")
    t("int   code=0", "code 0, like HALT's")
    t(f"rhm   ub=2, rows=2, host=0x{0x10000 + 2 * R:x}")
    t("sync")
    t("nop")
    t("int   code=0xffff")
    t("halt", "stops here: nothing below runs")
    t("rhm   ub=8, rows=2, host=0x10000")
    t("int   code=99")
    t("whm   ub=0, rows=2, host=0x30000")
    t("halt")
    ub = {0: data[:R], 1: data[R:2 * R], 2: data[2 * R:3 * R], 3: data[3 * R:4 * R],
          8: bytes(R), 9: bytes(R)}
    return ChipProgram(
        name="control", config=cfg, text=t.text(),
        weights=np.zeros((0, R, cfg.cols), dtype=np.int8),
        host={0x10000: data}, expected_host={0x20000: data[:2 * R]},
        expected_ub=ub, interrupts=[0x1234, 0, 0xFFFF])


def _conv_avg(seed=8, **kwargs):
    """The second convolution: a 6x6 uint8 image padded to 8x8, 3 input
    channels, uint8 output, 2x2 average pooling and global average."""
    return conv_program(seed, size=6, c_in=3, padding=1, pools=("avg", "global_avg"),
                        unsigned_input=True, unsigned_output=True, name="conv_avg", **kwargs)


PROGRAMS = {
    "mlp": mlp_program,
    "conv_max": lambda seed=2, **kw: conv_program(seed, name="conv_max", **kw),
    "conv_avg": _conv_avg,
    "dma": dma_program,
    "mmc": mmc_program,
    "act_functions": act_functions_program,
    "act_pooling": act_pooling_program,
    "control": control_program,
}
