"""Requantization of one column: int32 accumulator value to a clamped 8-bit value."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .activation_settings import SHIFT_WIDTH, VALUE_WIDTH


__all__ = ["Requantizer"]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


class Requantizer(wiring.Component):
    """``clamp(MultiplyByQuantizedMultiplier(acc + bias, multiplier, shift) + zero_point)``.

    TFLite's double-rounding requantization, or with `single_round` its
    one-rounding form, bit for bit (see ``sim/models/activation_model.py``), as a
    five-stage pipeline without stalls:
    `value` is the result for the `acc` presented `latency` cycles earlier.
    The settings inputs must not change while values are in flight; with
    `per_value_settings` the column settings (``bias``, ``multiplier``,
    ``shift``) instead belong to the ``acc`` presented with them and travel
    down the pipeline beside it, so that one requantizer can take the columns
    of a row in turn.

    Stages:

    1. ``x = acc + bias`` (wrapping), then the left shift ``x << max(shift, 0)``
       (wrapping, as TFLite's ``x * (1 << left_shift)``);
    2. the 32 x 32-bit signed product;
    3. ``SaturatingRoundingDoublingHighMul``: with gemmlowp's nudge and C
       division the high half is ``floor((p + 2**30) / 2**31)`` for either sign
       of ``p``; ``INT32_MIN * INT32_MIN`` saturates to ``INT32_MAX``;
    4. ``RoundingDivideByPOT`` by ``r = max(-shift, 0)``: ``(y + 2**(r-1) -
       (y < 0)) >> r`` for ``r > 0`` (round half away from zero), ``y`` for ``r = 0``;
    5. ``+ zero_point`` (exact), then ``min(max(., low), high)``.

    With `single_round` stage 1 does not shift, stage 3 adds the rounding
    constant ``2**(t-1)`` (none for ``t = 0``), ``t = 31 - shift``, to the
    product and stage 4 takes ``>> t`` saturated to int32; saturating changes
    no output, as the clamp bounds are 9-bit values.

    Members
    -------
    acc : In(signed(32))
        Accumulator value.
    bias, multiplier : In(signed(32))
        Column settings.
    shift : In(signed(6))
        Column shift: positive shifts left before the multiply, negative
        divides by a power of two after it.
    single_round : In(1)
        Round once: ``(x * multiplier + 2**(30 - shift)) >> (31 - shift)``.
    zero_point, low, high : In(signed(9))
        Output zero point and clamp bounds (``high`` wins over ``low``).
    value : Out(signed(9))
        The clamped result.

    Parameters
    ----------
    per_value_settings : bool
        Carry ``multiplier`` and ``shift`` down the pipeline with each value
        (a few registers), so that they may change every cycle.
    """

    latency = 5

    def __init__(self, *, per_value_settings=False):
        self._per_value = per_value_settings
        super().__init__({
            "acc":        In(signed(32)),
            "bias":       In(signed(32)),
            "multiplier": In(signed(32)),
            "shift":      In(signed(SHIFT_WIDTH)),
            "single_round": In(1),
            "zero_point": In(signed(VALUE_WIDTH)),
            "low":        In(signed(VALUE_WIDTH)),
            "high":       In(signed(VALUE_WIDTH)),
            "value":      Out(signed(VALUE_WIDTH)),
        })

    def elaborate(self, platform):
        m = Module()

        # The column settings each stage uses: the inputs, or with
        # `per_value_settings` the ones that came in with its value.
        multiplier2 = self.multiplier
        shift3 = shift4 = self.shift
        if self._per_value:
            multiplier2 = Signal.like(self.multiplier)
            shift2, shift3, shift4 = (Signal.like(self.shift, name=f"shift{j}") for j in (2, 3, 4))
            m.d.sync += [multiplier2.eq(self.multiplier), shift2.eq(self.shift),
                         shift3.eq(shift2), shift4.eq(shift3)]

        left = Signal(range(1 << (SHIFT_WIDTH - 1)))      # 0..31
        right = Signal(range((1 << (SHIFT_WIDTH - 1)) + 1))   # 0..32
        m.d.comb += [
            left.eq(Mux((self.shift > 0) & ~self.single_round, self.shift, 0)),
            right.eq(Mux(shift4 < 0, -shift4, 0)),
        ]

        # 1: bias, left shift.
        biased = Signal(signed(32))
        shifted = Signal(signed(32))
        m.d.comb += biased.eq(self.acc + self.bias)
        m.d.sync += shifted.eq(biased << left)

        # 2: product, and the one product that saturates.
        product = Signal(signed(64))
        saturate = Signal()
        m.d.sync += [
            product.eq(shifted * multiplier2),
            saturate.eq((shifted == INT32_MIN) & (multiplier2 == INT32_MIN)),
        ]

        # 3: rounding doubling high half; or the single rounding's constant.
        high_mul = Signal(signed(32))
        total = Signal(range(64))           # single rounding: 31 - shift, 0..63
        nudge = Signal(63)
        nudged = Signal(signed(65))
        m.d.comb += [
            total.eq(31 - shift3),
            nudge.eq((Const(1, 64) << total) >> 1),
        ]
        m.d.sync += [
            high_mul.eq(Mux(saturate, INT32_MAX, (product + (1 << 30)) >> 31)),
            nudged.eq(product + nudge),
        ]

        # 4: rounding divide by a power of two.
        half = Signal(33)
        rounding = Signal(signed(34))
        divided = Signal(signed(32))
        m.d.comb += [
            half.eq((Const(1, 34) << right) >> 1),
            rounding.eq(Mux(right == 0, 0, half - high_mul[31])),
        ]
        total4 = Signal(range(64))
        once = Signal(signed(65))
        m.d.comb += [total4.eq(31 - shift4), once.eq(nudged >> total4)]
        with m.If(~self.single_round):
            m.d.sync += divided.eq((high_mul + rounding) >> right)
        with m.Elif(once > INT32_MAX):
            m.d.sync += divided.eq(INT32_MAX)
        with m.Elif(once < INT32_MIN):
            m.d.sync += divided.eq(INT32_MIN)
        with m.Else():
            m.d.sync += divided.eq(once)

        # 5: zero point and clamp.
        offset = Signal(signed(34))
        raised = Signal(signed(34))
        m.d.comb += [
            offset.eq(divided + self.zero_point),
            raised.eq(Mux(offset < self.low, self.low, offset)),
        ]
        m.d.sync += self.value.eq(Mux(raised > self.high, self.high, raised))
        return m
