"""cocotb testbench: the activation pipeline RTL against its numpy golden model.

Launched by ``tests/test_activation_pipeline_rtl.py`` with the configuration
in ``TPU_CONFIG`` (the Verilog was generated for it, line buffer of
``pool_max_width``) and the seed in ``TPU_SEED``; every failure message
carries the seed.
"""

import os
import random
from dataclasses import replace

import cocotb
import numpy as np

from ...hdl.activation_pipeline import ActivationPipeline
from ...hdl.activation_settings import (ChannelWrite, InputRow, LutWrite, SettingsLayout,
                                       MAX_POOL_COUNT, MAX_POOL_SIZE)
from ...models.activation_model import (ActivationSettings, Function, Pooling,
                               multiply_by_quantized_multiplier,
                               multiply_by_quantized_multiplier_single_round, output_rows,
                               quantize_multiplier,
                               run_operation, sigmoid_table, tanh_table)
from ..harness import config_from_env
from ..stimulus.mlas_ties import differing_ties
from ..host.streams import CycleLoop, StreamSource, pack_array, pack_fields, start_clock_and_reset


INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


class StreamSink:
    """Drives ``<prefix>__ready`` (low with probability `backpressure`) and
    records every transfer; checks that a stalled row stays valid and unchanged."""

    def __init__(self, dut, prefix, *, backpressure=0.0, rng=None):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.backpressure = backpressure
        self.rng = rng or random.Random(0)
        self.received = []        # (cycle, word)
        self.errors = []
        self._held = None
        self.ready.value = 0

    def drive(self, cycle):
        self.ready.value = int(self.rng.random() >= self.backpressure)

    def sample(self, cycle):
        if int(self.valid.value):
            word = self.payload.value.to_unsigned()
            if self._held is not None and word != self._held:
                self.errors.append(f"cycle {cycle}: a stalled output row changed")
            if int(self.ready.value):
                self.received.append((cycle, word))
                self._held = None
            else:
                self._held = word
        elif self._held is not None:
            self.errors.append(f"cycle {cycle}: a stalled output row was withdrawn")
            self._held = None


