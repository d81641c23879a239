"""Test top: TLP receiver looped back into the TLP transmitter."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...hdl.tlp import TlpBeat, link_stream
from ...hdl.tlp_rx import RxError, TlpReceiver
from ...hdl.tlp_tx import TlpTransmitter


__all__ = ["TlpLoopbackTop"]


class TlpLoopbackTop(wiring.Component):
    """`TlpReceiver` -> `TlpTransmitter`, with the parsed stream between them
    copied out for the testbench to watch, and a switch that keeps it from
    the transmitter, to measure the receiver with its output never stalled.

    Members
    -------
    i : In(link_stream(link_dw))
        Into the receiver.
    o : Out(link_stream(link_dw))
        Out of the transmitter.
    mon_valid, mon_ready, mon_payload : Out
        The parsed stream's handshake and beat.
    malformed, malformed_reason : Out
        The receiver's drop report.
    rx_only : In(1)
        Take every parsed beat at once and give the transmitter none.
    """

    def __init__(self, link_dw, *, max_payload=4096):
        self._link_dw = link_dw
        self._max_payload = max_payload
        super().__init__({
            "i":                In(link_stream(link_dw)),
            "o":                Out(link_stream(link_dw)),
            "mon_valid":        Out(1),
            "mon_ready":        Out(1),
            "mon_payload":      Out(TlpBeat(link_dw)),
            "malformed":        Out(1),
            "malformed_reason": Out(RxError),
            "rx_only":          In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = TlpReceiver(self._link_dw, max_payload=self._max_payload)
        m.submodules.tx = tx = TlpTransmitter(self._link_dw)
        wiring.connect(m, wiring.flipped(self.i), rx.link)
        m.d.comb += [
            tx.tlp.payload.eq(rx.tlp.payload),
            tx.tlp.valid.eq(rx.tlp.valid & ~self.rx_only),
            rx.tlp.ready.eq(tx.tlp.ready | self.rx_only),
        ]
        wiring.connect(m, tx.link, wiring.flipped(self.o))
        m.d.comb += [
            self.mon_valid.eq(rx.tlp.valid),
            self.mon_ready.eq(rx.tlp.ready),
            self.mon_payload.eq(rx.tlp.payload),
            self.malformed.eq(rx.malformed),
            self.malformed_reason.eq(rx.malformed_reason),
        ]
        return m
