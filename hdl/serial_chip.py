"""The whole chip on two UART pins: `HostInterface` behind a `SerialBridge`."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..host_registers import Status
from .host_interface import HostInterface
from .serial_bridge import SerialBridge
from .uart import UartRx, UartTx, check_divisor


__all__ = ["SerialChip", "DEFAULT_DIVISOR", "max_tlp_words", "retransmit_cycles"]

#: Clock cycles a UART bit lasts when nothing else is said: fast, for simulation.
DEFAULT_DIVISOR = 4

#: The chip's requester and completer ID on the serial link (bus 1, device 0,
#: function 0): with no enumeration, a fixed one.
SERIAL_PCIE_ID = 0x0100


def max_tlp_words(config):
    """Longest TLP either side of the bridge, in words: a 4-word header and
    a payload of ``max_payload``."""
    return 4 + config.max_payload // 4


def retransmit_cycles(config, divisor, host_latency_cycles=0):
    """Cycles the chip waits for an ACK before it sends a TLP frame again:
    four longest frames on the wire (the host may be sending one of its own
    before the ACK), plus the host's own delay."""
    longest = 6 + 4 * max_tlp_words(config)
    return 4 * longest * 10 * divisor + host_latency_cycles


class SerialChip(wiring.Component):
    """`HostInterface` of `config` with a UART link (docs/serial_link.md).

    Parameters
    ----------
    config : TPUConfig
    divisor : int
        Clock cycles per UART bit (the clock frequency over the baud rate).
    retransmit : int or None
        Cycles without an ACK before a frame to the host goes again
        (`retransmit_cycles` by default).
    led_hold : int
        Cycles `link_error` stays on after a damaged frame, so a person sees it.

    Members
    -------
    rx : In(1)
        The UART line from the host (idle high).
    tx : Out(1)
        The UART line to the host.
    busy, halted, error : Out(1)
        STATUS.BUSY, STATUS.HALTED and STATUS.ERROR, for LEDs.
    link_error : Out(1)
        A frame from the host arrived damaged within the last `led_hold` cycles.
    """

    def __init__(self, config, *, divisor=DEFAULT_DIVISOR, retransmit=None, led_hold=1 << 20):
        self._config = config
        self._divisor = check_divisor(divisor)
        self._retransmit = retransmit_cycles(config, divisor) if retransmit is None else retransmit
        if not isinstance(led_hold, int) or led_hold < 1:
            raise ValueError(f"led_hold must be a positive int, not {led_hold!r}")
        self._led_hold = led_hold
        super().__init__({
            "rx":         In(1, init=1),
            "tx":         Out(1, init=1),
            "busy":       Out(1),
            "halted":     Out(1),
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
        cfg = self._config
        m.submodules.host = host = HostInterface(cfg)
        m.submodules.uart_rx = uart_rx = UartRx(self._divisor)
        m.submodules.uart_tx = uart_tx = UartTx(self._divisor)
        m.submodules.bridge = bridge = SerialBridge(link_dw=cfg.link_dw, max_words=max_tlp_words(cfg),
                                                    retransmit_cycles=self._retransmit)
        m.d.comb += [
            uart_rx.rx.eq(self.rx),
            self.tx.eq(uart_tx.tx),
            bridge.rx_error.eq(uart_rx.error),
            host.pcie_id.eq(SERIAL_PCIE_ID),
        ]
        wiring.connect(m, uart_rx.data, bridge.rx_byte)
        wiring.connect(m, bridge.tx_byte, uart_tx.data)
        wiring.connect(m, bridge.tlp_out, host.rx)
        wiring.connect(m, host.tx, bridge.tlp_in)

        hold = Signal(range(self._led_hold + 1))
        with m.If(bridge.bad_frame):
            m.d.sync += hold.eq(self._led_hold)
        with m.Elif(hold != 0):
            m.d.sync += hold.eq(hold - 1)
        m.d.comb += [
            self.busy.eq((host.status & Status.BUSY) != 0),
            self.halted.eq((host.status & Status.HALTED) != 0),
            self.error.eq((host.status & Status.ERROR) != 0),
            self.link_error.eq(hold != 0),
        ]
        return m