class TB:
    """Writes settings, streams operations, and checks every output row."""

    def __init__(self, dut, *, idle=0.0, backpressure=0.0):
        self.dut = dut
        self.config = config_from_env()
        self.cols = self.config.cols
        self.max_width = self.config.pool_max_width
        self.latency = ActivationPipeline.latency_of(self.config)
        self.row_cycles = self.config.act_row_cycles
        self.seed = int(os.environ.get("TPU_SEED", "0"))
        self.rng = np.random.default_rng(self.seed)
        pyrng = random.Random(self.seed)
        dut._log.info("config %s, seed %d (replay with TPU_SEED=%d), idle %.2f, backpressure %.2f",
                      self.config.name, self.seed, self.seed, idle, backpressure)
        self.rows = StreamSource(dut, "i", idle=idle, rng=pyrng)
        self.settings_in = StreamSource(dut, "set_settings", rng=pyrng)
        self.channel_in = StreamSource(dut, "set_channel", rng=pyrng)
        self.lut_in = StreamSource(dut, "set_lut", rng=pyrng)
        self.sink = StreamSink(dut, "o", backpressure=backpressure, rng=pyrng)
        self.loop = CycleLoop(dut.clk, sources=[self.rows, self.settings_in, self.channel_in,
                                                self.lut_in, self.sink])
        self.row_layout = InputRow(self.cols)
        self.settings_layout = SettingsLayout(self.max_width, self.config.mlas_rounding)
        self.channel_layout = ChannelWrite(self.cols)
        self.lut_layout = LutWrite()
        self.current = ActivationSettings(cols=self.cols)    # the reset values
        self.lut_written = False
        self.expected = []         # (op, output row bytes, completing input row number)
        self.ops = []              # (settings, first input row number, rows)
        self.rows_sent = 0

    def fail(self, message):
        raise AssertionError(f"{message} [config {self.config.name}, seed {self.seed}]")

    async def reset(self):
        await start_clock_and_reset(self.dut)

    # Stimulus ------------------------------------------------------------

    def _send_changed_columns(self, settings, old):
        """Queue a column write for each column whose settings differ from `old`."""
        for n in range(self.cols):
            if (settings.bias[n], settings.multiplier[n], settings.shift[n]) != \
                    (old.bias[n], old.multiplier[n], old.shift[n]):
                self.channel_in.send(pack_fields(self.channel_layout, {
                    "col": n, "bias": settings.bias[n], "multiplier": settings.multiplier[n],
                    "shift": settings.shift[n]}))

    async def configure(self, settings):
        """Write what differs from the current settings, in the order a
        sequencer would: only after the previous operation's rows are taken."""
        await self.loop.run_until(lambda: self.rows.done, timeout=50_000 * self.row_cycles,
                                  what="rows to be taken")
        old = self.current
        self._send_changed_columns(settings, old)
        # The table memory keeps its contents through reset: write it whole once.
        changed = np.flatnonzero(settings.lut != old.lut) if self.lut_written else range(256)
        self.lut_written = True
        for index in changed:
            self.lut_in.send(pack_fields(self.lut_layout, {"index": index,
                                                           "value": settings.lut[index]}))
        names = [name for name, _ in self.settings_layout]
        if any(getattr(settings, name) != getattr(old, name) for name in names):
            self.settings_in.send(pack_fields(self.settings_layout, {
                name: int(getattr(settings, name)) for name in names}))
        await self.loop.run_until(
            lambda: self.settings_in.done and self.channel_in.done and self.lut_in.done,
            timeout=50_000 * self.row_cycles, what="settings to be written")
        self.current = settings

    async def operation(self, settings, acc, *, at_once=False):
        """One operation: settings, then the rows, the last one flagged.
        `at_once`: the column and settings writes (the table must not
        change) and the rows are offered together once the rows before are
        taken, so that the first row is taken in the cycle after the last
        write."""
        acc = np.asarray(acc, dtype=np.int64).reshape(-1, self.cols)
        if at_once:
            await self.loop.run_until(lambda: self.rows.done, timeout=50_000 * self.row_cycles,
                                      what="rows to be taken")
            old = self.current
            assert np.array_equal(settings.lut, old.lut)
            self._send_changed_columns(settings, old)
            names = [name for name, _ in self.settings_layout]
            if any(getattr(settings, name) != getattr(old, name) for name in names):
                self.settings_in.send(pack_fields(self.settings_layout, {
                    name: int(getattr(settings, name)) for name in names}))
            self.current = settings
        else:
            await self.configure(settings)
        out = run_operation(settings, acc)
        ends = output_rows(settings, len(acc))
        op = len(self.ops)
        self.ops.append((settings, self.rows_sent, len(acc)))
        for row, end in zip(out, ends):
            self.expected.append((op, row, self.rows_sent + int(end)))
        for b, row in enumerate(acc):
            self.rows.send(pack_fields(self.row_layout, {
                "data": pack_array(row, 32), "last": int(b == len(acc) - 1)}))
        self.rows_sent += len(acc)

    # Checking ------------------------------------------------------------

    async def finish(self):
        await self.loop.run_until(
            lambda: self.rows.done and len(self.sink.received) >= len(self.expected),
            timeout=20 * self.row_cycles * (self.rows_sent + 100), what="all output rows")
        for _ in range(self.latency + 4):
            await self.loop.step()
        if int(self.dut.busy.value):
            self.fail("busy still high after the last output")
        self.check()

    def unpack(self, word):
        return np.array([(word >> (8 * n)) & 0xFF for n in range(self.cols)], dtype=np.uint8)

    def check(self):
        if self.sink.errors:
            self.fail("stream protocol: " + "; ".join(self.sink.errors[:3]))
        if len(self.sink.received) != len(self.expected):
            self.fail(f"{len(self.sink.received)} output rows, expected {len(self.expected)}")
        for i, ((cycle, word), (op, want, _)) in enumerate(zip(self.sink.received, self.expected)):
            got = self.unpack(word)
            if not np.array_equal(got, want):
                settings = self.ops[op][0]
                self.fail(f"output row {i} (operation {op}, cycle {cycle}): got {got.tolist()}, "
                          f"expected {want.tolist()}; settings {describe(settings)}")

    def check_timing(self):
        """Every output row `latency` cycles after the row that completes it."""
        accepted = self.rows.accepted
        for i, ((cycle, _), (_, _, end)) in enumerate(zip(self.sink.received, self.expected)):
            if cycle - accepted[end] != self.latency:
                self.fail(f"output row {i} came {cycle - accepted[end]} cycles after input row "
                          f"{end}; the latency is {self.latency}")

    # Random settings and data -------------------------------------------

    def random_channels(self, kind=None):
        """Per-column bias, multiplier and shift: from real multipliers, or raw."""
        cols = self.cols
        rng = self.rng
        kind = kind or str(rng.choice(["real", "real", "real", "raw"]))
        if kind == "real":
            reals = np.exp(rng.uniform(np.log(1e-5), np.log(4.0), size=cols))
            pairs = [quantize_multiplier(r) for r in reals]
            multiplier = np.array([p[0] for p in pairs])
            shift = np.array([p[1] for p in pairs])
            bias = rng.integers(-5000, 5000, size=cols)
        else:
            multiplier = rng.integers(INT32_MIN, INT32_MAX, size=cols, endpoint=True)
            shift = rng.integers(-32, 32, size=cols)
            bias = rng.integers(INT32_MIN, INT32_MAX, size=cols, endpoint=True)
        return bias, multiplier, shift

    def random_settings(self, function=None, pool=None):
        rng = self.rng
        unsigned = bool(rng.random() < 0.5)
        low, high = (0, 255) if unsigned else (-128, 127)
        if function is None:
            function = Function(int(rng.integers(0, 5)))
        zero_point = int(rng.integers(low, high + 1)) if rng.random() < 0.9 \
            else int(rng.integers(-256, 256))
        clamp_min, clamp_max = sorted(int(v) for v in rng.integers(-256, 256, size=2))
        if rng.random() < 0.1:
            clamp_min, clamp_max = clamp_max, clamp_min       # high wins
        bias, multiplier, shift = self.random_channels()
        single_round = bool(rng.random() < 0.45)
        # ONNX Runtime's rounding, mostly with float32 significands (the
        # columns whose multiplier is not one round once), where it is built.
        mlas_round = single_round and bool(self.config.mlas_rounding) and bool(rng.random() < 0.5)
        if mlas_round:
            float32 = rng.random(size=self.cols) < 0.8
            multiplier = np.where(float32, multiplier & ~0x7F, multiplier)
        lut = None
        if function in (Function.SIGMOID, Function.TANH):
            if rng.random() < 0.2:
                lut = rng.integers(0, 256, size=256)
            else:
                builder = sigmoid_table if function == Function.SIGMOID else tanh_table
                out_scale, out_zero = (1 / 256, 0 if unsigned else -128) \
                    if function == Function.SIGMOID else (1 / 128, 128 if unsigned else 0)
                if rng.random() < 0.3:
                    out_scale = float(rng.uniform(0.002, 0.05))
                    out_zero = int(rng.integers(low, high + 1))
                in_scale = float(rng.uniform(0.01, 0.2))
                lut = builder(in_scale, zero_point, out_scale, out_zero, unsigned)
        settings = ActivationSettings(
            cols=self.cols, bias=bias, multiplier=multiplier, shift=shift,
            function=function, unsigned=unsigned, single_round=single_round,
            mlas_round=mlas_round, zero_point=zero_point, clamp_min=clamp_min, clamp_max=clamp_max,
            lut=lut if lut is not None else self.current.lut)
        return self.random_pooling(settings, pool)

    def random_pooling(self, settings, pool=None, *, size=None, stride=None):
        rng = self.rng
        if pool is None:
            pool = Pooling(int(rng.choice([0, 0, 1, 2, 3, 4])))
        if pool in (Pooling.MAX, Pooling.AVG):
            size = size or int(rng.integers(1, MAX_POOL_SIZE + 1))
            stride = stride or int(rng.integers(1, MAX_POOL_SIZE + 1))
            width = int(rng.integers(max(1, size - 1), min(self.max_width, 3 * size + 6) + 1))
            lines = int(rng.integers(size, 2 * size + 3))
            rows = width * lines - int(rng.integers(0, width))     # maybe a partial last line
            settings = settings.with_pooling(pool, size=size, stride=stride, width=width)
        else:
            rows = int(rng.integers(1, 24))
            settings = settings.with_pooling(pool, rows=rows)
        if pool in (Pooling.AVG, Pooling.GLOBAL_AVG) and rng.random() < 0.1:
            # A divisor and reciprocal that do not match: the clamp decides.
            settings = replace(settings, pool_count=int(rng.integers(1, MAX_POOL_COUNT + 1)),
                               pool_reciprocal=int(rng.integers(0, 1 << 33)))
        return settings, rows

    def random_acc(self, settings, rows):
        """Accumulators that mostly land inside the output range, some anywhere."""
        rng = self.rng
        cols = self.cols
        real = settings.multiplier * np.exp2(settings.shift.astype(np.float64) - 31)
        real = np.where(real == 0, 1.0, real)
        target = rng.uniform(-300, 400, size=(rows, cols)) - settings.zero_point
        acc = np.round(target / real) - settings.bias
        acc = np.clip(acc, INT32_MIN, INT32_MAX).astype(np.int64)
        wild = rng.random(size=(rows, cols)) < 0.1
        acc[wild] = rng.integers(INT32_MIN, INT32_MAX, size=int(wild.sum()), endpoint=True)
        return acc


