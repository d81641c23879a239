"""A synthesis benchmark top for the Matrix Multiply Unit.

A bare :class:`~tpu.hdl.systolic_array.SystolicArray` has hundreds of input
and output bits, far more than a board has pins, and if its inputs were tied
to constants synthesis would delete most of it. :class:`MxuBenchTop` keeps the
whole array alive with two LEDs' worth of pins: a free-running LFSR drives
every input bit, and an XOR tree folds every output bit into the LEDs.
"""

from amaranth import *
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

from ..hdl.multiplier import Multiplier
from ..hdl.systolic_array import SystolicArray


__all__ = ["MxuBenchTop", "LFSR_TAPS"]


# x^32 + x^22 + x^2 + x + 1, a maximal-length polynomial: the Galois LFSR
# below then runs through all 2^32 - 1 nonzero states.
LFSR_TAPS = 0x8020_0003


class MxuBenchTop(wiring.Component):
    """``SystolicArray(rows, cols)`` with pseudo-random stimulus and folded outputs.

    Every cycle a 32-bit Galois LFSR steps and its low bit enters a mixing
    shift chain with one flip-flop per array input bit (activations,
    weights, ``act_valid``, ``act_unsigned``, ``act_switch``, ``act_tag``,
    ``w_shift``, ``w_capture``), so each input comes straight from its own
    register and no input is constant. Every output bit (``out_data``,
    ``out_tag``, ``out_valid``) goes into a pipelined XOR tree, with a
    register after each level of four-input XORs (one LUT4), whose
    ``out_width`` results drive ``result``. So every path from the stimulus
    to the outputs passes through registers at both ends, and the critical
    path, hence the Fmax, is the array's own.

    Parameters
    ----------
    rows, cols : int
        Array shape, as for :class:`SystolicArray`.
    multiplier : callable
        The PEs' multipliers, as for :class:`SystolicArray`.
    control_fanout : int or None
        Rows per copy of the weight controls, as for :class:`SystolicArray`.
    out_width : int
        Bits the outputs are folded into (one per LED).

    Members
    -------
    result : Out(out_width)
        Bit ``j`` is the XOR of output bits ``j, j + out_width, ...`` of the
        array, a few cycles late. When elaborated for a platform it also
        drives the board's LEDs ``led`` 0 to ``out_width - 1``.

    The clock and reset are the platform's default ``sync`` domain (the
    board oscillator: 12 MHz on the iCEBreaker, 25 MHz on the ULX3S).
    """

    def __init__(self, *, rows, cols, out_width=2, multiplier=Multiplier, control_fanout=None):
        if not isinstance(out_width, int) or out_width < 1:
            raise ValueError(f"MxuBenchTop out_width must be a positive int, not {out_width!r}")
        # Built here, so that a bad shape fails now, not at elaboration.
        self.mxu = SystolicArray(rows=rows, cols=cols, multiplier=multiplier,
                                 control_fanout=control_fanout)
        self._out_width = out_width
        super().__init__({"result": Out(out_width)})

    @property
    def out_width(self):
        return self._out_width

    def _ports(self, flow):
        # Every array port of one direction, found from its signature rather
        # than listed by name, so a port added to the array later is covered.
        return [Value.cast(getattr(self.mxu, name))
                for name, member in self.mxu.signature.members.items()
                if member.is_port and member.flow == flow]

    def elaborate(self, platform):
        m = Module()
        m.submodules.mxu = self.mxu

        # Stimulus. A chain with a flip-flop per input bit gives every array
        # input a register of its own and costs a handful of LUTs at any
        # array size (a wide LFSR would need a maximal polynomial per width,
        # for no better effect on synthesis). Each stage XORs in its own old
        # value instead of plainly shifting: in a plain shift register each
        # flip-flop's D is its neighbour's Q, so yosys merges every one-cycle
        # delay the array applies to an input (its skew registers) with the
        # neighbouring chain stage and then moves logic across it, which
        # changes the array it is meant to measure.
        lfsr = Signal(32, init=1)
        m.d.sync += lfsr.eq((lfsr >> 1) ^ Mux(lfsr[0], LFSR_TAPS, 0))
        inputs = Cat(*self._ports(In))
        chain = Signal(len(inputs))
        m.d.sync += chain.eq(Cat(chain[1:], lfsr[0]) ^ chain)
        m.d.comb += inputs.eq(chain)

        # Response. XOR keeps every output bit observable: flipping any one
        # flips a result bit, so synthesis can remove no part of the array.
        outputs = Cat(*self._ports(Out))
        lanes = [[outputs[i] for i in range(j, len(outputs), self._out_width)]
                 for j in range(self._out_width)]
        level = 0
        while any(len(lane) > 1 for lane in lanes):
            next_lanes = []
            for j, lane in enumerate(lanes):
                folded = []
                for g in range(0, len(lane), 4):
                    reg = Signal(name=f"fold_{level}_{j}_{g // 4}")
                    m.d.sync += reg.eq(Cat(*lane[g:g + 4]).xor())
                    folded.append(reg)
                next_lanes.append(folded)
            lanes = next_lanes
            level += 1
        # A last register in front of the pins, so no output path is part of
        # the timing either.
        result = Signal(self._out_width)
        m.d.sync += result.eq(Cat(*(lane[0] for lane in lanes)))
        m.d.comb += self.result.eq(result)

        if platform is not None:
            for j in range(self._out_width):
                led = io.Buffer("o", platform.request("led", j, dir="-"))
                m.submodules[f"led_{j}"] = led
                m.d.comb += led.o.eq(result[j])
        return m
