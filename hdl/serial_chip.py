"""The whole chip on two UART pins: `HostInterface` behind a `SerialPort`."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..host_registers import Status
from .host_interface import HostInterface
from .serial_port import (DEFAULT_DIVISOR, DEFAULT_LED_HOLD, SERIAL_PCIE_ID, SerialPort,
                          frame_retransmit_cycles)


__all__ = ["SerialChip", "DEFAULT_DIVISOR", "max_tlp_words", "retransmit_cycles"]


def max_tlp_words(config):
    """Longest TLP either side of the bridge, in words: a 4-word header and
    a payload of ``max_payload``."""
    return 4 + config.max_payload // 4


def retransmit_cycles(config, divisor, host_latency_cycles=0):
    """Cycles the chip waits for an ACK before it sends a TLP frame again
    (`frame_retransmit_cycles` of its longest TLP)."""
    return frame_retransmit_cycles(max_tlp_words(config), divisor, host_latency_cycles)


class SerialChip(wiring.Component):
    """`HostInterface` of `config` behind a `SerialPort` (docs/serial_link.md).

    Parameters
    ----------
    config : TPUConfig
    divisor, retransmit, led_hold :
        As for `SerialPort` (``retransmit`` by default `retransmit_cycles`).

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

    def __init__(self, config, *, divisor=DEFAULT_DIVISOR, retransmit=None, led_hold=DEFAULT_LED_HOLD):
        self._config = config
        self._port = SerialPort(link_dw=config.link_dw, max_words=max_tlp_words(config), divisor=divisor,
                                retransmit=retransmit, led_hold=led_hold)
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
        return self._port.divisor

    def elaborate(self, platform):
        m = Module()
        m.submodules.host = host = HostInterface(self._config)
        m.submodules.port = port = self._port
        m.d.comb += [
            port.rx.eq(self.rx),
            self.tx.eq(port.tx),
            self.link_error.eq(port.link_error),
            host.pcie_id.eq(SERIAL_PCIE_ID),
        ]
        wiring.connect(m, port.tlp_out, host.rx)
        wiring.connect(m, host.tx, port.tlp_in)
        m.d.comb += [
            self.busy.eq((host.status & Status.BUSY) != 0),
            self.halted.eq((host.status & Status.HALTED) != 0),
            self.error.eq((host.status & Status.ERROR) != 0),
        ]
        return m