def describe(settings):
    return (f"function {settings.function.name}, unsigned {settings.unsigned}, single round "
            f"{settings.single_round}, MLAS round {settings.mlas_round}, zero point "
            f"{settings.zero_point}, clamp {settings.clamp_min}..{settings.clamp_max}, pool "
            f"{settings.pool.name} k {settings.pool_size} s {settings.pool_stride} width "
            f"{settings.pool_width} count {settings.pool_count}; bias {settings.bias.tolist()}, "
            f"multiplier {settings.multiplier.tolist()}, shift {settings.shift.tolist()}")


def _seed_rng():
    return np.random.default_rng(int(os.environ.get("TPU_SEED", "0")) + 1)


@cocotb.test()
async def random_operations(dut):
    """Random settings, functions, pooling and data; random idle on the input
    and random backpressure on the output."""
    choice = _seed_rng()
    tb = TB(dut, idle=float(choice.choice([0.0, 0.2, 0.5])),
            backpressure=float(choice.choice([0.0, 0.3, 0.6])))
    await tb.reset()
    functions = list(Function) * 3
    tb.rng.shuffle(functions)
    settings = rows = None
    for function in functions:
        # Sometimes the same settings again: no write, the operations are
        # separated only by the `last` flag.
        if settings is None or tb.rng.random() >= 0.25:
            settings, rows = tb.random_settings(function)
        await tb.operation(settings, tb.random_acc(settings, rows))
    await tb.finish()


