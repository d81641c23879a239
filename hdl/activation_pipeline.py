"""The activation pipeline: accumulator rows in, unified-buffer rows out."""

from amaranth import *
from amaranth.utils import exact_log2
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from .activation_settings import (Function, Pooling, InputRow, OutputRow, SettingsLayout,
                                  ChannelWrite, LutWrite, RECIPROCAL_SHIFT, SHIFT_WIDTH, VALUE_WIDTH)
from .pooling import PoolingUnit
from .requantizer import Requantizer


__all__ = ["ActivationPipeline"]


class _BlockQueue(Elaboratable):
    """The output queue of the small form: `SyncFIFO`'s ports and timing
    (a row written is readable in the next cycle) on a block RAM, for the
    flip-flops of its entries and their read multiplexer. The RAM reads
    synchronously, so it reads the entry at the head after this cycle's
    read, transparent to this cycle's write (the head written into an
    empty queue). It is never written full: the pipeline takes a row only
    while the rows in flight and queued leave room for it (``w_rdy`` and
    ``level`` are not kept)."""

    def __init__(self, *, width, depth):
        self.width = width
        self.depth = 1 << (depth - 1).bit_length()
        self.w_en = Signal()
        self.w_data = Signal(width)
        self.r_en = Signal()
        self.r_rdy = Signal()
        self.r_data = Signal(width)

    def elaborate(self, platform):
        m = Module()
        bits = exact_log2(self.depth)
        m.submodules.ram = ram = Memory(shape=unsigned(self.width), depth=self.depth, init=[])
        write = ram.write_port()
        read = ram.read_port(transparent_for=(write,))
        # One bit more than the address: equal pointers are an empty queue.
        w_ptr = Signal(bits + 1)
        r_ptr = Signal(bits + 1)
        r_next = Signal(bits + 1)
        m.d.comb += [
            self.r_rdy.eq(w_ptr != r_ptr),
            r_next.eq(r_ptr + (self.r_en & self.r_rdy)),
            write.en.eq(self.w_en),
            write.addr.eq(w_ptr[:bits]),
            write.data.eq(self.w_data),
            read.addr.eq(r_next[:bits]),
            self.r_data.eq(read.data),
        ]
        m.d.sync += r_ptr.eq(r_next)
        with m.If(self.w_en):
            m.d.sync += w_ptr.eq(w_ptr + 1)
        return m


