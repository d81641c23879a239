"""The whole chip on two UART pins: `HostInterface` behind a `SerialPort`."""

from amaranth import *
from amaranth.lib import wiring

from ..host_registers import Status
from .host_interface import HostInterface
from .serial_port import (DEFAULT_DIVISOR, DEFAULT_LED_HOLD, SERIAL_PCIE_ID, SerialPort, SerialTop,
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


class SerialChip(SerialTop):
    """`HostInterface` of `config` behind a `SerialPort` (docs/serial_link.md).

    Parameters
    ----------
    config : TPUConfig
    divisor, retransmit, led_hold :
        As for `SerialPort` (``retransmit`` by default `retransmit_cycles`).

    Members
    -------
    rx, tx, link_error : as for `SerialTop`
    busy, halted, error : Out(1)
        STATUS.BUSY, STATUS.HALTED and STATUS.ERROR, for LEDs.
    """

    def __init__(self, config, *, divisor=DEFAULT_DIVISOR, retransmit=None, led_hold=DEFAULT_LED_HOLD):
        port = SerialPort(link_dw=config.link_dw, max_words=max_tlp_words(config), divisor=divisor,
                          retransmit=retransmit, led_hold=led_hold, small=bool(config.narrow_host))
        super().__init__(config, port, leds=["busy", "halted", "error"])

    def elaborate(self, platform):
        m = Module()
        m.submodules.host = host = HostInterface(self.config)
        port = self.add_port(m)
        wiring.connect(m, port.tlp_out, host.rx)
        wiring.connect(m, host.tx, port.tlp_in)
        m.d.comb += [
            host.pcie_id.eq(SERIAL_PCIE_ID),
            self.busy.eq((host.status & Status.BUSY) != 0),
            self.halted.eq((host.status & Status.HALTED) != 0),
            self.error.eq((host.status & Status.ERROR) != 0),
        ]
        return m
