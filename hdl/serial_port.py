"""The chip's end of the serial link: a UART, the frame bridge between it
and a link stream, and the link-error LED (docs/serial_link.md).

`SerialChip` puts the host interface behind a `SerialPort`, `SerialMatrixPart`
a one-word register target; both are `SerialTop`s, and both speak the same
frames to the driver's `SerialLink`.
"""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .lfsr import LfsrTimer
from .serial_bridge import SerialBridge, check_bridge_parameters
from .tlp import link_stream
from .uart import UartRx, UartTx, check_divisor


__all__ = ["SerialPort", "SerialTop", "DEFAULT_DIVISOR", "DEFAULT_LED_HOLD", "SERIAL_PCIE_ID",
           "frame_retransmit_cycles"]

#: Clock cycles a UART bit lasts when nothing else is said: fast, for simulation.
DEFAULT_DIVISOR = 4

#: Cycles the link-error LED stays on when nothing else is said.
DEFAULT_LED_HOLD = 1 << 20

#: The chip's requester and completer ID on the serial link (bus 1, device 0,
#: function 0): with no enumeration, a fixed one.
SERIAL_PCIE_ID = 0x0100


def frame_retransmit_cycles(max_words, divisor, host_latency_cycles=0):
    """Cycles to wait for an ACK before a TLP frame of up to `max_words`
    words goes again: four longest frames on the wire (the host may be
    sending one of its own before the ACK), plus the host's own delay."""
    longest = 6 + 4 * max_words
    return 4 * longest * 10 * divisor + host_latency_cycles


class SerialPort(wiring.Component):
    """`UartRx` and `UartTx` with a `SerialBridge` between them and the link
    streams, and a hold on the bridge's ``bad_frame`` for an LED.

    Parameters
    ----------
    link_dw : int
        Words per beat of the link streams (1, 2, 4 or 8).
    max_words : int
        Longest TLP either way, in words (header and payload).
    divisor : int
        Clock cycles per UART bit (the clock frequency over the baud rate),
        at least 4.
    retransmit : int or None
        Cycles without an ACK before a frame to the host goes again
        (`frame_retransmit_cycles` of `max_words` and `divisor` by default).
    led_hold : int
        Cycles `link_error` stays on after a damaged frame, so a person sees it.
    small : bool
        The bridge's form for the narrow host protocol (`SerialBridge`).

    Members
    -------
    rx : In(1)
        The UART line from the host (idle high).
    tx : Out(1)
        The UART line to the host.
    tlp_out : Out(link_stream(link_dw))
        TLPs from the host.
    tlp_in : In(link_stream(link_dw))
        TLPs to the host.
    link_error : Out(1)
        A frame from the host arrived damaged within the last `led_hold` cycles.
    """

    def __init__(self, *, link_dw, max_words, divisor=DEFAULT_DIVISOR, retransmit=None,
                 led_hold=DEFAULT_LED_HOLD, small=False):
        try:
            self._divisor = check_divisor(divisor)
            if retransmit is None and isinstance(max_words, int):
                retransmit = frame_retransmit_cycles(max_words, divisor)
            check_bridge_parameters(link_dw=link_dw, max_words=max_words, retransmit_cycles=retransmit)
            if not isinstance(led_hold, int) or not 1 <= led_hold < 2**32:
                raise ValueError(f"led_hold must be a positive int below 2**32, not {led_hold!r}")
        except ValueError:
            self._MustUse__silence = True   # refused, so never elaborated
            raise
        self._link_dw = link_dw
        self._max_words = max_words
        self._retransmit = retransmit
        self._led_hold = led_hold
        self._small = small
        super().__init__({
            "rx":         In(1, init=1),
            "tx":         Out(1, init=1),
            "tlp_out":    Out(link_stream(link_dw)),
            "tlp_in":     In(link_stream(link_dw)),
            "link_error": Out(1),
        })

    @property
    def divisor(self):
        return self._divisor

    @property
    def retransmit(self):
        return self._retransmit

    def elaborate(self, platform):
        m = Module()
        m.submodules.uart_rx = uart_rx = UartRx(self._divisor)
        m.submodules.uart_tx = uart_tx = UartTx(self._divisor)
        m.submodules.bridge = bridge = SerialBridge(link_dw=self._link_dw, max_words=self._max_words,
                                                    retransmit_cycles=self._retransmit, small=self._small)
        m.d.comb += [uart_rx.rx.eq(self.rx), self.tx.eq(uart_tx.tx), bridge.rx_error.eq(uart_rx.error)]
        wiring.connect(m, uart_rx.data, bridge.rx_byte)
        wiring.connect(m, bridge.tx_byte, uart_tx.data)
        wiring.connect(m, bridge.tlp_out, wiring.flipped(self.tlp_out))
        wiring.connect(m, wiring.flipped(self.tlp_in), bridge.tlp_in)

        # An LFSR, not a binary counter: a second's worth of cycles is a
        # 25-bit carry chain, which set the iCEBreaker matrix part's clock.
        timer = LfsrTimer(self._led_hold)
        state = Signal(timer.width, init=timer.start)
        with m.If(bridge.bad_frame):
            m.d.sync += [self.link_error.eq(1), state.eq(timer.start)]
        with m.Elif(self.link_error):
            m.d.sync += state.eq(timer.step(state))
            with m.If(state == timer.last):
                m.d.sync += self.link_error.eq(0)
        return m


class SerialTop(wiring.Component):
    """A design on two UART pins behind `port` (a `SerialPort`), with LED
    pins: what `SerialChip` and `SerialMatrixPart` share.

    Members
    -------
    rx, tx : In(1), Out(1)
        The UART lines from and to the host, the port's.
    one for each of `leds` : Out(1)
        Driven by the design.
    link_error : Out(1)
        The port's: a frame from the host arrived damaged lately.
    """

    def __init__(self, config, port, leds):
        self._config = config
        self._port = port
        # The port is elaborated with this design; a design made and never
        # elaborated (port_map reads only its signature) is warned about, or
        # silenced, itself.
        port._MustUse__silence = True
        super().__init__({
            "rx":         In(1, init=1),
            "tx":         Out(1, init=1),
            **{name: Out(1) for name in leds},
            "link_error": Out(1),
        })

    @property
    def config(self):
        return self._config

    @property
    def divisor(self):
        return self._port.divisor

    def add_port(self, m):
        """Add the port to `m` as ``port``, on the UART pins and the
        link-error LED, and return it."""
        m.submodules.port = port = self._port
        m.d.comb += [port.rx.eq(self.rx), self.tx.eq(port.tx), self.link_error.eq(port.link_error)]
        return port
