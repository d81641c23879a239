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
    `generate_verilog` it is a Verilog module of one shift register per lane,
    written directly, so that neither Python nor Yosys handles the registers
    one by one. Elsewhere the registers are elaborated in place.

    Members
    -------
    i : In(width * lanes)
        Lane ``k`` is bits ``k * width .. k * width + width - 1``.
    o : Out(width * lanes)
        The lanes, delayed.
    """

    def __init__(self, *, width, lanes, first, step):
        self._width, self._lanes, self._first, self._step = width, lanes, first, step
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
                reg = Signal(w, name=f"lane{k}_d{d}")
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
        for k, delay in enumerate(self._delays):
            lane = f"i[{k * w + w - 1}:{k * w}]"
            out = f"o[{k * w + w - 1}:{k * w}]"
            if delay == 0:
                lines.append(f"  assign {out} = {lane};")
                continue
            bits = w * delay
            shifted = lane if delay == 1 else f"{{lane{k}[{bits - w - 1}:0], {lane}}}"
            lines += [f"  reg [{bits - 1}:0] lane{k} = {bits}'d0;",
                      "  always @(posedge clk)",
                      f"    if (rst) lane{k} <= {bits}'d0;",
                      f"    else lane{k} <= {shifted};",
                      f"  assign {out} = lane{k}[{bits - 1}:{bits - w}];"]
        lines.append("endmodule\n")
        return "\n".join(lines)