def _edge_cases(rng):
    """``(multiplier, shift, acc values)`` that land every rounding step on and
    around its ties, with results small enough to see at the output."""
    multipliers = [INT32_MAX, 1 << 30, (1 << 30) + 1, 1518500250, 1, 0, -1, INT32_MIN,
                   INT32_MIN + 1, -(1 << 30)]
    shifts = [-31, -30, -17, -8, -2, -1, 0, 1, 2, 7, 15, 30, 31]
    fixed = [0, 1, -1, 2, -2, INT32_MIN, INT32_MAX, INT32_MIN + 1, INT32_MAX - 1,
             1 << 30, -(1 << 30), (1 << 30) + 1, -(1 << 30) - 1]
    cases = []
    for multiplier in multipliers:
        for shift in shifts:
            values = set(fixed)
            right = max(-shift, 0)
            left = max(shift, 0)
            if multiplier != 0:
                for t in range(-3, 3):
                    for d in (-1, 0, 1):
                        # y / 2**right = t + 1/2 (+-1): a tie of the divide ...
                        y = (2 * t + 1) * (1 << right) // 2 + d if right else t + d
                        # ... and x around the preimage of y under the high multiply.
                        x0 = round(y * 2.0 ** 31 / multiplier / 2.0 ** left)
                        for e in (-1, 0, 1):
                            values.add(int(np.clip(x0 + e, INT32_MIN, INT32_MAX)))
                    # x * multiplier around (t + 1/2) * 2**(31 - shift): a tie of
                    # the single rounding.
                    x1 = round((t + 0.5) * 2.0 ** (31 - shift) / multiplier)
                    for e in (-1, 0, 1):
                        values.add(min(max(x1 + e, INT32_MIN), INT32_MAX))
            values.update(int(v) for v in rng.integers(INT32_MIN, INT32_MAX, size=3))
            cases.append((multiplier, shift, sorted(values)))
    return cases


