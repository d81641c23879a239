"""The activation pipeline: accumulator rows in, unified-buffer rows out."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from .activation_settings import (Function, Pooling, InputRow, OutputRow, SettingsLayout,
                                  ChannelWrite, LutWrite, RECIPROCAL_SHIFT, VALUE_WIDTH)
from .pooling import PoolingUnit
from .requantizer import Requantizer


__all__ = ["ActivationPipeline"]


class ActivationPipeline(wiring.Component):
    """Bias, requantization, function and pooling of accumulator rows.

    Every column ``n`` of an input row goes through
    ``clamp(MultiplyByQuantizedMultiplier(acc + bias[n], multiplier[n],
    shift[n]) + zero_point)`` (TFLite's integer rounding), then the function
    (a clamp, or a 256-entry table for SIGMOID/TANH), then pooling; the result
    is one byte per column. ``sim/models/activation_model.py`` is the exact
    definition; ``docs/activation_pipeline.md`` describes it.

    One row is accepted per cycle whatever the settings. The computation
    never stalls: output rows go into a queue of `latency` + 1 rows in front
    of `o`, and a row is accepted only while the rows in flight and the rows
    queued leave room for it, so a stalled output stops the input (no
    ``ready`` path runs from `o` to `i`) and nothing is lost. An output row is
    presented `latency` cycles after the input row that produced it (the row
    itself, the row that completes a pooling window, or the last row of a
    globally pooled operation) when the queue was empty.

    Settings are written through three streams. A write waits (``ready``
    low) until no row is being computed (queued output rows do not matter),
    and while a write is offered no row is accepted, so every row sees
    exactly the settings written before it. Any write also starts a new
    operation, as does the row after a ``last`` row. The table memory is not
    cleared by reset.

    Members
    -------
    i : In(stream.Signature(InputRow(cols)))
        Accumulator rows: ``data`` (``cols`` x int32) and ``last``, set on the
        last row of an operation (it ends pooling windows and emits global
        pooling).
    o : Out(stream.Signature(OutputRow(cols)))
        Output rows, ``cols`` bytes (int8 or uint8 as set).
    set_settings : In(stream.Signature(SettingsLayout(max_width)))
        Operation settings: ``function``, ``unsigned``, ``zero_point``,
        ``clamp_min``, ``clamp_max``, ``pool``, ``pool_size``,
        ``pool_stride``, ``pool_width``, ``pool_count``, ``pool_reciprocal``.
    set_channel : In(stream.Signature(ChannelWrite(cols)))
        ``bias``, ``multiplier`` and ``shift`` of column ``col``.
    set_lut : In(stream.Signature(LutWrite()))
        Entry ``index`` of the function table.
    busy : Out(1)
        Rows are being computed or output rows are queued.

    Parameters
    ----------
    config : TPUConfig
        ``cols`` is the number of columns.
    max_width : int
        Widest image line (``pool_width``) window pooling supports; the line
        buffer holds ``max_width`` entries. Defaults to ``config.pool_max_width``.
    """

    #: Cycles from accepting a row to presenting the output it completes:
    #: requantization, table lookup, pooling, output queue.
    latency = Requantizer.latency + 1 + PoolingUnit.latency + 1

    #: Reset values of the operation settings: identity into int8, no pooling.
    SETTINGS_RESET = {
        "function": Function.NONE, "unsigned": 0, "single_round": 0, "zero_point": 0,
        "clamp_min": -(1 << (VALUE_WIDTH - 1)), "clamp_max": (1 << (VALUE_WIDTH - 1)) - 1,
        "pool": Pooling.NONE, "pool_size": 1, "pool_stride": 1, "pool_width": 1,
        "pool_count": 1, "pool_reciprocal": 1 << RECIPROCAL_SHIFT,
    }
    #: Reset values of every column: the identity requantization.
    CHANNEL_RESET = {"bias": 0, "multiplier": (1 << 31) - 1, "shift": 0}

    def __init__(self, config, *, max_width=None):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"ActivationPipeline needs a TPUConfig, not {config!r}")
        if max_width is None:
            max_width = config.pool_max_width
        if not isinstance(max_width, int) or isinstance(max_width, bool):
            raise TypeError(f"max_width must be an int, not {max_width!r}")
        if not 1 <= max_width <= 1 << 16:
            raise ValueError(f"max_width must be in 1..65536, not {max_width}")
        self._config = config
        self._max_width = max_width
        cols = config.cols
        super().__init__({
            "i":            In(stream.Signature(InputRow(cols))),
            "o":            Out(stream.Signature(OutputRow(cols))),
            "set_settings": In(stream.Signature(SettingsLayout(max_width))),
            "set_channel":  In(stream.Signature(ChannelWrite(cols))),
            "set_lut":      In(stream.Signature(LutWrite())),
            "busy":         Out(1),
        })

    @property
    def config(self):
        return self._config

    @property
    def max_width(self):
        return self._max_width

    def elaborate(self, platform):
        m = Module()
        cols = self._config.cols

        settings = Signal(SettingsLayout(self._max_width), init=self.SETTINGS_RESET)
        bias = [Signal(signed(32), name=f"bias{n}", init=self.CHANNEL_RESET["bias"])
                for n in range(cols)]
        multiplier = [Signal(signed(32), name=f"multiplier{n}",
                             init=self.CHANNEL_RESET["multiplier"]) for n in range(cols)]
        shift = [Signal(signed(6), name=f"shift{n}", init=self.CHANNEL_RESET["shift"])
                 for n in range(cols)]

        m.submodules.table = table = Memory(shape=unsigned(8), depth=256, init=[])
        table_wr = table.write_port()

        # Handshakes: a row is taken while the queue has room for every row
        # in flight and this one; writes wait for an empty computation and
        # hold off new rows.
        depth = self.latency + 1
        m.submodules.queue = queue = SyncFIFO(width=8 * cols, depth=depth)
        pending = Signal(range(self.latency))
        computing = Signal()
        writing = Signal()
        m.d.comb += [
            computing.eq(pending != 0),
            writing.eq(self.set_settings.valid | self.set_channel.valid | self.set_lut.valid),
            self.i.ready.eq((pending + queue.level < depth) & ~writing),
            self.set_settings.ready.eq(~computing),
            self.set_channel.ready.eq(~computing),
            self.set_lut.ready.eq(~computing),
            self.busy.eq(computing | queue.r_rdy),
            self.o.valid.eq(queue.r_rdy),
            self.o.payload.eq(queue.r_data),
            queue.r_en.eq(self.o.ready),
        ]

        with m.If(self.set_settings.valid & self.set_settings.ready):
            m.d.sync += settings.eq(self.set_settings.payload)
        with m.If(self.set_channel.valid & self.set_channel.ready):
            for n in range(cols):
                with m.If(self.set_channel.payload.col == n):
                    m.d.sync += [
                        bias[n].eq(self.set_channel.payload.bias),
                        multiplier[n].eq(self.set_channel.payload.multiplier),
                        shift[n].eq(self.set_channel.payload.shift),
                    ]
        m.d.comb += [
            table_wr.en.eq(self.set_lut.valid & self.set_lut.ready),
            table_wr.addr.eq(self.set_lut.payload.index),
            table_wr.data.eq(self.set_lut.payload.value),
        ]
        restart = Signal()
        m.d.comb += restart.eq(
            (self.set_settings.valid & self.set_settings.ready)
            | (self.set_channel.valid & self.set_channel.ready)
            | (self.set_lut.valid & self.set_lut.ready))

        # Clamp bounds of the function and the output type.
        type_low = Mux(settings.unsigned, 0, -128)
        type_high = Mux(settings.unsigned, 255, 127)
        low = Signal(signed(VALUE_WIDTH))
        high = Signal(signed(VALUE_WIDTH))
        with m.Switch(settings.function):
            with m.Case(Function.RELU):
                m.d.comb += [
                    low.eq(Mux(settings.zero_point > type_low, settings.zero_point, type_low)),
                    high.eq(type_high),
                ]
            with m.Case(Function.CLAMP):
                m.d.comb += [
                    low.eq(Mux(settings.clamp_min > type_low, settings.clamp_min, type_low)),
                    high.eq(Mux(settings.clamp_max < type_high, settings.clamp_max, type_high)),
                ]
            with m.Default():
                m.d.comb += [low.eq(type_low), high.eq(type_high)]
        use_table = (settings.function == Function.SIGMOID) | (settings.function == Function.TANH)

        # Stages 1-5: requantization, one lane per column. Stage 6: the table
        # lookup (a synchronous read of the clamped value) beside a register.
        accept = Signal()
        m.d.comb += accept.eq(self.i.valid & self.i.ready)
        valid = [Signal(name=f"valid{j}") for j in range(1, Requantizer.latency + 2)]
        last = [Signal(name=f"last{j}") for j in range(1, Requantizer.latency + 2)]
        m.d.sync += [valid[0].eq(accept), last[0].eq(self.i.payload.last)]
        m.d.sync += [valid[j].eq(valid[j - 1]) for j in range(1, len(valid))]
        m.d.sync += [last[j].eq(last[j - 1]) for j in range(1, len(last))]

        m.submodules.pooling = pooling = PoolingUnit(lanes=cols, max_width=self._max_width)
        function_out = []
        for n in range(cols):
            lane = Requantizer()
            m.submodules[f"requantizer{n}"] = lane
            m.d.comb += [
                lane.acc.eq(self.i.payload.data[n]),
                lane.bias.eq(bias[n]),
                lane.multiplier.eq(multiplier[n]),
                lane.shift.eq(shift[n]),
                lane.single_round.eq(settings.single_round),
                lane.zero_point.eq(settings.zero_point),
                lane.low.eq(low),
                lane.high.eq(high),
            ]
            table_rd = table.read_port()
            m.d.comb += table_rd.addr.eq(Mux(settings.unsigned, lane.value[:8],
                                             lane.value[:8] ^ 0x80))
            clamped = Signal(signed(VALUE_WIDTH), name=f"clamped{n}")
            m.d.sync += clamped.eq(lane.value)
            entry = Mux(settings.unsigned, table_rd.data, table_rd.data.as_signed())
            result = Signal(signed(VALUE_WIDTH), name=f"function{n}")
            m.d.comb += result.eq(Mux(use_table, entry, clamped))
            function_out.append(result)

        m.d.comb += [
            pooling.restart.eq(restart),
            pooling.settings.eq(settings),
            pooling.i_data.eq(Cat(*function_out)),
            pooling.i_valid.eq(valid[-1]),
            pooling.i_last.eq(last[-1]),
            queue.w_en.eq(pooling.o_valid),
            queue.w_data.eq(pooling.o_data),
        ]
        # Rows accepted and not yet through the pooling unit's last stage.
        m.d.comb += pending.eq(sum(valid) + pooling.pending)
        return m
