"""The matrix part on two UART pins: `MatrixPart` behind a `RegisterTarget`
and the chip's own `SerialPort` (UART and frame bridge), so its frames
(CRC, byte stuffing, resynchronisation, stop-and-wait) are the whole
chip's (docs/serial_link.md) and the driver's `SerialLink` talks to it."""

from amaranth import *
from amaranth.lib import wiring

from .matrix_part import MatrixPart, check_matrix_part_config
from .module_library import ModuleLibrary
from .register_target import RegisterTarget
from .serial_port import (DEFAULT_DIVISOR, DEFAULT_LED_HOLD, SERIAL_PCIE_ID, SerialPort, SerialTop,
                          frame_retransmit_cycles)


__all__ = ["SerialMatrixPart", "MATRIX_PART_NAME", "BRIDGE_WORDS", "part_retransmit_cycles",
           "generate_matrix_part_verilog"]

#: Module name of the generated Verilog.
MATRIX_PART_NAME = "tpu_matrix_part"

#: The longest TLP either way: a 4-word header and one word of data.
BRIDGE_WORDS = 5


def part_retransmit_cycles(divisor, host_latency_cycles=0):
    """Cycles before a completion frame goes again (`frame_retransmit_cycles`
    of the longest TLP, `BRIDGE_WORDS`)."""
    return frame_retransmit_cycles(BRIDGE_WORDS, divisor, host_latency_cycles)


class SerialMatrixPart(SerialTop):
    """`MatrixPart(config)` behind a `RegisterTarget` and a `SerialPort`.

    Parameters
    ----------
    config : TPUConfig
    divisor, retransmit, led_hold :
        As for `SerialPort` (``retransmit`` by default `part_retransmit_cycles`).

    Members
    -------
    rx, tx, link_error : as for `SerialTop`
    busy, error : Out(1)
        STATUS.BUSY and STATUS.ERROR, for LEDs.
    """

    def __init__(self, config, *, divisor=DEFAULT_DIVISOR, retransmit=None, led_hold=DEFAULT_LED_HOLD):
        config = check_matrix_part_config(config)
        port = SerialPort(link_dw=1, max_words=BRIDGE_WORDS, divisor=divisor, retransmit=retransmit,
                          led_hold=led_hold)
        super().__init__(config, port, leds=["busy", "error"])

    def elaborate(self, platform):
        m = Module()
        m.submodules.target = target = RegisterTarget(completer_id=SERIAL_PCIE_ID)
        m.submodules.part = part = MatrixPart(self.config, addr_bits=target.addr_bits)
        port = self.add_port(m)
        wiring.connect(m, port.tlp_out, target.rx)
        wiring.connect(m, target.tx, port.tlp_in)
        wiring.connect(m, target.request, part.request)
        wiring.connect(m, part.read_data, target.read_data)
        m.d.comb += [self.busy.eq(part.busy), self.error.eq(part.error)]
        return m


def generate_matrix_part_verilog(config, *, divisor=DEFAULT_DIVISOR, family=None, **options):
    """Verilog of `SerialMatrixPart(config, divisor=divisor, **options)`, module
    ``tpu_matrix_part`` with ``clk`` and ``rst``; `family` as for
    `tpu.hdl.verilog.generate_verilog`."""
    from amaranth.back import verilog
    library = ModuleLibrary(family)
    top = SerialMatrixPart(config, divisor=divisor, **options)
    return verilog.convert(top, name=MATRIX_PART_NAME, emit_src=False, platform=library) + library.verilog()
