"""Test top: weight memory feeding the weight FIFO, as the core wires them."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...hdl.weight_fifo import WeightFifo, WeightLoad
from ...hdl.weight_memory import WeightMemory, WeightMemoryFillSignature


__all__ = ["WeightPathTop"]


class WeightPathTop(wiring.Component):
    """`WeightMemory` -> `WeightFifo`, with the FIFO's command and output
    streams and the memory's fill port on the outside."""

    def __init__(self, config):
        self._config = config
        super().__init__({
            "load": In(stream.Signature(WeightLoad(config))),
            "o":    Out(stream.Signature(data.ArrayLayout(signed(8), config.cols))),
            "fill": In(WeightMemoryFillSignature(config)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.memory = memory = WeightMemory(self._config)
        m.submodules.fifo = fifo = WeightFifo(self._config)
        wiring.connect(m, fifo.mem_request, memory.request)
        wiring.connect(m, memory.response, fifo.mem_response)
        wiring.connect(m, wiring.flipped(self.load), fifo.load)
        wiring.connect(m, fifo.o, wiring.flipped(self.o))
        wiring.connect(m, wiring.flipped(self.fill), memory.fill)
        m.d.comb += self.idle.eq(fifo.idle)
        return m
