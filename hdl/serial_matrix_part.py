"""The matrix part on two UART pins: `MatrixPart` behind a `RegisterTarget`
and the chip's own `SerialBridge` and UART, so its frames (CRC, byte
stuffing, resynchronisation, stop-and-wait) are the whole chip's
(docs/serial_link.md) and the driver's `SerialLink` talks to it."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .matrix_part import MatrixPart, check_matrix_part_config
from .module_library import ModuleLibrary
from .register_target import RegisterTarget
from .serial_bridge import SerialBridge
from .serial_chip import DEFAULT_DIVISOR, SERIAL_PCIE_ID
from .uart import UartRx, UartTx, check_divisor


__all__ = ["SerialMatrixPart", "MATRIX_PART_NAME", "BRIDGE_WORDS", "part_retransmit_cycles",
           "generate_matrix_part_verilog"]

#: Module name of the generated Verilog.
MATRIX_PART_NAME = "tpu_matrix_part"

#: The longest TLP either way: a 4-word header and one word of data.
BRIDGE_WORDS = 5


def part_retransmit_cycles(divisor, host_latency_cycles=0):
    """Cycles before a completion frame goes again: four longest frames on
    the wire, plus the host's own delay (as `serial_chip.retransmit_cycles`)."""
    return 4 * (6 + 4 * BRIDGE_WORDS) * 10 * divisor + host_latency_cycles


class SerialMatrixPart(wiring.Component):
    """`MatrixPart(config)` with a UART link.

    Members
    -------
    rx : In(1)
        The UART line from the host (idle high).
    tx : Out(1)
        The UART line to the host.
    busy, error : Out(1)
        STATUS.BUSY and STATUS.ERROR, for LEDs.
    link_error : Out(1)
        A frame from the host arrived damaged within the last `led_hold` cycles.
    """

    def __init__(self, config, *, divisor=DEFAULT_DIVISOR, retransmit=None, led_hold=1 << 20):
        self._config = check_matrix_part_config(config)
        self._divisor = check_divisor(divisor)
        self._retransmit = part_retransmit_cycles(divisor) if retransmit is None else retransmit
        if not isinstance(led_hold, int) or led_hold < 1:
            raise ValueError(f"led_hold must be a positive int, not {led_hold!r}")
        self._led_hold = led_hold
        super().__init__({
            "rx":         In(1, init=1),
            "tx":         Out(1, init=1),
            "busy":       Out(1),
            "error":      Out(1),
            "link_error": Out(1),
        })

    @property
    def config(self):
        return self._config

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        m.submodules.target = target = RegisterTarget(completer_id=SERIAL_PCIE_ID)
        m.submodules.part = part = MatrixPart(self._config, addr_bits=target.addr_bits)
        m.submodules.uart_rx = uart_rx = UartRx(self._divisor)
        m.submodules.uart_tx = uart_tx = UartTx(self._divisor)
        m.submodules.bridge = bridge = SerialBridge(link_dw=1, max_words=BRIDGE_WORDS,
                                                    retransmit_cycles=self._retransmit)
        m.d.comb += [uart_rx.rx.eq(self.rx), self.tx.eq(uart_tx.tx), bridge.rx_error.eq(uart_rx.error)]
        wiring.connect(m, uart_rx.data, bridge.rx_byte)
        wiring.connect(m, bridge.tx_byte, uart_tx.data)
        wiring.connect(m, bridge.tlp_out, target.rx)
        wiring.connect(m, target.tx, bridge.tlp_in)
        wiring.connect(m, target.request, part.request)
        wiring.connect(m, part.read_data, target.read_data)

        hold = Signal(range(self._led_hold + 1))
        with m.If(bridge.bad_frame):
            m.d.sync += hold.eq(self._led_hold)
        with m.Elif(hold != 0):
            m.d.sync += hold.eq(hold - 1)
        m.d.comb += [self.busy.eq(part.busy), self.error.eq(part.error), self.link_error.eq(hold != 0)]
        return m


def generate_matrix_part_verilog(config, *, divisor=DEFAULT_DIVISOR, family=None, **options):
    """Verilog of `SerialMatrixPart(config, divisor=divisor, **options)`, module
    ``tpu_matrix_part`` with ``clk`` and ``rst``; `family` as for
    `tpu.hdl.verilog.generate_verilog`."""
    from amaranth.back import verilog
    library = ModuleLibrary(family)
    top = SerialMatrixPart(config, divisor=divisor, **options)
    return verilog.convert(top, name=MATRIX_PART_NAME, emit_src=False, platform=library) + library.verilog()
