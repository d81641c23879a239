"""The matrix engine: systolic array, weight loading and accumulators."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from .accumulators import Accumulators, AccReadSignature, AccWriteSignature
from .device_family import is_ecp5
from .systolic_array import SystolicArray


__all__ = ["MatrixEngine", "ActivationRow"]


def ActivationRow(config):
    """Layout of one activation row with the operation flags it carries."""
    return data.StructLayout({
        "data":       data.ArrayLayout(unsigned(8), config.rows),
        "acc_addr":   range(config.acc_rows),
        "accumulate": 1,
        "unsigned":   1,
        "switch":     1,
    })


class MatrixEngine(wiring.Component):
    """Rows in, accumulator rows updated: ``acc[acc_addr] (+)= data @ W``.

    Weight tiles stream in one tile row per beat (row 0 first, ``rows`` beats
    per tile) and queue behind the tile in use: one tile in the transit
    chain and one in the shadow registers. An activation row flagged
    ``switch`` makes the next queued tile current, starting with that row; it
    waits (``act.ready`` low) until that tile has fully arrived. Rows that do
    not switch never wait.

    Timing, all exact: a row accepted in cycle ``t`` updates its accumulator
    row in cycle ``t + latency``; rows are accepted one per cycle; a tile
    streamed at one row per cycle is usable ``rows + 1`` cycles after its
    first row; and consecutive tiles can be switched ``rows`` cycles apart,
    so operations of at least ``rows`` rows each run back to back with no
    idle cycle, each using a new tile.

    Members
    -------
    act : In(stream.Signature(ActivationRow(config)))
        Activation rows. ``accumulate`` adds to the accumulator row (else
        overwrites it), ``unsigned`` reads ``data`` as uint8 (else int8),
        ``switch`` starts using the next weight tile.
    weights : In(stream.Signature(ArrayLayout(signed(8), cols)))
        Weight-tile rows.
    written : Out(AccWriteSignature)
        Each accumulator update as it is stored.
    acc_read : In(AccReadSignature)
        Read port of the accumulator memory.
    busy : Out(1)
        Rows are still in flight.
    """

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"MatrixEngine needs a TPUConfig, not {config!r}")
        self._config = config
        acc = dict(acc_rows=config.acc_rows, cols=config.cols)
        super().__init__({
            "act":      In(stream.Signature(ActivationRow(config))),
            "weights":  In(stream.Signature(data.ArrayLayout(signed(8), config.cols))),
            "written":  Out(AccWriteSignature(**acc)),
            "acc_read": In(AccReadSignature(**acc)),
            "busy":     Out(1),
        })

    @property
    def config(self):
        return self._config

    @property
    def latency(self):
        """Cycles from accepting a row to storing its accumulator row
        (`TPUConfig.matrix_latency`)."""
        return self._config.matrix_latency

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        rows = cfg.rows

        tag = data.StructLayout({"acc_addr": range(cfg.acc_rows), "accumulate": 1})
        dsp_sites = None
        if cfg.dsp_bands and is_ecp5(platform):
            # Imported here: the floorplan belongs to the FPGA flow, which
            # imports this package.
            from ..fpga.ecp5_floorplan import band_sites
            dsp_sites = band_sites(rows, cfg.cols)
        m.submodules.array = array = SystolicArray(rows=rows, cols=cfg.cols, tag_width=tag.size,
                                                   multiplier_latency=cfg.pe_multiplier_latency,
                                                   dsp_multipliers=cfg.dsp_multipliers or None,
                                                   dsp_sites=dsp_sites)
        # The accumulators' read-modify-write takes the one cycle more.
        assert array.latency + 1 == self.latency
        m.submodules.accumulators = accs = Accumulators(acc_rows=cfg.acc_rows, cols=cfg.cols,
                                                       shared_read=bool(cfg.serial_issue))

        # Weight queue state: beats in the transit chain, a tile in shadow, and
        # the cycles until the last switch's wavefront has left the shadow
        # registers of the bottom row (they may not be overwritten before).
        transit_count = Signal(range(rows + 1))
        shadow_full = Signal()
        guard = Signal(range(rows))

        act_fire = Signal()
        switch_fire = Signal()
        capture = Signal()
        shift = Signal()

        payload = self.act.payload
        m.d.comb += [
            self.act.ready.eq(~payload.switch | shadow_full),
            act_fire.eq(self.act.valid & self.act.ready),
            switch_fire.eq(act_fire & payload.switch),
        ]

        # The next state, from which capture and the weights' ready are
        # registered a cycle early (below).
        transit_next = Signal.like(transit_count)
        shadow_next = Signal()
        guard_next = Signal.like(guard)
        m.d.comb += [
            transit_next.eq(Mux(capture, shift, transit_count + shift)),
            shadow_next.eq(Mux(capture, 1, shadow_full & ~switch_fire)),
            guard_next.eq(Mux(switch_fire, max(rows - 2, 0), guard - (guard != 0))),
        ]
        m.d.sync += [
            transit_count.eq(transit_next),
            shadow_full.eq(shadow_next),
            guard.eq(guard_next),
        ]

        ready = Signal()
        if rows == 1:
            # A one-row wavefront leaves the shadow in the cycle it switches,
            # so a capture depends on this cycle's switch.
            m.d.comb += capture.eq((transit_count == rows) & (~shadow_full | switch_fire))
            m.d.comb += ready.eq((transit_count != rows) | capture)
        else:
            # Capture and ready are functions of the state registers alone:
            # registered from the next state, the weight FIFO's read enable
            # (a clock enable on every bit of its output, across the die)
            # comes from a flip-flop, not from the comparisons behind it.
            capture_next = Signal()
            m.d.comb += capture_next.eq((transit_next == rows) & ~shadow_next & (guard_next == 0))
            ready_reg = Signal(init=1)
            m.d.sync += [
                capture.eq(capture_next),
                ready_reg.eq((transit_next != rows) | capture_next),
            ]
            m.d.comb += ready.eq(ready_reg)

        m.d.comb += [
            self.weights.ready.eq(ready),
            shift.eq(self.weights.valid & ready),
        ]

        row_tag = Signal(tag)
        m.d.comb += [
            row_tag.acc_addr.eq(payload.acc_addr),
            row_tag.accumulate.eq(payload.accumulate),
            array.act_valid.eq(act_fire),
            array.act_data.eq(payload.data),
            array.act_unsigned.eq(payload.unsigned),
            array.act_switch.eq(switch_fire),
            array.act_tag.eq(row_tag),
            array.w_shift.eq(shift),
            array.w_data.eq(self.weights.payload),
            array.w_capture.eq(capture),
        ]

        out_tag = Signal(tag)
        m.d.comb += [
            out_tag.eq(array.out_tag),
            accs.update.valid.eq(array.out_valid),
            accs.update.addr.eq(out_tag.acc_addr),
            accs.update.accumulate.eq(out_tag.accumulate),
            accs.update.data.eq(array.out_data),
        ]
        wiring.connect(m, wiring.flipped(self.written), accs.written)
        wiring.connect(m, wiring.flipped(self.acc_read), accs.read)

        # Rows in flight: accepted and not yet stored.
        in_flight = Signal(range(self.latency + 1))
        m.d.sync += in_flight.eq(in_flight + act_fire - accs.written.valid)
        m.d.comb += self.busy.eq(in_flight != 0)
        return m