@cocotb.test()
async def channel_write_then_row(dut):
    """A column's bias, multiplier and shift written and the next rows
    offered together: the first row waits while the write is offered and is
    taken in the cycle after it, with the new settings (every column in
    turn, then the first column again and again: with shared requantizers
    it is in the first group, whose settings are chosen before the row is
    taken); then single rounding switched by a settings write the same
    way."""
    tb = TB(dut)
    await tb.reset()
    cols = tb.cols
    settings = ActivationSettings(cols=cols)
    await tb.operation(settings, tb.rng.integers(-1000, 1000, size=(2, cols)))
    for k in range(2 * cols + 6):
        n = k % cols if k < 2 * cols else 0
        bias, multiplier, shift = tb.random_channels("real")
        new = replace(settings, bias=settings.bias.copy(), multiplier=settings.multiplier.copy(),
                      shift=settings.shift.copy())
        new.bias[n], new.multiplier[n], new.shift[n] = bias[n], multiplier[n], shift[n]
        settings = new
        await tb.operation(settings, tb.rng.integers(-(1 << 20), 1 << 20, size=(2, cols)),
                           at_once=True)
        await tb.loop.run_until(lambda: tb.rows.done, timeout=50_000 * tb.row_cycles,
                                what="rows to be taken")
        written, taken = tb.channel_in.accepted[-1], tb.rows.accepted[-2]
        if taken != written + 1:
            tb.fail(f"the row after column {n}'s write was taken in cycle {taken}, the write "
                    f"in cycle {written}: expected cycle {written + 1}")
    # Single rounding switched by a settings write offered with the rows:
    # small values and left shifts in every column (single rounding makes
    # no left shift), every column written before (even rounds), or the
    # first column's shift changed and written with the settings (odd
    # rounds, which end without single rounding).
    for k in range(6):
        if k % 2 == 0:
            columns = replace(settings, bias=tb.rng.integers(-32, 32, size=cols),
                              shift=tb.rng.integers(1, 4, size=cols),
                              multiplier=tb.rng.integers(1 << 30, INT32_MAX, size=cols))
            await tb.configure(columns)
        else:
            columns = replace(settings, shift=settings.shift.copy())
            columns.shift[0] = 1 + (int(settings.shift[0]) + int(tb.rng.integers(0, 2))) % 3
        settings = replace(columns, single_round=not columns.single_round)
        await tb.operation(settings, tb.rng.integers(-64, 64, size=(2, cols)), at_once=True)
        await tb.loop.run_until(lambda: tb.rows.done, timeout=50_000 * tb.row_cycles,
                                what="rows to be taken")
        written = max(tb.settings_in.accepted[-1], tb.channel_in.accepted[-1])
        taken = tb.rows.accepted[-2]
        if taken != written + 1:
            tb.fail(f"the row after a settings write was taken in cycle {taken}, the write "
                    f"in cycle {written}: expected cycle {written + 1}")
    await tb.finish()