class ActivationPipeline(wiring.Component):
    """Bias, requantization, function and pooling of accumulator rows.

    Every column ``n`` of an input row goes through
    ``clamp(MultiplyByQuantizedMultiplier(acc + bias[n], multiplier[n],
    shift[n]) + zero_point)`` (TFLite's integer rounding), then the function
    (a clamp, or a 256-entry table for SIGMOID/TANH), then pooling; the result
    is one byte per column. ``tpu/models/activation_model.py`` is the exact
    definition; ``docs/activation_pipeline.md`` describes it.

    One row is accepted every `row_cycles` cycles whatever the settings: one
    per cycle with a requantizer per column; with ``config.requantizers = k``
    the ``k`` requantizers take the columns ``k`` at a time, one group a
    cycle, or one group every 4 (16) cycles with
    ``config.requantizer_multiplier_width`` 16 (8); the results are the same. The computation never stalls:
    output rows go into a queue in front of `o`, and a row is accepted only
    while the rows in flight and the rows queued leave room for it, so a
    stalled output stops the input (no ``ready`` path runs from `o` to `i`)
    and nothing is lost. An output row is presented `latency` cycles after
    the input row that produced it (the row itself, the row that completes a
    pooling window, or the last row of a globally pooled operation) when the
    queue was empty.

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
    set_settings : In(stream.Signature(SettingsLayout(max_width, config.mlas_rounding)))
        Operation settings: ``function``, ``unsigned``, ``single_round``,
        ``mlas_round`` (with `TPUConfig.mlas_rounding`), ``zero_point``,
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

    #: Cycles from accepting a row to presenting the output it completes,
    #: at a row per cycle: requantization, table lookup, pooling, output
    #: queue. A slower pipeline (shared requantizers, a multi-cycle product)
    #: adds `row_cycles` - 1.
    BASE_LATENCY = Requantizer.BASE_LATENCY + 1 + PoolingUnit.BASE_LATENCY + 1

    #: Reset values of the operation settings: identity into int8, no pooling.
    SETTINGS_RESET = {
        "function": Function.NONE, "unsigned": 0, "single_round": 0, "mlas_round": 0,
        "zero_point": 0,
        "clamp_min": -(1 << (VALUE_WIDTH - 1)), "clamp_max": (1 << (VALUE_WIDTH - 1)) - 1,
        "pool": Pooling.NONE, "pool_size": 1, "pool_stride": 1, "pool_width": 1,
        "pool_count": 1, "pool_reciprocal": 1 << RECIPROCAL_SHIFT,
    }
    #: Read ports (lanes) of one copy of the function table; more lanes get
    #: more copies.
    TABLE_READ_PORTS = 4

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
            "set_settings": In(stream.Signature(SettingsLayout(max_width, config.mlas_rounding))),
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

    @staticmethod
    def pooling_input_register(config):
        """Whether the function's output is registered again on its way into
        the pooling unit (all but the small form, ``serial_act``). The
        function's register sits beside the requantizers' multipliers and
        the pooling unit beside its line buffer; on the ECP5 the wire between
        them took 8.88 ns of the twenty-sixth ulx3s16 build's 18.80 ns
        critical path, in the same cycle as the pooling unit's reduction.
        A second register lets the placer cut that wire."""
        return not config.serial_act

    @staticmethod
    def extra_latency(config):
        """Cycles `config`'s pipeline adds to `BASE_LATENCY`: its pooling
        unit's average, 2 for its multiply in three registered stages, 3 with
        ``serial_act`` (over 4 cycles on one small multiplier), and 1 for the
        pooling unit's input register (`pooling_input_register`)."""
        return (PoolingUnit.latency_of(bool(config.serial_act)) - PoolingUnit.BASE_LATENCY
                + ActivationPipeline.pooling_input_register(config))

    @staticmethod
    def latency_of(config):
        """`latency` of the pipeline of `config`."""
        return (ActivationPipeline.BASE_LATENCY + config.act_row_cycles - 1
                + ActivationPipeline.extra_latency(config))

    @staticmethod
    def head_bits(config):
        """Bits of an input row (its first columns) that a shared lane with
        a multi-cycle product puts through its bias add and left shift in
        the cycle the row is taken (the row's first group): 0 for the other
        forms. The activation unit's reader presents them from flip-flops
        (`MemoryReader`'s ``head_bits``), so that no read multiplexer
        comes before that add and shift."""
        if config.requantize_steps > 1 and config.requantize_multiply_cycles > 1 and not config.serial_act:
            return 32 * config.requantizer_lanes
        return 0

    @property
    def latency(self):
        """Cycles from accepting a row to presenting the output it completes."""
        return self.latency_of(self._config)

    @property
    def row_cycles(self):
        """Cycles between accepted rows, at full speed."""
        return self._config.act_row_cycles

    def elaborate(self, platform):
        m = Module()
        cols = self._config.cols
        lanes = self._config.requantizer_lanes
        steps = self._config.requantize_steps
        cycles = self._config.requantize_multiply_cycles      # a power of two
        row_cycles = steps * cycles

        mlas = bool(self._config.mlas_rounding)
        settings = Signal(SettingsLayout(self._max_width, mlas),
                          init={k: v for k, v in self.SETTINGS_RESET.items()
                                if mlas or k != "mlas_round"})
        bias = [Signal(signed(32), name=f"bias{n}", init=self.CHANNEL_RESET["bias"])
                for n in range(cols)]
        multiplier = [Signal(signed(32), name=f"multiplier{n}",
                             init=self.CHANNEL_RESET["multiplier"]) for n in range(cols)]
        shift = [Signal(signed(6), name=f"shift{n}", init=self.CHANNEL_RESET["shift"])
                 for n in range(cols)]

        # One copy of the table for every TABLE_READ_PORTS lanes, all written
        # alike: Yosys's memory_libmap takes time and memory exponential in
        # a memory's read ports (on the ECP5, 8 ports 4 s, 10 ports 38 s, 12
        # more than the 4 GiB of its WebAssembly build), and it gives every
        # read port a block RAM of its own anyway, so the copies cost nothing.
        tables = []
        for k in range(-(-lanes // self.TABLE_READ_PORTS)):
            tables.append(Memory(shape=unsigned(8), depth=256, init=[]))
            m.submodules[f"table{k}" if k else "table"] = tables[-1]

        # Handshakes: a row is taken while the queue has room for every row
        # in flight and this one, and the requantizers have taken every group
        # of the row before; writes wait for an empty computation and hold
        # off new rows.
        base = self.BASE_LATENCY + self.extra_latency(self._config)
        depth = base + 1
        if self._config.serial_act:
            # A row every `row_cycles`: no more than this many are ever in
            # flight or queued while `o` keeps up, so the queue is sized to
            # that, not to a row a cycle.
            depth = (self.latency + 1) // row_cycles + 3
        if self._config.serial_act:
            m.submodules.queue = queue = _BlockQueue(width=8 * cols, depth=depth)
        else:
            m.submodules.queue = queue = SyncFIFO(width=8 * cols, depth=depth)
        pending = Signal(range(base + 2))
        # Cycle of the row in the requantizers: group `count // cycles`
        # enters them when `count % cycles` is 0; 0 also takes a new row.
        count = Signal(range(row_cycles))
        step = Signal(range(steps))
        m.d.comb += step.eq(count >> exact_log2(cycles))
        # `held` counts the rows in flight and queued (``pending +
        # queue.level``) in a register, so that `room`, whether one more
        # fits, is a register too and no adder lies on the way to `ready`.
        held_rows = Signal(range(depth + 1))
        room = Signal(init=1)
        computing = Signal()
        writing = Signal()
        m.d.comb += [
            computing.eq(pending != 0),
            writing.eq(self.set_settings.valid | self.set_channel.valid | self.set_lut.valid),
            self.i.ready.eq(room & ~writing & (count == 0)),
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
        # With shared lanes whose settings are chosen ahead (a multi-cycle
        # product, not the small form) a column write lands a cycle late,
        # from registers: `channel_written` the written column one-hot, the
        # values beside it. The write's handshake (`ready` follows the rows
        # in flight) then reaches one flip-flop per column, not the 70 enables
        # of a column's registers across the die, and each column's enable
        # comes from a flip-flop. The registers chosen ahead take the value
        # as it is offered and while it lands (see `chosen`); a column of a
        # later group is read no sooner than 4 cycles after a row is taken.
        staged = steps > 1 and cycles > 1 and not self._config.serial_act
        channel_write = self.set_channel.valid & self.set_channel.ready
        if staged:
            channel_written = Signal(cols, name="channel_written")
            written_bias = Signal(signed(32), name="written_bias")
            written_multiplier = Signal(signed(32), name="written_multiplier")
            written_shift = Signal(signed(6), name="written_shift")
            m.d.sync += [
                channel_written.eq(Cat(channel_write & (self.set_channel.payload.col == n)
                                       for n in range(cols))),
                written_bias.eq(self.set_channel.payload.bias),
                written_multiplier.eq(self.set_channel.payload.multiplier),
                written_shift.eq(self.set_channel.payload.shift),
            ]
            for n in range(cols):
                with m.If(channel_written[n]):
                    m.d.sync += [bias[n].eq(written_bias), multiplier[n].eq(written_multiplier),
                                 shift[n].eq(written_shift)]
        else:
            channel_written = written_bias = written_multiplier = written_shift = None
            with m.If(channel_write):
                for n in range(cols):
                    with m.If(self.set_channel.payload.col == n):
                        m.d.sync += [
                            bias[n].eq(self.set_channel.payload.bias),
                            multiplier[n].eq(self.set_channel.payload.multiplier),
                            shift[n].eq(self.set_channel.payload.shift),
                        ]
        for table in tables:
            table_wr = table.write_port()
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

        # Clamp bounds of the function and the output type, registered a
        # cycle after the settings (a row reaches the clamp four cycles or
        # more after it is taken, and no row is taken while settings are
        # written), so no row's clamp decodes the function.
        type_low = Mux(settings.unsigned, 0, -128)
        type_high = Mux(settings.unsigned, 255, 127)
        low = Signal(signed(VALUE_WIDTH), init=-128)
        high = Signal(signed(VALUE_WIDTH), init=127)
        with m.Switch(settings.function):
            with m.Case(Function.RELU):
                m.d.sync += [
                    low.eq(Mux(settings.zero_point > type_low, settings.zero_point, type_low)),
                    high.eq(type_high),
                ]
            with m.Case(Function.CLAMP):
                m.d.sync += [
                    low.eq(Mux(settings.clamp_min > type_low, settings.clamp_min, type_low)),
                    high.eq(Mux(settings.clamp_max < type_high, settings.clamp_max, type_high)),
                ]
            with m.Default():
                m.d.sync += [low.eq(type_low), high.eq(type_high)]
        use_table = Signal()
        m.d.sync += use_table.eq((settings.function == Function.SIGMOID)
                                 | (settings.function == Function.TANH))

        # Stages 1-5 (more with a multi-cycle product): requantization,
        # `lanes` columns at a time: the first group of a row in the cycle it
        # is accepted, the others from `held` every `cycles` cycles after.
        # Then the function: the table's entry (a synchronous read of the
        # clamp's result) or the clamped value, into a register.
        accept = Signal()
        start = Signal()                     # a group enters the requantizers
        m.d.comb += [
            accept.eq(self.i.valid & self.i.ready),
            start.eq(accept | ((count != 0) & (count[:exact_log2(cycles)] == 0))),
        ]
        # With shared lanes and a multi-cycle product the requantizer is
        # started at every cycle a group may enter (`slot`: ``count % cycles``
        # 0, every cycle while idle), from `count`'s flip-flops through one
        # LUT, rather than by `start`, whose `accept` runs through the
        # handshake (the twentieth ulx3s16 build's critical path ran from
        # the activation unit's state through `room` and `accept` into the
        # requantizer's step counter reset, across the die). A start that
        # no group takes loads values no valid row reads: a group entering
        # is followed by the next slot `cycles` cycles later, as its product
        # ends, and the product's first piece does not depend on what came
        # before it.
        slot = None
        if staged:
            slot = Signal(name="slot")
            m.d.comb += slot.eq(count[:exact_log2(cycles)] == 0)
        held = Signal.like(self.i.payload.data)
        held_last = Signal()
        if row_cycles > 1:
            with m.If(accept):
                m.d.sync += [held.eq(self.i.payload.data), held_last.eq(self.i.payload.last),
                             count.eq(1)]
            with m.Elif(count != 0):
                m.d.sync += count.eq(Mux(count == row_cycles - 1, 0, count + 1))
        into_pooling = self.pooling_input_register(self._config)
        stages = Requantizer.BASE_LATENCY - 1 + cycles + 1 + into_pooling
        valid = [Signal(name=f"valid{j}") for j in range(1, stages + 1)]
        last = [Signal(name=f"last{j}") for j in range(1, stages + 1)]
        final = [Signal(name=f"final{j}") for j in range(1, stages + 1)]    # a row's last group
        group = [Signal(range(steps), name=f"group{j}") for j in range(1, stages + 1)]
        m.d.sync += [
            valid[0].eq(start),
            last[0].eq(Mux(step == 0, self.i.payload.last, held_last)),
            final[0].eq(step == steps - 1),
            group[0].eq(step),
        ]
        for chain in (valid, last, final, group):
            m.d.sync += [chain[j].eq(chain[j - 1]) for j in range(1, stages)]

        def per_group(values):
            """The value of the group entering the requantizers."""
            return values[0] if steps == 1 else Array(values)[step]

        # With shared lanes the column settings (and, with a multi-cycle
        # product, the held accumulator values) of the group entering the
        # requantizers next are chosen a cycle ahead into registers, so that
        # `count` reaches only those registers' selects and a requantizer's
        # operands come from flip-flops. `ahead` is the group of the next
        # cycle: with a multi-cycle product ``(count + 1) // cycles``, which
        # is group 0 while idle whether or not a row is taken; with a
        # product a cycle, ``count + 1``, group 0 being read directly in
        # the cycle a row is taken (``count == 0``).
        ahead = Signal(range(steps), name="ahead")
        ahead_first = Signal(name="ahead_first")        # the next group is group 0
        if steps > 1:
            if staged:
                # A register, set from `count`'s next value (`following`),
                # so that the selects chosen ahead come from flip-flops, not
                # from `count`'s compare and increment (the nineteenth
                # ulx3s16 build's critical path ran through them into the
                # bias select). A row taken moves `count` from 0 to 1, and
                # the group after 1 is group 0, as after 0 (a product takes
                # 4 cycles or more), so the next value does not depend on
                # whether a row is taken: `following` is `count`'s next
                # value when none is.
                assert cycles > 2
                following = Mux((count == 0) | (count == row_cycles - 1), 0, count + 1)
                m.d.sync += ahead.eq(Mux(following == row_cycles - 1, 0, following + 1)
                                     >> exact_log2(cycles))
            elif cycles > 1:
                m.d.comb += ahead.eq(Mux(count == row_cycles - 1, 0, count + 1) >> exact_log2(cycles))
            else:
                m.d.comb += ahead.eq(Mux(count == row_cycles - 1, 0, count + 1))
            m.d.sync += ahead_first.eq(ahead == 0)
        # The small form reads the entering group's settings and held values
        # directly, by `step`: its requantizer registers its operands as the
        # group enters anyway, so the registers chosen ahead would only
        # repeat them (70 flip-flops and their multiplexers a lane).
        serial = bool(self._config.serial_act)

        # A column write offered while no group is entering (``count`` 0,
        # group 0 ahead) goes into the registers chosen ahead, as a row may
        # be taken in the cycle after it is taken, and then from where it
        # lands. The offer is not qualified by ``ready``, so that what the
        # rows in flight decide does not reach these registers: an offer
        # not taken holds ``valid`` (the stream's rule), so no row is taken
        # in the next cycle, and a group takes these registers only as it
        # enters.
        def offered(column):
            return self.set_channel.valid & (self.set_channel.payload.col == column) & (count == 0)

        def chosen(values, name, written):
            """`values` (one per group) of the group entering the requantizers,
            from a register chosen a cycle ahead. A channel write (while idle,
            when the register holds group 0's value) goes into the register
            too, as a row may be taken in the next cycle."""
            if steps == 1 or serial:
                return per_group(values)
            register = Signal.like(values[0], name=name)
            m.d.sync += register.eq(Array(values)[ahead])
            if cycles > 1:
                column, payload, landing = written
                with m.If(offered(column)):
                    m.d.sync += register.eq(payload)
                with m.Elif(channel_written[column]):
                    m.d.sync += register.eq(landing)
                return register
            # A product a cycle: group 0 is read directly as the row is taken.
            return Mux(count == 0, values[0], register)

        # With a multi-cycle product on shared lanes the left shift's amount
        # (``max(shift, 0)``, 0 with single rounding) is chosen ahead too,
        # decoded, so that a row's first group, which enters the requantizer
        # as the row is taken, goes from the reader's queue through the bias
        # add and the shift alone. A settings write (while idle) changes
        # single rounding for a row that may be taken in the next cycle, so
        # the register follows the setting as written.
        decoded_left = steps > 1 and cycles > 1 and not serial
        settings_write = self.set_settings.valid & self.set_settings.ready
        if staged:
            # As offered, while no group enters (see `offered`).
            settings_write = self.set_settings.valid & (count == 0)
        next_single_round = Mux(settings_write, self.set_settings.payload.single_round,
                                settings.single_round)

        def left_of(shift_value):
            return Mux(shift_value > 0, shift_value, 0)[:SHIFT_WIDTH - 1]

        def chosen_left(columns, name):
            register = Signal(SHIFT_WIDTH - 1, name=name)
            m.d.sync += register.eq(Mux(next_single_round, 0,
                                        Array([left_of(shift[c]) for c in columns])[ahead]))
            with m.If(offered(columns[0])):
                m.d.sync += register.eq(Mux(next_single_round, 0,
                                            left_of(self.set_channel.payload.shift)))
            with m.Elif(channel_written[columns[0]]):
                m.d.sync += register.eq(Mux(next_single_round, 0, left_of(written_shift)))
            return register

        # The table is read a cycle early, at the requantizer's clamp result
        # before its register (`next_value`), and the function's output, the
        # table's entry or the clamped value, is chosen into a register: in
        # the same cycle as a read at `value` would present it, but neither
        # the block RAM's clock-to-output (the seventeenth ulx3s16 build's
        # critical path) nor the function select (the twenty-fourth's: 1.46
        # ns of `use_table`'s fan-out and 7.44 ns of wire from the lanes to
        # the pooling unit, 18.76 ns in all) lies before the pooling unit's
        # reduction in the same cycle.

        # The pooling unit shares the requantizers' lanes, group by group.
        m.submodules.pooling = pooling = PoolingUnit(lanes=lanes, max_width=self._max_width,
                                                     groups=steps, sequential_average=serial,
                                                     mlas_rounding=mlas)
        lane_out = []
        for n in range(lanes):
            # Column of lane `n` in each group; a short last group repeats group 0's.
            columns = [g * lanes + n if g * lanes + n < cols else n for g in range(steps)]
            lane = Requantizer(per_value_settings=steps > 1,
                               multiplier_width=self._config.requantizer_multiplier_width,
                               compact=serial, left_input=decoded_left, next_output=True,
                               mlas_rounding=mlas)
            m.submodules[f"requantizer{n}"] = lane
            if decoded_left:
                m.d.comb += lane.left.eq(chosen_left(columns, f"lane_left{n}"))
            if staged:
                m.d.comb += lane.start.eq(slot)
            elif cycles > 1:
                m.d.comb += lane.start.eq(start)
            payload = self.set_channel.payload
            if steps > 1 and cycles > 1 and not serial:
                # Group 0's value comes in as the row is taken; the others'
                # from `held`, chosen a cycle ahead (`held` is loaded as the
                # row is taken, `cycles` cycles before group 1 enters).
                held_value = Signal(signed(32), name=f"held_value{n}")
                m.d.sync += held_value.eq(Array([held[c] for c in columns])[ahead])
                lane_acc = Mux(ahead_first, self.i.payload.data[n], held_value)
            else:
                lane_acc = per_group([self.i.payload.data[n]] + [held[c] for c in columns[1:]])
            m.d.comb += [
                lane.acc.eq(lane_acc),
                lane.bias.eq(chosen([bias[c] for c in columns], f"lane_bias{n}",
                                    (columns[0], payload.bias, written_bias))),
                lane.multiplier.eq(chosen([multiplier[c] for c in columns], f"lane_multiplier{n}",
                                          (columns[0], payload.multiplier, written_multiplier))),
                lane.shift.eq(chosen([shift[c] for c in columns], f"lane_shift{n}",
                                     (columns[0], payload.shift, written_shift))),
                lane.single_round.eq(settings.single_round),
                lane.zero_point.eq(settings.zero_point),
                lane.low.eq(low),
                lane.high.eq(high),
            ]
            if mlas:
                m.d.comb += lane.mlas_round.eq(settings.mlas_round)
            table_rd = tables[n // self.TABLE_READ_PORTS].read_port()
            m.d.comb += table_rd.addr.eq(Mux(settings.unsigned, lane.next_value[:8],
                                             lane.next_value[:8] ^ 0x80))
            entry = Mux(settings.unsigned, table_rd.data, table_rd.data.as_signed())
            result = Signal(signed(VALUE_WIDTH), name=f"function{n}")
            m.d.sync += result.eq(Mux(use_table, entry, lane.value))
            if into_pooling:
                pooled = Signal(signed(VALUE_WIDTH), name=f"pooling_in{n}")
                m.d.sync += pooled.eq(result)
                result = pooled
            lane_out.append(result)

        m.d.comb += [
            pooling.restart.eq(restart),
            pooling.settings.eq(settings),
            pooling.i_data.eq(Cat(*lane_out)),
            pooling.i_valid.eq(valid[-1]),
            pooling.i_group.eq(group[-1]),
            pooling.i_last.eq(last[-1]),
        ]
        # The output groups before the last wait in `collected` for the last one.
        early = (steps - 1) * lanes
        collected = Signal(8 * early)
        for g in range(steps - 1):
            with m.If(pooling.o_valid & (pooling.o_group == g)):
                m.d.sync += collected[8 * g * lanes:8 * (g + 1) * lanes].eq(pooling.o_data)
        m.d.comb += [
            queue.w_en.eq(pooling.o_valid & (pooling.o_group == steps - 1)),
            queue.w_data.eq(Cat(collected, pooling.o_data.as_value()[:8 * (cols - early)])),
        ]
        # Rows accepted and not yet through the pooling unit's last stage.
        # A row counts from the cycle it is taken; until its last group has
        # entered the requantizers, as `count`.
        waiting = (count != 0) & (count <= (steps - 1) * cycles)
        if self._config.serial_act:
            # Only whether any row is in flight matters: an OR, not a count.
            m.d.comb += pending.eq(Cat(*(v & f for v, f in zip(valid, final)), waiting,
                                       pooling.pending != 0).any())
        else:
            m.d.comb += pending.eq(sum(v & f for v, f in zip(valid, final)) + waiting
                                   + pooling.pending)
        # A row leaves the count when it is read from the queue, or as it
        # leaves the pooling unit's last stage without a result.
        leaving = pooling.row_done & ~queue.w_en
        read = queue.r_en & queue.r_rdy
        next_held = Signal.like(held_rows)
        m.d.comb += next_held.eq(held_rows + accept - read - leaving)
        m.d.sync += [held_rows.eq(next_held), room.eq(next_held < depth)]
        return m
