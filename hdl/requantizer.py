"""Requantization of one column: int32 accumulator value to a clamped 8-bit value."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .activation_settings import SHIFT_WIDTH, VALUE_WIDTH


__all__ = ["Requantizer"]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _float32_multiplier(multiplier):
    """Whether the signed 32-bit `multiplier` is a float32 significand << 7:
    magnitude in ``[2**30, 2**31)``, the low 7 bits zero."""
    middle = multiplier[7:30]
    positive = ~multiplier[31] & multiplier[30]
    negative = multiplier[31] & Mux(multiplier[30], middle == 0, middle != 0)
    return (multiplier[:7] == 0) & (positive | negative)


def _float32_of(m, x):
    """``float32(x)`` of the signed 32-bit `x` as a 33-bit integer: ``x``
    rounded half to even at bit ``d = max(n - 24, 0)``, ``n`` the bit
    length of ``|x|`` (2**31 for the largest ``x``). ``n`` is taken from
    ``x ^ sign``, ``|x| - 1`` for a negative ``x``, which differs only for
    a power of two, which every ``d`` keeps; and a half-to-even rounding of
    the two's complement ``x`` is that of ``|x|`` negated.

    Made as ``x + 2**(d-1)`` with the low ``d`` bits cleared (half up), and
    at a tie (the low ``d`` bits exactly ``2**(d-1)``) bit ``d`` cleared
    too: the half-up result is then ``q + 1`` of the two neighbours, and
    clearing its lowest bit gives the even one. The addend and the masks
    are decoded from ``x``'s top 8 bits beside each other, so that the
    path from the bias adder is a decode, the add and one mask."""
    y = x[24:31] ^ x[31].replicate(7)           # bits 24..30 of |x| (or |x| - 1)
    # above[j]: a one at bit 24 + j or higher, j = 0..7 (above[7] none).
    above = [Cat(y[j:]).any() if j < 7 else C(0, 1) for j in range(8)]
    # d == j + 1: the leading one at bit 24 + j; bit j of the addend, j = 0..6.
    half_at = Cat(y[j] & ~above[j + 1] for j in range(7))
    low = Cat(above[:7])                         # bits below d: low[j] = j < d
    # The tie: the bits below d exactly the half, at the half's position.
    tie = Cat(half_at[j] & x[j] & ((x[:j] == 0) if j else C(1, 1)) for j in range(7)).any()
    total = Signal(signed(33), name="float32_sum")
    m.d.comb += total.eq(x + half_at)
    # bit j (j = 1..7) cleared at a tie with d == j.
    even = Cat(C(0, 1), half_at & tie.replicate(7))
    return Cat(total[:8] & ~Cat(low, C(0, 1)) & ~even, total[8:]).as_signed()


def _float32_rounding(x):
    """``float32(x)`` of the signed 32-bit `x` as ``(x & ~low) + up *
    2**d`` (`_float32_of`'s rounding: ``d = max(n - 24, 0)``, half to
    even), without the add: ``low`` (7 bits, bit ``j`` set for ``j < d``),
    ``half_at`` (bit ``d - 1``, one-hot or none) and ``up``. Clearing the
    bits below ``d`` floors the two's complement ``x``; that floor rounds
    up by ``2**d`` where the bits below ``d`` exceed the half, or equal it
    and bit ``d`` is odd, which is the half-to-even rounding of ``|x|``
    negated for a negative ``x``. So stage 1 is the bias add and a decode,
    and the add of ``2**d`` (a carry chain after the decode) is left to
    the product: ``float32(x) M = (x & ~low) M + up M 2**d``."""
    y = x[24:31] ^ x[31].replicate(7)
    above = [Cat(y[j:]).any() if j < 7 else C(0, 1) for j in range(8)]
    half_at = Cat(y[j] & ~above[j + 1] for j in range(7))
    low = Cat(above[:7])
    sticky = [(x[:j] != 0) if j else C(0, 1) for j in range(7)]
    up = Cat(half_at[j] & x[j] & (sticky[j] | x[j + 1]) for j in range(7)).any()
    return low, half_at, up


class _Window:
    """The MLAS rounding's tie window, ``|R - H| <= 2**(G - 1)`` with ``R``
    the product's low ``t`` bits, ``H = 2**(t-1)`` and ``G`` the bit
    length of ``|p|`` less 24 (`tpu/models/mlas_rounding.py`, in the
    units of the chip's product ``p = float32(x) * multiplier``, whose
    fraction has ``t = 31 - shift`` bits).

    ``|p|`` has ``n + 30 + c`` bits, ``n`` the bit length of ``float32(x)``
    (the multiplier has 31) and ``c`` its bit ``n + 30``, so ``G = G0 + c``
    with ``G0 = n + 6``. `settings` registers, beside the product, what
    depends on ``x`` and the shift alone: ``x``'s leading one (one-hot),
    the band of bits from ``G0 + 1`` to ``t - 2`` and those up to ``G0 -
    2``, from ``x``'s suffix OR (a thermometer, no encoder); `tie` then
    tests the product's bits. For a negative product the test on its two's
    complement bits is the one on ``|p|``'s, as ``|R - H|`` is the same
    for ``R`` and ``2**t - R``.

    Above the half: ``p[t-1]`` set, bits ``G .. t-2`` clear and the bits
    below ``G`` at most ``2**(G-1)`` (bit ``G - 1`` clear, or it alone
    set); below it: ``p[t-1]`` clear, bits ``G .. t-2`` set and bit ``G -
    1`` set. Exact wherever ``G <= t - 2``, which every result below
    2**22 in magnitude meets, so every value the clamp does not saturate."""

    def __init__(self):
        self.mlas3 = Signal(name="mlas3")
        self.lead = None
        self.band = Signal(64, name="window_band")     # bits G0 + 1 .. t - 2
        self.low = Signal(64, name="window_low")       # bits 0 .. G0 - 2

    def settings(self, m, y, mlas2, shift):
        """Statements (for the register as stage 3 starts) from `y`, the
        operand's magnitude (or ``|x| - 1``), whether the value is rounded
        as MLAS does, and its shift."""
        width = len(y)
        self.lead = Signal(width, name="window_lead")
        suffix = Signal(width, name="window_suffix")    # suffix[j]: a one at j or above
        value = y
        step = 1
        while step < width:
            value = value | (value >> step)
            step *= 2
        m.d.comb += suffix.eq(value)
        upto = Signal(64, name="window_upto")           # bits 0 .. t - 2
        m.d.comb += upto.eq(C((1 << 64) - 1, 64) >> (shift + 34).as_unsigned()[:7])

        def one_at(j):
            return suffix[j] if 0 <= j < width else C(j < 0, 1)

        band = Cat(~one_at(k - 7) & (k >= 7) for k in range(64))     # k >= n + 7
        low = Cat(C(1, 1) if k <= 4 else one_at(k - 5) for k in range(64))   # k <= n + 4
        lead = suffix & ~(suffix >> 1)
        return [self.mlas3.eq(mlas2), self.lead.eq(lead), self.band.eq(band & upto),
                self.low.eq(low)]

    def tie(self, m, bits, total3, total3_less):
        """Whether the product with two's complement `bits` (64) lies in
        the window, with the MLAS rounding set and ``t > 0``."""
        width = len(self.lead)

        def pick(offset, source):
            return (self.lead & source[offset:offset + width]).any()

        magnitude = bits ^ bits[63].replicate(64)
        at_g0 = pick(7, bits)                  # bit n + 6
        below_g0 = pick(6, bits)               # bit n + 5
        c = pick(31, magnitude)                # bit n + 30 of |p| (|p| - 1)
        clear = ~(bits & self.band).any()
        set_ = ~(~bits & self.band).any()
        low_clear = ~(bits & self.low).any()
        half = bits.bit_select(total3_less, 1)
        zeros = clear & (c | ~at_g0)
        ones = set_ & (c | at_g0)
        guard = Mux(c, at_g0, below_g0)        # bit G - 1
        rest_clear = Mux(c, low_clear & ~below_g0, low_clear)     # bits below G - 1
        tie = Signal(name="window_tie")
        m.d.comb += tie.eq(self.mlas3 & (total3 != 0) & Mux(half, zeros & (~guard | rest_clear),
                                                            ones & guard))
        return tie


class Requantizer(wiring.Component):
    """``clamp(MultiplyByQuantizedMultiplier(acc + bias, multiplier, shift) + zero_point)``.

    TFLite's double-rounding requantization, or with `single_round` its
    one-rounding form, or with `mlas_round` too ONNX Runtime's (MLAS's)
    float32 rounding, bit for bit (see ``tpu/models/activation_model.py``), as a
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
    2. the 32 x 32-bit signed product (in `multiply_cycles` cycles with a
       narrower `multiplier_width`);
    3. ``SaturatingRoundingDoublingHighMul``: with gemmlowp's nudge and C
       division the high half is ``floor((p + 2**30) / 2**31)`` for either sign
       of ``p``; ``INT32_MIN * INT32_MIN`` saturates to ``INT32_MAX``; and
       the next stage's rounding term ``2**(r-1) - (y < 0)`` from its sign;
    4. ``RoundingDivideByPOT`` by ``r = max(-shift, 0)``: ``(y + 2**(r-1) -
       (y < 0)) >> r`` for ``r > 0`` (round half away from zero), ``y`` for ``r = 0``;
    5. ``+ zero_point`` (exact), then ``min(max(., low), high)``.

    With `single_round` stage 1 does not shift, and ``(p + 2**(t-1)) >> t``,
    ``t = 31 - shift`` (``p`` for ``t = 0``), is made as ``p >> t`` and the
    bit ``p[t-1]`` in stage 3 and their sum, saturated to int32, in stage 4;
    saturating changes no output, as the clamp bounds are 9-bit values.

    With `mlas_round` (and `single_round`) and a multiplier that is a
    float32 significand << 7 (`_float32_multiplier`; any other rounds once),
    stage 1 rounds ``x`` to a float32 value (24 significant bits, half to
    even) instead of the left shift: in the full forms as ``x`` with its
    bits below the rounding position ``d`` cleared and the increment
    ``2**d`` apart (`_float32_rounding`), which stage 2 adds from
    registers, to the operand before the one-cycle multiply or to the low
    16-bit piece in the product's first cycle, so that stage 1 is the bias
    add and a decode; in the compact form whole (`_float32_of`, 2**31 at
    most, so the operand is 33 bits). Stage 2 registers the tie window's
    masks beside the product (`_Window.settings`, from the operand's
    suffix OR and the shift), and stage 3 rounds to the even of ``p >> t`` and that plus one
    inside the window (`_Window.tie`: its bit ``p[t]`` instead of
    ``p[t-1]``): `tpu/models/mlas_rounding.py`'s window form, which equals
    ONNX Runtime's float32 product and rounding wherever the result is
    below 2**22 in magnitude, so every result the clamp does not saturate.
    The compact form finds the window on ``S ^ neg`` (the product's two's
    complement bits) and in stage 4 rounds to even by taking bit 1 of
    ``2 S >> t`` for bit 0. The same stages and latency in every form; per
    requantizer (synth_ecp5 with the board build's mapping / synth_ice40,
    LUT4s): the one-cycle product 1,834 -> 1,867 / 1,285 -> 1,803, the
    shared lane with a 16-bit product 1,598 -> 1,973 / 1,568 -> 2,016, the
    compact form 579 -> 1,365 / 633 -> 1,278, about 124 flip-flops more in
    each (the window's masks), measured while the full forms rounded in
    stage 1 too (the one-cycle form 1,739 ECP5 LUT4s since, the lane
    1,962). The full forms are 6 ECP5 levels deep with the mode, the
    compact form's stage 1 10 (docs/activation_pipeline.md).
    Built only with `mlas_rounding` (`TPUConfig.mlas_rounding`; the up5k
    chip has none): without it the requantizer is the one before the mode.

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
    mlas_round : In(1)
        With `single_round`: round as ONNX Runtime's MLAS does,
        ``rint(float32(float32(x) * s))``, for a multiplier that is a
        float32 significand << 7.
    zero_point, low, high : In(signed(9))
        Output zero point and clamp bounds (``high`` wins over ``low``).
    value : Out(signed(9))
        The clamped result.
    start : In(1)
        With `multiplier_width` below 32 only: `acc` (and with
        `per_value_settings` its settings) is presented in this cycle. A
        start before the previous value's product has ended (`multiply_cycles`
        cycles) replaces that value, whose result is then not its own.
    left : In(5)
        With `left_input` only: the left shift's amount, ``max(shift, 0)``
        (0 with `single_round`), decoded by the caller (from a register,
        so that the shift of stage 1 does not decode it).
    next_value : Out(signed(9))
        With `next_output` only: the clamp's result before its register,
        `value` of the next cycle.

    Parameters
    ----------
    per_value_settings : bool
        Carry ``multiplier`` and ``shift`` down the pipeline with each value
        (a few registers), so that they may change every cycle.
    compact : bool
        With a `multiplier_width` of 16 or 8: stages 3 to 5 work on the
        product's magnitude (the sum of stage 2 before it is signed) and
        both roundings are one rounding right shift that keeps only the
        bits the clamp can use (`_compact_rounding`), and stage 1 makes no
        left shift (a positive shift is rounded once instead, which is
        the same); the same values in the same cycles, in a fraction of
        the logic.
    left_input : bool
        Take stage 1's left shift amount on `left` rather than from
        ``shift`` and ``single_round``.
    next_output : bool
        Present `next_value`, so that a synchronous read at the result
        (a table lookup) can start a cycle before `value` holds it.
    mlas_rounding : bool
        Build the MLAS rounding (`mlas_round`); without it the port is
        absent and the requantizer is the one before the mode, gate for
        gate (`TPUConfig.mlas_rounding`).
    multiplier_width : int
        32: stage 2 is one 32 x 32-bit multiply. 16 or 8: stage 2 takes
        ``(32 / multiplier_width)**2`` cycles (`multiply_cycles`) on one
        multiplier of ``multiplier_width + 1``-bit signed pieces (with
        `compact`, of ``multiplier_width``-bit unsigned ones), and a value
        is presented only with ``start`` high, at most once every
        `multiply_cycles` cycles.
    """

    #: `latency` with the one-cycle product.
    BASE_LATENCY = 5

    def __init__(self, *, per_value_settings=False, multiplier_width=32, compact=False,
                 left_input=False, next_output=False, mlas_rounding=True):
        if multiplier_width not in (8, 16, 32):
            raise ValueError(f"multiplier_width must be 8, 16 or 32, not {multiplier_width!r}")
        if compact and multiplier_width == 32:
            raise ValueError("a compact requantizer needs a multiplier_width of 8 or 16, not 32")
        self._per_value = per_value_settings
        self._width = multiplier_width
        self._compact = bool(compact)
        self._left_input = bool(left_input)
        self._next_output = bool(next_output)
        self._mlas = bool(mlas_rounding)
        ports = {"start": In(1)} if self.multiply_cycles > 1 else {}
        if self._left_input:
            ports["left"] = In(SHIFT_WIDTH - 1)
        if self._next_output:
            ports["next_value"] = Out(signed(VALUE_WIDTH))
        super().__init__({
            **ports,
            "acc":        In(signed(32)),
            "bias":       In(signed(32)),
            "multiplier": In(signed(32)),
            "shift":      In(signed(SHIFT_WIDTH)),
            "single_round": In(1),
            **({"mlas_round": In(1)} if self._mlas else {}),
            "zero_point": In(signed(VALUE_WIDTH)),
            "low":        In(signed(VALUE_WIDTH)),
            "high":       In(signed(VALUE_WIDTH)),
            "value":      Out(signed(VALUE_WIDTH)),
        })

    @property
    def multiply_cycles(self):
        """Cycles the 32 x 32-bit product takes: one, or one per pair of
        `multiplier_width`-bit pieces of the operands."""
        return (32 // self._width) ** 2

    @property
    def latency(self):
        """Cycles from `acc` to its `value`."""
        return self.BASE_LATENCY - 1 + self.multiply_cycles

    def elaborate(self, platform):
        m = Module()
        cycles = self.multiply_cycles

        # The column settings each stage uses: the inputs, or with
        # `per_value_settings` the ones that came in with its value (stage 2
        # takes `cycles` cycles; its shift is held until it has finished).
        # What stages 3 and 4 derive from the shift (the amounts of their
        # variable shifts, the rounding constants) is registered a stage
        # ahead beside it, so that no stage decodes the shift on its way into
        # a barrel shifter: `total3` and `total3_less`, and the division's
        # `right3`, `2**(right3 - 1)` and that less one, as stage 3 starts,
        # `right4` and the rounding term `rounding4` as stage 4 does. Without
        # `per_value_settings` they follow the inputs a cycle late, which the
        # settings' rule (no change while values are in flight) allows, as a
        # value reaches stage 3 two cycles or more after it was presented.
        multiplier2 = self.multiplier
        shift2, shift3 = None, self.shift
        total3 = Signal(range(64))          # single rounding: 31 - shift, 0..63
        total3_less = Signal(range(64))     # max(total3 - 1, 0)

        right3 = Signal(range((1 << (SHIFT_WIDTH - 1)) + 1))    # max(-shift, 0), 0..32
        half3 = Signal(32)                  # 2**(right3 - 1), 0 for right3 = 0
        half3_less = Signal(32)             # max(half3 - 1, 0)

        def right_of(shift):
            return Mux(shift < 0, -shift, 0)[:SHIFT_WIDTH]      # 0..32

        def totals(shift, right=None):
            # `right`: `right_of(shift)` from a register, when one holds it.
            if right is None:
                right = right_of(shift)
            half = (Const(1, 33) << right) >> 1
            return [total3.eq(31 - shift), total3_less.eq(Mux(shift == 31, 0, 30 - shift)),
                    right3.eq(right), half3.eq(half), half3_less.eq(Mux(right == 0, 0, half - 1))]

        if self._per_value:
            shift2, shift3 = (Signal.like(self.shift, name=f"shift{j}") for j in (2, 3))
            if cycles == 1:
                multiplier2 = Signal.like(self.multiplier)
                m.d.sync += [multiplier2.eq(self.multiplier), shift2.eq(self.shift),
                             shift3.eq(shift2), *totals(shift2)]
        else:
            m.d.sync += totals(self.shift)

        left = Signal(range(1 << (SHIFT_WIDTH - 1)))      # 0..31
        if self._left_input:
            m.d.comb += left.eq(self.left)
        else:
            m.d.comb += left.eq(Mux((self.shift > 0) & ~self.single_round, self.shift, 0))

        # 1: bias, left shift; with the MLAS rounding ``x`` rounded to a
        # float32 value instead (`_float32_of`), and whether the column's
        # multiplier is a float32 significand << 7 (else one rounding).
        biased = Signal(signed(32))
        m.d.comb += biased.eq(self.acc + self.bias)
        mlas = self._mlas
        increment = None
        if mlas:
            mlas1 = Signal()
            m.d.comb += mlas1.eq(self.single_round & self.mlas_round
                                 & _float32_multiplier(self.multiplier))
        if mlas and self._compact:
            operand = Signal(signed(33))
            m.d.comb += operand.eq(Mux(mlas1, _float32_of(m, biased),
                                       (biased << left)[:32].as_signed()))
        elif mlas:
            # The full forms take ``float32(x)`` as ``x`` with its bits below
            # ``d`` cleared and the increment ``2**d`` apart
            # (`_float32_rounding`), added in stage 2: the operand is a
            # 32-bit value, and no second add follows the bias add here.
            # ``left`` is 0 where the mode rounds (it needs `single_round`),
            # so the clearing follows the shift in the LUTs of its last
            # level.
            low, half_at, up = _float32_rounding(biased)
            moved = Signal(signed(32))
            m.d.comb += moved.eq(biased << left)
            operand = Signal(signed(32))
            m.d.comb += operand.eq(Cat(moved[:7] & ~(low & mlas1.replicate(7)), moved[7:]))
            increment = Signal(7, name="float32_increment")       # bit j: 2**(j + 1)
            m.d.comb += increment.eq(half_at & (mlas1 & up).replicate(7))
        else:
            mlas1, operand = None, biased << left

        # 2: product, and the one product that saturates.
        product = Signal(signed(64))
        saturate = Signal()
        # The MLAS rounding's window (`_window_settings`), registered as
        # stage 3 starts.
        window = _Window() if mlas else None
        if cycles == 1:
            shifted = Signal(signed(32))
            m.d.sync += shifted.eq(operand)
            if mlas:
                # ``float32(x) = shifted + 2**d`` where x rounds up from
                # `shifted`: the add (one level and a carry chain) before
                # the multiply here, where the operand comes from a
                # register, rather than after the bias add in stage 1. (As
                # an addend ``M 2**d`` of the product's sum it made the
                # partial products' adds a level deeper than the multiply
                # and its operand's add.)
                increment2 = Signal(7, name="float32_increment2")
                rounded = Signal(signed(33), name="float32_operand")
                m.d.sync += increment2.eq(increment)
                m.d.comb += rounded.eq(shifted + Cat(C(0, 1), increment2))
                m.d.sync += [
                    product.eq(rounded * multiplier2),
                    saturate.eq((shifted == INT32_MIN) & (multiplier2 == INT32_MIN)),
                ]
                mlas2 = Signal()
                m.d.sync += mlas2.eq(mlas1)
                # The leading one of ``shifted`` (or of ``|shifted| - 1``)
                # is ``float32(x)``'s but where the increment carries into
                # a new bit: then ``|float32(x)|`` is a power of two, whose
                # product's length the window's bit ``c`` counts
                # (`_Window`).
                m.d.sync += window.settings(m, shifted.as_unsigned() ^ shifted[31].replicate(32), mlas2,
                                            self.shift if shift2 is None else shift2)
            else:
                m.d.sync += [
                    product.eq(shifted * multiplier2),
                    saturate.eq((shifted == INT32_MIN) & (multiplier2 == INT32_MIN)),
                ]
        else:
            # With `per_value_settings` stage 3's totals are made from
            # `shift2` as the product's last piece is summed; the division's
            # amount `max(-shift, 0)` (a negation and a select, then the
            # decode and the decrement of `half3` and `half3_less`: 7 levels
            # in one cycle) is registered from it a cycle before, as
            # `shift2` holds still from the cycle after `start` to the end
            # of the product. (The compact form reads none of them.)
            stage3 = None if shift2 is None else totals(shift2)
            if shift2 is not None and not self._compact:
                right_ahead = Signal.like(right3, name="right_ahead")
                m.d.sync += right_ahead.eq(right_of(shift2))
                stage3 = totals(shift2, right_ahead)
            if self._compact:
                # No left shift: ``wrap(x << l)`` is ``x'`` times ``2**l``,
                # ``x'`` the low ``32 - l`` bits of ``x`` sign-extended, so
                # its magnitude is ``|x'| 2**l``, and stage 3 rounds ``|x'|
                # M`` by ``31 - l`` bits where it would round ``|x'| M
                # 2**l`` by 31 (`_compact_rounding`): a sign bit chosen and
                # a mask instead of a 32-bit barrel shifter.
                # The mask (the bits above bit 31 - l) is a constant shifted,
                # a decode, not 32 comparisons in carry chains.
                wrapped = Signal(signed(32))
                sign = Signal()
                mask = Signal(32)
                m.d.comb += [
                    sign.eq(biased.bit_select(~left, 1)),       # bit 31 - l
                    mask.eq(~(C((1 << 32) - 1, 32) >> left)),
                    wrapped.eq(Cat(Mux(mask[i], sign, biased[i]) for i in range(32))),
                ]
                compact_operand = wrapped
                if mlas:
                    compact_operand = Signal(signed(33))
                    m.d.comb += compact_operand.eq(Mux(mlas1, operand, wrapped))
                magnitude, negative = Signal(signed(65)), Signal()
                self._sequential_product(m, compact_operand, product, saturate, shift2, shift3,
                                         stage3, mlas1, window, magnitude=magnitude,
                                         negative_out=negative)
                self._compact_rounding(m, magnitude, negative, shift3, total3, total3_less, window)
                return m
            self._sequential_product(m, operand, product, saturate, shift2, shift3, stage3,
                                     mlas1, window, increment=increment)

        # 3: rounding doubling high half, and the rounding term of stage 4's
        # division, chosen by the high half's sign: ``2**(r-1) - (y < 0)``.
        # Single rounding: ``(p + 2**(t-1)) >> t == (p >> t) + p[t-1]`` for
        # t > 0, so the variable shift is made here, before the rounding bit
        # is added.
        high_mul = Signal(signed(32))
        high_next = Signal(signed(32))
        right4 = Signal.like(right3)
        rounding4 = Signal(32)
        m.d.comb += high_next.eq(Mux(saturate, INT32_MAX, (product + (1 << 30)) >> 31))
        floored = Signal(signed(64))
        round_bit = Signal()
        # The MLAS rounding: inside the tie window the half goes to the
        # even of ``p >> t`` and that plus one, ``p[t]``.
        half_bit = product.bit_select(total3_less, 1)
        if mlas:
            tie = window.tie(m, product, total3, total3_less)
            half_bit = Mux(tie, product.bit_select(total3, 1), half_bit)
        m.d.sync += [
            high_mul.eq(high_next),
            right4.eq(right3),
            rounding4.eq(Mux(high_next[31], half3_less, half3)),
            floored.eq(product >> total3),
            round_bit.eq((total3 != 0) & half_bit),
        ]

        # 4: rounding divide by a power of two, ``(y + rounding) >> r``; or
        # the single rounding's sum, saturated to int32 (from `floored`'s
        # high bits, without the sum).
        divided = Signal(signed(32))
        high_bits = floored[31:]            # bits 31..63: all equal iff int32
        over = Signal()
        under = Signal()
        m.d.comb += [
            over.eq(~floored[63] & ((high_bits != 0) | ((floored[:31] == (1 << 31) - 1) & round_bit))),
            under.eq(floored[63] & (high_bits != (1 << 33) - 1)
                     & ~((high_bits == (1 << 33) - 2) & (floored[:31] == (1 << 31) - 1) & round_bit)),
        ]
        with m.If(~self.single_round):
            m.d.sync += divided.eq((high_mul + rounding4) >> right4)
        with m.Elif(over):
            m.d.sync += divided.eq(INT32_MAX)
        with m.Elif(under):
            m.d.sync += divided.eq(INT32_MIN)
        with m.Else():
            m.d.sync += divided.eq(floored[:32] + round_bit)

        self._clamp(m, divided)
        return m

    def _clamp(self, m, divided):
        """Stage 5: `value` from `divided`, the requantized value."""
        # 5: zero point and clamp. The bounds less the zero point are
        # registered beside the settings (which change only while no value
        # is in flight, and a value reaches this stage four cycles or more
        # after it was presented), so that `divided` is compared with them
        # directly, both comparisons side by side, and only the low byte
        # and sign of the sum are made: ``high`` wins over ``low`` as
        # ``low`` is taken as ``min(low, high)``.
        low5 = Signal(signed(VALUE_WIDTH))
        high5 = Signal(signed(VALUE_WIDTH))
        below = Signal(signed(VALUE_WIDTH + 2))     # low5 - zero_point
        above = Signal(signed(VALUE_WIDTH + 2))     # high5 - zero_point
        low_now = Mux(self.low > self.high, self.high, self.low)
        m.d.sync += [
            low5.eq(low_now),
            high5.eq(self.high),
            below.eq(low_now - self.zero_point),
            above.eq(self.high - self.zero_point),
        ]
        self._choose_clamped(m, divided, below, above, low5, high5,
                             divided[:VALUE_WIDTH] + self.zero_point)

    def _choose_clamped(self, m, x, below, above, low5, high5, inside):
        """Stage 5's choice, both forms: `high5` where ``x > above``, `low5`
        where ``x < below``, else `inside`; into `next_value` where the
        requantizer presents it (else an internal signal), then `value`."""
        clamped = self.next_value if self._next_output else Signal(signed(VALUE_WIDTH))
        with m.If(x > above):
            m.d.comb += clamped.eq(high5)
        with m.Elif(x < below):
            m.d.comb += clamped.eq(low5)
        with m.Else():
            m.d.comb += clamped.eq(inside)
        m.d.sync += self.value.eq(clamped)

    def _compact_rounding(self, m, magnitude, negative, shift3, total3, total3_less, window):
        """Stages 3 to 5 on the product's magnitude ``P`` and sign.

        Both roundings are round-half-away-from-zero or round-half-up of
        ``p = ±P``, so on magnitudes (``neg`` = ``p < 0``):

        * one rounding, ``t = 31 - shift``: ``|v| = (P + 2**(t-1) - neg) >> t``
          for t > 0, ``P`` for t = 0;
        * two: ``|y| = (P + 2**30 - neg) >> 31`` (the doubling high half;
          ``INT32_MIN * INT32_MIN``'s 2**31 instead of INT32_MAX rounds and
          clamps alike but for r = 32, where stage 3 clears it), then
          ``|v| = (|y| + 2**(r-1)) >> r``, r = max(-shift, 0).

        With ``S = P - neg`` (``P`` for t = 0; or ``|y|``) and ``a = t`` (or
        ``r``) both are ``((2 S >> a) + 1) >> 1``: for a = 0 that is ``S``. P = 0 with neg is
        0. Stage 3 makes ``S`` and ``a``; stage 4 the shift, keeping the 10
        bits below the clamp's reach and whether any bit above them is set
        (then the magnitude is taken as 512, beyond every bound); stage 5
        signs it and clamps."""
        # Stage 1 made no left shift: the product is ``P = |x'| M`` (see
        # `elaborate`), and the doubling high half of ``P 2**l``, l = shift
        # > 0, is ``(P 2**l + 2**30 - neg) >> 31``, which is ``(P +
        # 2**(t-1) - neg) >> t`` with t = 31 - l (for t > 0: the
        # ``neg / 2**l`` below the integer ``P + 2**(t-1)`` floors as a 1
        # does; for t = 0 it is P), the one rounding of the same t = 31 -
        # shift. So a positive shift is rounded once (`once`).
        once = Signal()
        m.d.comb += once.eq(self.single_round | (shift3 > 0))
        # The product's sum already holds ``P - neg`` (one rounding; ``P``
        # for t = 0) or ``P + 2**30 - neg``, whose bits from 31 up are
        # ``|y|`` (`_sequential_product` adds the term with the first
        # piece): no 65-bit add here. Its sign is the borrow (P = 0 and
        # neg, rounded once).
        zero = Signal()
        less = Signal(64)
        m.d.comb += [
            less.eq(magnitude[:64]),
            zero.eq(magnitude[-1]),
        ]
        # Both shift the sum as it is: ``2 |y| >> r`` is ``2 L >> (31 + r)``
        # for r > 0 (``L = P + 2**30 - neg``), and for r = 0 ``2 L >> 31``
        # with its bit 0 cleared (`whole3`); ``31 + r`` is ``31 - shift``,
        # one rounding's `total3`, for a negative shift, 31 otherwise. So
        # stage 3 chooses neither the sum's bits nor the shift's source.
        # The borrow (P = 0 with neg, whose result is 0) is registered
        # beside the sum rather than clearing its 64 bits, and stage 4
        # clears the shifted magnitude instead (10 bits, in the LUTs that
        # choose them anyway).
        # ``(2 S) >> a`` (stage 4), the larger shifts first so that each
        # keeps only the bits the later ones can bring into the 10 kept;
        # bits above the window at each step go into `over`. The shift by
        # 32 is made here, as the sum comes from registers (no add before
        # it), so that stage 3 registers 41 bits and a flag, not 64.
        def shift_by(bits, over, amount, ks):
            for k in ks:
                keep = 10 + (1 << k) - 1         # bits the shifts by 2**k .. 1 need
                moved = Mux(amount[k], bits >> (1 << k), bits)
                over = over | (moved[keep:] != 0)
                bits = moved[:keep]
            return bits, over

        # Two roundings by r = 32 (shift -32) take every ``|y| < 2**31`` to
        # 0; the doubling high half's 2**31 (the model's saturated
        # INT32_MAX) would round to 1, so that case is cleared as the
        # borrow is (the one place 2**31 and INT32_MAX differ).
        right_32 = Signal()
        m.d.comb += right_32.eq(~once & (shift3 == -(1 << (SHIFT_WIDTH - 1))))
        a_next = Signal(range(64))
        m.d.comb += a_next.eq(Mux(once | (shift3 < 0), total3, 31))
        top, top_over = shift_by(Cat(C(0, 1), less), C(0, 1), a_next, [5])  # 2 S (2 L)
        s3 = Signal(len(top))
        over3 = Signal()
        a3 = Signal(5)
        whole3 = Signal()
        neg3 = Signal()
        zero3 = Signal()
        # The MLAS rounding's window is found on the product's two's
        # complement bits, which ``S`` is for a positive product and ``~S``
        # for a negative one (``-P = ~(P - 1)``); inside it bit 0 of ``2 S
        # >> t`` (the half) is replaced by bit 1 (``P >> t``'s lowest), so
        # that the add of one rounds to the even of the two.
        m.d.sync += [
            s3.eq(top),
            over3.eq(top_over),
            zero3.eq(zero | right_32),
            a3.eq(a_next[:5]),
            whole3.eq(~once & (shift3 >= 0)),
            neg3.eq(negative),
        ]
        if window is not None:
            tie3 = Signal()
            m.d.sync += tie3.eq(window.tie(m, less ^ negative.replicate(64), total3, total3_less))
        # 4: the shifts by 16 .. 1.
        bits, over = shift_by(s3, over3, a3, reversed(range(5)))
        sh = Signal(11)
        low_bit = bits[0] & ~whole3
        if window is not None:
            low_bit = Mux(tie3, bits[1], low_bit)
        m.d.comb += sh.eq(Cat(low_bit, bits[1:10]) + 1)
        # ``min(|v|, 512)``, inverted for a negative value (the XOR in the
        # LUTs that choose it): stage 5 adds it to the zero point with the
        # sign as the carry in, ``zero_point - |v|`` or ``zero_point +
        # |v|`` in one sum.
        q4 = Signal(signed(11))
        neg4 = Signal()
        magnitude4 = Mux(zero3, 0, Mux(over | sh[10], 512, sh[1:11]))
        m.d.sync += [q4.eq(Cat(magnitude4 ^ neg3.replicate(10), neg3)), neg4.eq(neg3)]
        self._compact_clamp(m, q4, neg4)

    def _compact_clamp(self, m, q4, neg4):
        """Stage 5 of the compact form: the value with its zero point,
        ``zero_point + (q4 + neg4)`` (-768..767), compared with the bounds
        themselves, where `_clamp` compares the value without it with the
        bounds less the zero point (two more subtractions, registered) and
        signs it and adds the zero point apart."""
        low5 = Signal(signed(VALUE_WIDTH))
        high5 = Signal(signed(VALUE_WIDTH))
        m.d.sync += [
            low5.eq(Mux(self.low > self.high, self.high, self.low)),
            high5.eq(self.high),
        ]
        total = Signal(signed(VALUE_WIDTH + 2))
        m.d.comb += total.eq(self.zero_point + q4 + neg4)
        self._choose_clamped(m, total, low5, high5, low5, high5, total[:VALUE_WIDTH])

    def _sequential_product(self, m, shifted, product, saturate, shift2, shift3, stage3,
                            mlas1, window, magnitude=None, negative_out=None, increment=None):
        """Stage 2 in `multiply_cycles` cycles on one multiplier: the
        product summed piece by piece, most significant diagonal first
        (``sum = (sum << w) + a_i * b_j`` at the first piece of each
        diagonal ``i + j``), the operands' top `multiplier_width`-bit pieces
        signed and the others unsigned (``w + 1``-bit signed pieces, which
        an ECP5 MULT18X18D takes at 16 bits); or with `compact` the
        magnitudes' product on a `multiplier_width`-bit unsigned multiplier,
        least significant diagonal first (``sum = (sum >> w) + a_i * b_j``,
        the `w` bits shifted out kept apart), then signed.
        `product` and `saturate` are ready `multiply_cycles` cycles after
        `start`, as the one-cycle product is one cycle after it."""
        w, cycles = self._width, self.multiply_cycles
        pieces = 32 // w
        # The compact form takes the operands' magnitudes (|INT32_MIN| fits
        # in 32 bits); the other takes the operands as they are, its top
        # pieces signed, so that no negation lies between the shift and the
        # operand register, nor between the sum and `product`.
        signed_pieces = not self._compact
        # With the MLAS rounding the operand is 33 bits wide: in the compact
        # form a float32 value rounded from ``x`` may be 2**31
        # (`_float32_of`; its magnitude fits 32). The signed form takes
        # ``float32(x)`` as ``a``, ``x`` with its bits below ``d`` cleared
        # (32 bits, sign-extended: its top piece the 17 bits of before), and
        # `increment` (``2**d`` or none, `_float32_rounding`), added to the
        # low 16 bits in the product's first cycle, as those are first
        # multiplied in its second (`a_low`).
        mlas = window is not None
        rounds_low = increment is not None
        a, b = Signal(33 if signed_pieces and mlas else 32), Signal(32)
        negative = Signal()
        if mlas:
            mlas2 = Signal()
        if rounds_low:
            increment2 = Signal(7, name="float32_increment2")
            a_low = Signal(17)              # a[:16] + 2**d: at most 2**16
        shifted_now = Signal(signed(33 if mlas else 32))
        m.d.comb += shifted_now.eq(shifted)
        with m.If(self.start):
            if mlas:
                m.d.sync += mlas2.eq(mlas1)
            if rounds_low:
                m.d.sync += increment2.eq(increment)
            if signed_pieces:
                m.d.sync += [a.eq(shifted_now), b.eq(self.multiplier)]
            else:
                # ``|x|`` as ``(x - sign) ^ sign``: the inversion after the
                # decrement, where synthesis folds it into the adder's
                # LUTs (``(x ^ sign) + sign`` took a LUT4 a bit more, 62
                # for 32 bits against 33, on the iCE40), not a negation and
                # a multiplexer.
                def magnitude_of(value):
                    sign = value[-1]
                    return ((value - sign) ^ sign.replicate(len(value)))[:32]
                m.d.sync += [
                    a.eq(magnitude_of(shifted_now)),
                    b.eq(magnitude_of(self.multiplier)),
                    negative.eq(shifted_now[-1] ^ self.multiplier[31]),
                ]
            if shift2 is not None:
                m.d.sync += shift2.eq(self.shift)

        # The pieces in order, each with whether it opens a new diagonal.
        # The compact form sums least significant diagonal first; the other
        # keeps the most significant first.
        ascending = self._compact
        order = sorted(((i, j) for i in range(pieces) for j in range(pieces)),
                       key=lambda p: ((p[0] + p[1]) if ascending else -(p[0] + p[1]), p[0]))
        step = Signal(range(cycles))
        m.d.sync += step.eq(Mux(self.start, 0, step + 1))
        shift_sum = Signal()
        if rounds_low:
            # The pieces of ``a``'s low 16 bits are first multiplied in the
            # product's second cycle (16-bit pieces) or fourth (8-bit).
            assert all(order.index(p) >= 1 for p in order if p[0] < 16 // w)
            with m.If(step == 0):
                m.d.sync += a_low.eq(a[:16] + Cat(C(0, 1), increment2))
        if signed_pieces:
            # ``x = sum(x_i 2**(w i))`` with the top piece signed and the
            # others unsigned: every piece fits a signed ``w + 1`` bits, and
            # with the increment in the low pieces ``w + 2`` (the top one of
            # `a_low`'s, 2**16 at most, a MULT18X18D's 18 signed bits at w 16).
            a_piece, b_piece = Signal(signed(w + 2 if rounds_low else w + 1)), Signal(signed(w + 1))
            piece = Signal(signed(2 * w + 3 if rounds_low else 2 * w + 2))
            total = Signal(signed(64))
        else:
            a_piece, b_piece = Signal(w), Signal(w)
            piece = Signal(2 * w)

        def part(value, k):
            if signed_pieces and k == pieces - 1:
                return value[k * w:].as_signed()        # w bits, or a's w + 1
            return value[k * w:(k + 1) * w]

        def a_part(value, rounded, k):
            # `rounded`: `a_low`, which holds the low 16 bits with the MLAS
            # rounding's increment.
            if rounded is not None and k < 16 // w:
                return rounded[k * w:] if k == 16 // w - 1 else rounded[k * w:(k + 1) * w]
            return part(value, k)

        with m.Switch(step):
            for k, (i, j) in enumerate(order):
                with m.Case(k):
                    opens = k > 0 and i + j != sum(order[k - 1])
                    m.d.comb += [a_piece.eq(a_part(a, a_low if rounds_low else None, i)), b_piece.eq(part(b, j)),
                                 shift_sum.eq(opens)]
        m.d.comb += piece.eq(a_piece * b_piece)
        if ascending:
            # The running sum holds one diagonal's pieces and the carry from
            # the ones below; as the next diagonal opens, its low `w` bits
            # are final and move into `low`, so the adder is 2 `w` and a few
            # bits wide, not 64. It starts with the rounding's term (see
            # `_compact_rounding`), ``-neg`` or ``2**30 - neg``, so that the
            # sum is ``P`` and the term together: signed, as ``P - neg`` is
            # -1 for P = 0, and the borrow carries up as the sum shifts.
            # The term is made from the value's own shift (`shift2`, or the
            # input without `per_value_settings`) and sign, both registered
            # as it started.
            shift_now = self.shift if shift2 is None else shift2
            once = self.single_round | (shift_now > 0)
            rounded = negative & ~(once & (shift_now == 31))   # t = 0: S = P
            offset = Signal(signed(32))
            m.d.comb += offset.eq(Mux(once, -rounded, (1 << 30) - rounded))
            # (At least 33 bits, as the term 2**30 enters at the first
            # diagonal's weight.)
            running = Signal(signed(max(2 * w + pieces.bit_length() + 2, 33)))
            low = Signal((2 * pieces - 2) * w)
            addend = Signal.like(running)
            with m.If(step == 0):
                m.d.comb += addend.eq(offset)
            with m.Elif(shift_sum):
                m.d.comb += addend.eq(running >> w)
                m.d.sync += low.eq(Cat(low[w:], running[:w]))
            with m.Else():
                m.d.comb += addend.eq(running)
            m.d.sync += running.eq(addend + piece)
            total = Signal(signed(len(low) + len(running)))
            m.d.comb += total.eq(Cat(low, running))
        else:
            with m.If(step == 0):
                m.d.sync += total.eq(piece)
            with m.Elif(shift_sum):
                m.d.sync += total.eq((total << w) + piece)
            with m.Else():
                m.d.sync += total.eq(total + piece)

        # The sign and the saturating case stay with the sum, as a new value
        # may start in the sum's last cycle.
        if magnitude is not None:
            m.d.comb += magnitude.eq(total)
        # ``INT32_MIN * INT32_MIN`` is the one product whose magnitudes are
        # both 2**31 (whose bits are INT32_MIN's too, so the signed operands
        # are compared alike): found from `a` and `b` (which a value starting
        # in this cycle replaces only at its end), not beside the shift on
        # the way into them.
        with m.If(step == cycles - 1):
            a_min = (a[:32] == 1 << 31) & a[32] if signed_pieces and mlas else a == 1 << 31
            m.d.sync += saturate.eq(a_min & (b == 1 << 31))
            if mlas:
                m.d.sync += window.settings(m, a ^ a[-1].replicate(len(a)) if signed_pieces else a,
                                            mlas2, self.shift if shift2 is None else shift2)
            if negative_out is not None:
                m.d.sync += negative_out.eq(negative)
            if shift2 is not None:
                m.d.sync += [shift3.eq(shift2), *stage3]
        if signed_pieces:
            m.d.comb += product.eq(total)
        else:
            m.d.comb += product.eq(Mux(negative_out, -total, total))