@cocotb.test()
async def requantization_edges(dut):
    """Ties, negative ties, INT32_MIN, multipliers 2**31-1 and 2**30,
    negative multipliers, shifts -31..31, bias wrap-around and saturation at
    both bounds of int8 and uint8; every column runs its own case."""
    tb = TB(dut)
    await tb.reset()
    cols = tb.cols
    cases = _edge_cases(tb.rng)
    # The key cases always, then as many others as 12 operations hold.
    key = [c for c in cases if c[0] in (INT32_MAX, 1 << 30) and c[1] in (-31, -1, 0, 1, 31)]
    others = [c for c in cases if c not in key]
    order = tb.rng.permutation(len(others))
    cases = (key + [others[i] for i in order])[:max(len(key), 12 * cols)]
    seen = set()
    for start in range(0, len(cases), cols):
        group = cases[start:start + cols]
        group += [group[-1]] * (cols - len(group))
        rows = max(len(values) for _, _, values in group)
        acc = np.zeros((rows, cols), dtype=np.int64)
        for n, (_, _, values) in enumerate(group):
            acc[:, n] = np.resize(values, rows)
        for unsigned, zero_point, single in ((False, 0, False), (True, 128, False),
                                             (False, 0, True)):
            settings = ActivationSettings(
                cols=cols, unsigned=unsigned, zero_point=zero_point, single_round=single,
                multiplier=[m for m, _, _ in group], shift=[s for _, s, _ in group])
            await tb.operation(settings, acc)
            requant = multiply_by_quantized_multiplier_single_round if single \
                else multiply_by_quantized_multiplier
            y = requant(acc, settings.multiplier, settings.shift)
            seen.update((single, int(v)) for v in y.reshape(-1) if -3 <= v <= 3)
    # Bias wrap-around and both saturation bounds, with the identity multiplier.
    acc = np.array([INT32_MAX, INT32_MIN, INT32_MAX - 5, 1000, -1000, 127, 128, -128, -129,
                    255, 256, 0, -1])
    for unsigned in (False, True):
        for bias in (1, -1, 0, INT32_MAX, INT32_MIN):
            settings = ActivationSettings(cols=cols, unsigned=unsigned, bias=bias)
            await tb.operation(settings, np.repeat(acc[:, None], cols, axis=1))
    await tb.finish()
    if not {(s, v) for s in (False, True) for v in (-1, 0, 1)} <= seen:
        tb.fail(f"edge cases did not reach small results: {sorted(seen)}")


@cocotb.test()
async def mlas_ties(dut):
    """ONNX Runtime's float32 rounding (``mlas_round``) at and next to its
    ties, half of them where it differs from one rounding: each column its
    own multiplier and shift, each row a tie or a neighbour, int8 and
    uint8, and a column whose multiplier is not a float32 significand."""
    tb = TB(dut, backpressure=0.2)
    await tb.reset()
    if not tb.config.mlas_rounding:
        dut._log.info("skipped: no MLAS rounding in this configuration")
        return
    cols = tb.cols
    x, m, shift = differing_ties(tb.rng, 16 * cols)
    sign = tb.rng.choice([-1, 1], size=x.size)
    for start in range(0, x.size, cols):
        part = slice(start, start + cols)
        ties = x[part]
        acc = np.stack([ties, ties + 1, ties - 1, -ties])
        multiplier = (m[part] << 7) * sign[part]
        if start == 0:
            multiplier[0] += 1                      # not a float32 significand
        unsigned = bool(tb.rng.random() < 0.5)
        settings = ActivationSettings(
            cols=cols, multiplier=multiplier, shift=shift[part], single_round=True,
            mlas_round=True, unsigned=unsigned, zero_point=int(tb.rng.integers(-20, 20)) + 128 * unsigned)
        await tb.operation(settings, acc)
    await tb.finish()


