"""Lanes delayed by a staircase of cycle counts: the systolic array's skews."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .module_library import ModuleLibrary


__all__ = ["Staircase"]


class Staircase(wiring.Component):
    """``lanes`` values of ``width`` bits, lane ``k`` delayed by
    ``first + k * step`` cycles (registers reset to 0).

    An ``R``-lane skew holds about ``R * R / 2`` registers; under
    `generate_verilog` it is a Verilog module written directly, so that
    neither Python nor Yosys handles the registers one by one: a lane of at
    most `RING_MIN_BITS` bits is a shift register, a longer one a ring of
    words that a counter shared by all lanes addresses (one write and one
    read per cycle, however long the delay). Elsewhere the registers are
    elaborated in place.

    Members
    -------
    i : In(width * lanes)
        Lane ``k`` is bits ``k * width .. k * width + width - 1``.
    o : Out(width * lanes)
        The lanes, delayed.
    """

    def __init__(self, *, width, lanes, first, step, keep=False):
        self._width, self._lanes, self._first, self._step = width, lanes, first, step
        self._keep = keep
        self._delays = [first + k * step for k in range(lanes)]
        if min(self._delays) < 0:
            raise ValueError(f"Staircase delays must be >= 0, not {self._delays}")
        super().__init__({"i": In(width * lanes), "o": Out(width * lanes)})

    @property
    def module_name(self):
        step = f"m{-self._step}" if self._step < 0 else str(self._step)
        return f"tpu_staircase_{self._lanes}x{self._width}_{self._first}_{step}"

    def elaborate(self, platform):
        m = Module()
        w = self._width
        if isinstance(platform, ModuleLibrary):
            platform.define(self.module_name, self._verilog)
            m.submodules.lanes = Instance(self.module_name, i_clk=ClockSignal(), i_rst=ResetSignal(),
                                          i_i=self.i, o_o=self.o)
            return m
        for k, delay in enumerate(self._delays):
            value = self.i[k * w:(k + 1) * w]
            for d in range(delay):
                reg = Signal(w, name=f"lane{k}_d{d}", attrs={"keep": 1} if self._keep else {})
                m.d.sync += reg.eq(value)
                value = reg
            m.d.comb += self.o[k * w:(k + 1) * w].eq(value)
        return m

    def _verilog(self):
        w, total = self._width, self._width * self._lanes
        lines = [f"module {self.module_name}(clk, rst, i, o);",
                 "  input clk;",
                 "  input rst;",
                 f"  input [{total - 1}:0] i;",
                 f"  output [{total - 1}:0] o;"]
        rings = [d for d in self._delays if w * d > RING_MIN_BITS]
        if rings:
            lines += self._ring_control(max(rings))
            count = max(rings).bit_length()
        for k, delay in enumerate(self._delays):
            lane = f"i[{k * w + w - 1}:{k * w}]"
            out = f"o[{k * w + w - 1}:{k * w}]"
            if delay == 0:
                lines.append(f"  assign {out} = {lane};")
            elif w * delay > RING_MIN_BITS:
                lines += self._ring_lane(k, delay, lane, out, count)
            else:
                lines += self._shift_lane(k, delay, lane, out)
        lines.append("endmodule\n")
        return "\n".join(lines)

    def _shift_lane(self, k, delay, lane, out):
        w = self._width
        bits = w * delay
        shifted = lane if delay == 1 else f"{{lane{k}[{bits - w - 1}:0], {lane}}}"
        return [f"  reg [{bits - 1}:0] lane{k} = {bits}'d0;",
                "  always @(posedge clk)",
                f"    if (rst) lane{k} <= {bits}'d0;",
                f"    else lane{k} <= {shifted};",
                f"  assign {out} = lane{k}[{bits - 1}:{bits - w}];"]

    @staticmethod
    def _ring_control(longest):
        # `head` is where every ring writes this cycle; `filled` counts the
        # writes since reset (up to the longest delay), so that a lane reads
        # 0, as its reset shift register would, until it has `delay` of them.
        head, count = _address_bits(longest), longest.bit_length()
        return [f"  reg [{head - 1}:0] head = {head}'d0;",
                f"  reg [{count - 1}:0] filled = {count}'d0;",
                "  always @(posedge clk)",
                f"    if (rst) filled <= {count}'d0;",
                "    else begin",
                f"      head <= head + {head}'d1;",
                f"      if (filled != {count}'d{longest}) filled <= filled + {count}'d1;",
                "    end"]

    def _ring_lane(self, k, delay, lane, out, count):
        w, bits = self._width, _address_bits(delay)
        behind = (1 << bits) - delay    # head - delay, modulo the ring's size
        return [f"  reg [{w - 1}:0] lane{k} [{(1 << bits) - 1}:0];",
                "  always @(posedge clk)",
                f"    if (!rst) lane{k}[head[{bits - 1}:0]] <= {lane};",
                f"  wire [{bits - 1}:0] lane{k}_read = head[{bits - 1}:0] + {bits}'d{behind};",
                f"  assign {out} = filled >= {count}'d{delay} ? lane{k}[lane{k}_read] : {w}'d0;"]


# Lanes of more bits than this (width x delay) are rings rather than shift
# registers: Verilator emits a statement per 32-bit word of a shift register
# every cycle, which for the large arrays' staircases grows with rows x cols.
RING_MIN_BITS = 32


def _address_bits(delay):
    """Bits addressing a ring of at least `delay` words (a power of two, so
    that the shared head counter wraps with every ring)."""
    return max(1, (delay - 1).bit_length())
