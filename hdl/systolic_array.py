"""The Matrix Multiply Unit: a weight-stationary systolic array."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .multiplier import MULTIPLIER_LATENCY, Multiplier, MultiplierSignature


__all__ = ["SystolicArray", "psum_width"]


# The extreme magnitude of one product: int8 weight x uint8-or-int8 activation.
_MAX_PRODUCT = 255 * 128


def psum_width(rows):
    """Bits of a signed partial sum that can never overflow for `rows` products."""
    return (rows * _MAX_PRODUCT).bit_length() + 1


class SystolicArray(wiring.Component):
    """Weight-stationary ``rows x cols`` array of int8 multiply-accumulate cells.

    Processing element PE(k, n) holds weight ``w[k, n]`` and computes, for
    every activation row ``x``, one term of ``y[n] = sum_k x[k] * w[k, n]``.
    Activations move right, partial sums move down; the unit skews its input
    and deskews its output itself, so rows go in whole and come out whole,
    exactly :attr:`latency` cycles later, one row per cycle.

    Each PE has three weight registers, so that weight loading never stalls
    the array:

    * *transit*: a shift chain up each column, filled one tile row per
      ``w_shift`` (tile row 0 first);
    * *shadow*: loaded from transit, a whole column at once, on ``w_capture``;
    * *active*: loaded from shadow when an activation row flagged
      ``act_switch`` passes the PE, so the new tile takes effect with the data
      wavefront and the row that carries the flag already uses it.

    The weight controls are skewed by column like the activations, so the
    rules for a controller, in cycles at these ports, are: a capture must
    come at least ``rows - 1`` cycles after the switch that consumed the
    previous shadow tile, and at least one cycle after the last shift of its
    tile; a switch must come at least one cycle after the capture it uses.
    A shift may share a cycle with a capture (it starts the next tile). This
    lets back-to-back tiles run with zero idle cycles whenever each tile
    streams at least ``rows`` rows.

    The PE is pipelined so that each multiplier has registered operands and a
    registered product: the switch multiplexer (shadow or active) feeds the
    multiplier's operand register alongside the active register, never the
    multiplication itself. The activation, its switch flag and the weight
    controls therefore reach each PE's registers one cycle before its
    multiplier uses them; the extra cycle is taken from the input skew, so
    :attr:`latency` and the rules above are those of the unpipelined PE, and
    a weight control at these ports goes straight into the registers of
    column 0 (as an activation row goes into those of row 0).

    Parameters
    ----------
    rows, cols : int
        Array shape, 1 to 256 each.
    tag_width : int
        Width of a user tag that travels with each row (e.g. its accumulator
        address).
    multiplier : callable
        Makes each PE's multiplier, a component with
        :class:`~tpu.hdl.multiplier.MultiplierSignature` and its two-cycle
        timing: a class called with no arguments (default
        :class:`~tpu.hdl.multiplier.Multiplier`, plain ``*``) or a function
        of the PE's row and column (e.g.
        :func:`~tpu.hdl.multiplier.multiplier_mix`, DSP blocks for some PEs
        and logic for the rest).

    Members
    -------
    act_valid : In(1)
        An activation row is presented this cycle.
    act_data : In(ArrayLayout(unsigned(8), rows))
        The row's ``rows`` activation bytes.
    act_unsigned : In(1)
        Read ``act_data`` as uint8 (else int8).
    act_switch : In(1)
        Switch to the shadow tile starting with this row.
    act_tag : In(tag_width)
        Passed through to ``out_tag``.
    w_shift : In(1)
        Shift ``w_data`` (one tile row) into the transit chain.
    w_data : In(ArrayLayout(signed(8), cols))
        One row of a weight tile.
    w_capture : In(1)
        Copy the transit chain into the shadow registers.
    out_valid : Out(1)
    out_data : Out(ArrayLayout(signed(32), cols))
        ``act_data @ w`` for the row presented :attr:`latency` cycles ago.
    out_tag : Out(tag_width)
    """

    def __init__(self, *, rows, cols, tag_width=1, multiplier=Multiplier):
        for name, value in (("rows", rows), ("cols", cols)):
            if not isinstance(value, int) or not 1 <= value <= 256:
                raise ValueError(f"SystolicArray {name} must be an int in 1..256, not {value!r}")
        if not isinstance(tag_width, int) or tag_width < 1:
            raise ValueError(f"SystolicArray tag_width must be a positive int, not {tag_width!r}")
        if not callable(multiplier):
            raise TypeError(f"SystolicArray multiplier must be a callable (row, col) -> "
                            f"multiplier, not {multiplier!r}")
        self._rows = rows
        self._cols = cols
        # Made now, so that a bad multiplier fails here, not at elaboration.
        self._multipliers = [[self._make_multiplier(multiplier, k, n) for n in range(cols)]
                             for k in range(rows)]
        super().__init__({
            "act_valid":    In(1),
            "act_data":     In(data.ArrayLayout(unsigned(8), rows)),
            "act_unsigned": In(1),
            "act_switch":   In(1),
            "act_tag":      In(tag_width),
            "w_shift":      In(1),
            "w_data":       In(data.ArrayLayout(signed(8), cols)),
            "w_capture":    In(1),
            "out_valid":    Out(1),
            "out_data":     Out(data.ArrayLayout(signed(32), cols)),
            "out_tag":      Out(tag_width),
        })

    @property
    def rows(self):
        return self._rows

    @property
    def cols(self):
        return self._cols

    @property
    def latency(self):
        """Cycles from a row at the inputs to its sums at the outputs."""
        # The wavefront's walk to the last row and (with the deskew) the last
        # column, the multiplier, and the last row's partial-sum register.
        return (self._rows - 1) + (self._cols - 1) + MULTIPLIER_LATENCY + 1

    @staticmethod
    def _make_multiplier(make, row, col):
        # A class (the default) takes no arguments; a factory takes the PE's place.
        mul = make() if isinstance(make, type) else make(row, col)
        expected = MultiplierSignature().members
        if not isinstance(mul, wiring.Component) or mul.signature.members != expected:
            raise TypeError(f"SystolicArray multiplier for PE({row}, {col}) must be a component "
                            f"with MultiplierSignature (a, b in; p out), not {mul!r}")
        return mul

    def elaborate(self, platform):
        m = Module()
        rows, cols = self._rows, self._cols

        def delayed(value, cycles, name):
            for i in range(cycles):
                reg = Signal.like(value, name=f"{name}_d{i}")
                m.d.sync += reg.eq(value)
                value = reg
            return value

        # Left edge: widen each activation to 9-bit signed, so one datapath
        # serves int8 and uint8, then skew row k by k cycles: this is what
        # PE(k, 0) registers, into its multiplier and towards PE(k, 1).
        lane_act, lane_switch = [], []
        for k in range(rows):
            byte = self.act_data[k]
            wide = Signal(signed(9), name=f"act_in_{k}")
            m.d.comb += wide.eq(Mux(self.act_unsigned, byte, byte.as_signed()))
            lane_act.append(delayed(wide, k, f"skew_act_{k}"))
            lane_switch.append(delayed(self.act_switch, k, f"skew_switch_{k}"))

        # Top edge: weight controls and data reach column n n cycles late,
        # matching the activation wavefront.
        col_shift, col_capture, col_wdata = [], [], []
        for n in range(cols):
            col_shift.append(delayed(self.w_shift, n, f"skew_wshift_{n}"))
            col_capture.append(delayed(self.w_capture, n, f"skew_wcapture_{n}"))
            col_wdata.append(delayed(self.w_data[n], n, f"skew_wdata_{n}"))

        width = psum_width(rows)
        psum_in = [C(0, signed(width))] * cols

        transit = [[Signal(signed(8), name=f"pe_{k}_{n}_transit") for n in range(cols)]
                   for k in range(rows)]
        for k in range(rows):
            act, switch = lane_act[k], lane_switch[k]
            for n in range(cols):
                shadow = Signal(signed(8), name=f"pe_{k}_{n}_shadow")
                active = Signal(signed(8), name=f"pe_{k}_{n}_active")
                weight = Signal(signed(8), name=f"pe_{k}_{n}_weight")
                psum = Signal(signed(width), name=f"pe_{k}_{n}_psum")

                below = transit[k + 1][n] if k + 1 < rows else col_wdata[n]
                # Plain multiplexers rather than `m.If`: at 256x256 the
                # per-PE conditional processes are what exhausts Yosys.
                m.d.comb += weight.eq(Mux(switch, shadow, active))
                m.d.sync += [
                    transit[k][n].eq(Mux(col_shift[n], below, transit[k][n])),
                    shadow.eq(Mux(col_capture[n], transit[k][n], shadow)),
                    active.eq(weight),
                ]
                # The multiplier registers `act` and `weight` as `active`
                # does (for plain `*` synthesis merges the two), so the
                # switch multiplexer sits in front of registers, not of the
                # multiplication.
                mul = self._multipliers[k][n]
                m.submodules[f"pe_{k}_{n}_mul"] = mul
                m.d.comb += [mul.a.eq(act), mul.b.eq(weight)]
                m.d.sync += psum.eq(psum_in[n] + mul.p)
                psum_in[n] = psum

                if n + 1 < cols:
                    next_act = Signal.like(act, name=f"pe_{k}_{n}_act")
                    next_switch = Signal(name=f"pe_{k}_{n}_switch")
                    m.d.sync += [next_act.eq(act), next_switch.eq(switch)]
                    act, switch = next_act, next_switch

        # Bottom edge: column n is n cycles early; align all columns.
        for n in range(cols):
            m.d.comb += self.out_data[n].eq(delayed(psum_in[n], cols - 1 - n, f"deskew_{n}"))

        m.d.comb += [
            self.out_valid.eq(delayed(self.act_valid, self.latency, "valid")),
            self.out_tag.eq(delayed(self.act_tag, self.latency, "tag")),
        ]
        return m
