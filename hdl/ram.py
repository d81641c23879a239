"""A large zero-initialised memory that Verilog generation emits compactly."""

from amaranth import *
from amaranth.lib.memory import Memory

from .module_library import ModuleLibrary


__all__ = ["Ram"]


class _WritePort:
    def __init__(self, shape, depth):
        self.en = Signal()
        self.addr = Signal(range(depth))
        self.data = Signal(shape)


class _ReadPort:
    def __init__(self, shape, depth, transparent):
        self.en = Signal(init=1)
        self.addr = Signal(range(depth))
        self.data = Signal(shape)
        self.transparent = transparent


class Ram(Elaboratable):
    """``depth`` words of `shape`, all zero at power-on, with one write port
    and synchronous read ports: the part of ``lib.memory.Memory`` that the
    unified buffer, the accumulators and the weight memory use, with the
    same port API (``write_port()``, ``read_port(transparent_for=...)``)
    and the same behaviour.

    Under `generate_verilog` it is a Verilog module of its own whose contents
    a single loop clears, where Amaranth's memory would carry its initial
    value as one constant bit by bit through Python and Yosys and then a
    statement per word (a 96K-row, 256-byte unified buffer would need tens of
    GiB). Elsewhere (Amaranth's simulator, FPGA builds) it is that memory.
    """

    def __init__(self, *, shape, depth):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"Ram depth must be a positive int, not {depth!r}")
        self._shape = shape
        self._depth = depth
        self._write = None
        self._reads = []

    @property
    def width(self):
        return Shape.cast(self._shape).width

    def write_port(self):
        if self._write is not None:
            raise ValueError("Ram has one write port")
        self._write = _WritePort(self._shape, self._depth)
        return self._write

    def read_port(self, *, transparent_for=()):
        """A read port: ``data`` is the word at ``addr`` the cycle after ``en``
        (or, when transparent to the write port, the word written to
        ``addr`` in that same cycle)."""
        if any(port is not self._write for port in transparent_for):
            raise ValueError("Ram read ports can only be transparent for its own write port")
        port = _ReadPort(self._shape, self._depth, bool(transparent_for))
        self._reads.append(port)
        return port

    @property
    def module_name(self):
        kinds = "".join("t" if port.transparent else "n" for port in self._reads)
        return f"tpu_ram_{self._depth}x{self.width}_r{kinds}"

    def elaborate(self, platform):
        m = Module()
        if self._write is None:
            raise ValueError("Ram needs its write port")
        # A 1-word memory has a 0-bit address, which Verilog cannot declare.
        if isinstance(platform, ModuleLibrary) and self._depth > 1:
            platform.define(self.module_name, self._verilog)
            wr = self._write
            ports = {"i_clk": ClockSignal(), "i_wr_en": wr.en, "i_wr_addr": wr.addr,
                     "i_wr_data": Value.cast(wr.data)}
            for i, rd in enumerate(self._reads):
                ports.update({f"i_rd{i}_en": rd.en, f"i_rd{i}_addr": rd.addr,
                              f"o_rd{i}_data": Value.cast(rd.data)})
            m.submodules.ram = Instance(self.module_name, **ports)
            return m

        m.submodules.mem = mem = Memory(shape=self._shape, depth=self._depth, init=[])
        wr = mem.write_port()
        m.d.comb += [wr.en.eq(self._write.en), wr.addr.eq(self._write.addr),
                     wr.data.eq(self._write.data)]
        for port in self._reads:
            rd = mem.read_port(transparent_for=(wr,) if port.transparent else ())
            m.d.comb += [rd.en.eq(port.en), rd.addr.eq(port.addr), port.data.eq(rd.data)]
        return m

    def _verilog(self):
        """The module: the same statements Yosys writes for Amaranth's memory,
        with the contents cleared by one loop."""
        depth, width = self._depth, self.width
        abits = (depth - 1).bit_length()
        reads = range(len(self._reads))
        names = ["clk", "wr_en", "wr_addr", "wr_data",
                 *(f"rd{i}_{p}" for i in reads for p in ("en", "addr", "data"))]
        lines = [f"module {self.module_name}({', '.join(names)});",
                 "  input clk;",
                 "  input wr_en;",
                 f"  input [{abits - 1}:0] wr_addr;",
                 f"  input [{width - 1}:0] wr_data;"]
        for i in reads:
            lines += [f"  input rd{i}_en;",
                      f"  input [{abits - 1}:0] rd{i}_addr;",
                      f"  output reg [{width - 1}:0] rd{i}_data;"]
        lines += [f"  reg [{width - 1}:0] mem [{depth - 1}:0];",
                  f"  reg [{abits}:0] i;",
                  "  initial begin",
                  f"    for (i = 0; i < {abits + 1}'d{depth}; i = i + 1'd1)",
                  f"      mem[i[{abits - 1}:0]] = {width}'d0;",
                  "  end",
                  "  always @(posedge clk) begin",
                  "    if (wr_en)",
                  "      mem[wr_addr] <= wr_data;",
                  "  end"]
        for i, port in zip(reads, self._reads):
            lines += ["  always @(posedge clk) begin",
                      f"    if (rd{i}_en) begin",
                      f"      rd{i}_data <= mem[rd{i}_addr];"]
            if port.transparent:
                lines += [f"      if (wr_en && rd{i}_addr == wr_addr)",
                          f"        rd{i}_data <= wr_data;"]
            lines += ["    end",
                      "  end"]
        lines.append("endmodule\n")
        return "\n".join(lines)