@cocotb.test()
async def function_tables(dut):
    """Every entry of sigmoid and tanh tables (int8 and uint8), through the
    identity requantization, with RELU and CLAMP for comparison."""
    tb = TB(dut, backpressure=0.2)
    await tb.reset()
    cols = tb.cols
    for unsigned in (False, True):
        values = np.arange(0, 256) if unsigned else np.arange(-128, 128)
        acc = np.resize(values, (-(-256 // cols) * cols)).reshape(-1, cols)
        zero = 128 if unsigned else 0
        tables = [
            (Function.SIGMOID,
             sigmoid_table(0.06, zero, 1 / 256, 0 if unsigned else -128, unsigned)),
            (Function.TANH, tanh_table(0.03, zero, 1 / 128, 128 if unsigned else 0, unsigned)),
        ]
        for function, lut in tables:
            settings = ActivationSettings(cols=cols, unsigned=unsigned, function=function, lut=lut)
            await tb.operation(settings, acc)
        for function in (Function.RELU, Function.CLAMP):
            settings = ActivationSettings(cols=cols, unsigned=unsigned, function=function,
                                          zero_point=zero, clamp_min=zero - 20, clamp_max=zero + 30)
            await tb.operation(settings, acc - zero)
    await tb.finish()


@cocotb.test()
async def pooling_shapes(dut):
    """Max and average pooling for every window size and stride 1..4, with
    random line widths and partial last lines, then the global poolings."""
    choice = _seed_rng()
    tb = TB(dut, idle=float(choice.choice([0.0, 0.3])),
            backpressure=float(choice.choice([0.0, 0.3, 0.5])))
    await tb.reset()
    base = ActivationSettings(cols=tb.cols)
    for size in range(1, MAX_POOL_SIZE + 1):
        for stride in range(1, MAX_POOL_SIZE + 1):
            pool = Pooling.MAX if (size + stride) % 2 else Pooling.AVG
            for mode in (pool, Pooling.AVG if pool == Pooling.MAX else Pooling.MAX):
                if mode != pool and tb.rng.random() < 0.5:
                    continue
                unsigned = bool(tb.rng.random() < 0.5)
                settings, rows = tb.random_pooling(
                    ActivationSettings(cols=tb.cols, unsigned=unsigned, function=Function.RELU,
                                       zero_point=int(tb.rng.integers(-20, 20))),
                    mode, size=size, stride=stride)
                low = 0 if unsigned else -128
                acc = tb.rng.integers(low - 20, low + 276, size=(rows, tb.cols))
                await tb.operation(settings, acc)
    # 2x2 stride 2 on a wide image; a line wider than any window.
    width = tb.max_width
    settings = base.with_pooling(Pooling.AVG, size=2, stride=2, width=width)
    await tb.operation(settings, tb.rng.integers(-140, 140, size=(2 * width, tb.cols)))
    for pool in (Pooling.GLOBAL_AVG, Pooling.GLOBAL_MAX):
        for rows in (1, 2, 3, 7, 49):
            settings = base.with_pooling(pool, rows=rows)
            await tb.operation(settings, tb.rng.integers(-140, 140, size=(rows, tb.cols)))
    await tb.finish()


@cocotb.test()
async def global_average_extremes(dut):
    """Global average over the most rows it supports, with the largest sums of
    both signs, and ties of its rounding."""
    tb = TB(dut)
    await tb.reset()
    cols = tb.cols
    rows = MAX_POOL_COUNT
    # The two operations of the most rows are 8,192 of this testcase's
    # 9,600-odd rows, up to 16 cycles each, and fixed, not random: under
    # Icarus (about 1 ms a cycle) that was 370 s of one configuration's 376.
    # Verilator runs them on the same Verilog; Icarus runs everything else
    # here, whose 700-row sums pass 2**16 in both signs.
    if not cocotb.SIM_NAME.lower().startswith("icarus"):
        for unsigned, value in ((True, 255), (False, -128)):
            base = ActivationSettings(cols=cols, unsigned=unsigned)
            settings = base.with_pooling(Pooling.GLOBAL_AVG, rows=rows)
            await tb.operation(settings, np.full((rows, cols), value))
    else:
        dut._log.info("the %d-row global averages run under Verilator only", rows)
    # Sums past 2**16 with a count whose reciprocal's low 16 bits are not
    # zero, so that every piece of a 16-bit multiply's product counts.
    for unsigned, value in ((True, 100), (False, -100)):
        base = ActivationSettings(cols=cols, unsigned=unsigned)
        settings = base.with_pooling(Pooling.GLOBAL_AVG, rows=700)
        await tb.operation(settings, np.full((700, cols), value))
    # Reciprocals of 2**32 and more (a count that does not match them): the
    # reciprocal's bit 32 adds the sum's magnitude to the quotient of its
    # low bits, and the quotient passes 255 through the carry out of the
    # two low bytes (200 + 100, 2**32 + 2**31) or through the magnitude's
    # bits from 8 up alone (266 or 300, 2**32).
    for unsigned, value, count, reciprocal in ((True, 200, 1, 3 << 31), (False, 100, 2, 3 << 31),
                                               (True, 133, 2, 1 << 32), (False, 100, 3, 1 << 32)):
        base = ActivationSettings(cols=cols, unsigned=unsigned)
        settings = replace(base.with_pooling(Pooling.GLOBAL_AVG, rows=count), pool_count=1,
                           pool_reciprocal=reciprocal)
        await tb.operation(settings, np.full((count, cols), value))
    # Ties: sums of +-1.5 and +-2.5 times the count.
    base = ActivationSettings(cols=cols)
    for pattern in ([1, 2], [-1, -2], [2, 3], [-2, -3], [0, 1], [0, -1]):
        settings = base.with_pooling(Pooling.GLOBAL_AVG, rows=4)
        await tb.operation(settings, np.repeat(np.resize(pattern, 4)[:, None], cols, axis=1))
    await tb.finish()


@cocotb.test()
async def timing_and_interlock(dut):
    """No idle and no backpressure: one row every `row_cycles` cycles (one
    per cycle with a requantizer per column), every output exactly
    `latency` cycles after its row; a settings write waits until the rows
    before it have been computed, and the rows after it see the new settings."""
    tb = TB(dut)
    await tb.reset()
    cols = tb.cols
    base = ActivationSettings(cols=cols)
    ops = [
        base,
        base.with_pooling(Pooling.MAX, size=2, stride=2, width=4),
        base.with_pooling(Pooling.AVG, size=3, stride=1, width=5),
        base.with_pooling(Pooling.GLOBAL_AVG, rows=9),
    ]
    rows = [20, 16, 20, 9]
    write_cycles = []
    for settings, count in zip(ops, rows):
        settings = replace(settings, function=Function.RELU)
        await tb.operation(settings, tb.rng.integers(-200, 200, size=(count, cols)))
        write_cycles.append(tb.settings_in.accepted[-1])
    await tb.finish()
    tb.check_timing()
    accepted = tb.rows.accepted
    start = 0
    for count in rows:
        if accepted[start + count - 1] - accepted[start] != (count - 1) * tb.row_cycles:
            tb.fail(f"rows {start}..{start + count - 1} were not taken one every "
                    f"{tb.row_cycles} cycles")
        start += count
    # Each write was taken as soon as the previous operation's last row had
    # left the computation, `latency` cycles after it was accepted.
    ends = np.cumsum(rows)
    for i in range(1, len(ops)):
        last_row = accepted[ends[i - 1] - 1]
        if write_cycles[i] != last_row + tb.latency:
            tb.fail(f"settings write {i} taken in cycle {write_cycles[i]}, the previous "
                    f"operation's last row was taken in cycle {last_row}: expected cycle "
                    f"{last_row + tb.latency}")
    dut._log.info("latency %d cycles; %d rows in %d cycles", tb.latency, len(accepted),
                  accepted[-1] - accepted[0] + 1)


@cocotb.test()
async def stalled_output(dut):
    """The output held off until the queue is full and the input stops,
    then released: the queued rows leave back to back, in order, each
    once (random backpressure seldom leaves more than one row queued at a
    row every few cycles)."""
    tb = TB(dut, backpressure=1.0)
    await tb.reset()
    settings = replace(ActivationSettings(cols=tb.cols), function=Function.RELU)
    await tb.operation(settings, tb.rng.integers(-200, 200, size=(24, tb.cols)))
    for _ in range((tb.latency + 24) * tb.row_cycles):
        await tb.loop.step()
    if tb.rows.done:
        tb.fail("every row was taken while the output was held off")
    tb.sink.backpressure = 0.0
    await tb.finish()
