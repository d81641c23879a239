"""Pooling of quantized rows: k x k max/average windows and global pooling."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .activation_settings import (Pooling, SettingsLayout, MAX_POOL_SIZE, MAX_POOL_COUNT,
                                  RECIPROCAL_SHIFT, RECIPROCAL_WIDTH, VALUE_WIDTH)


__all__ = ["PoolingUnit"]

# A horizontal window sums at most MAX_POOL_SIZE values, a whole window
# MAX_POOL_SIZE**2, a global average MAX_POOL_COUNT; values are in -128..255.
H_WIDTH = VALUE_WIDTH + (MAX_POOL_SIZE - 1).bit_length()
SUM_WIDTH = VALUE_WIDTH + (MAX_POOL_COUNT - 1).bit_length()
# The reductions of the 2 and the MAX_POOL_SIZE - 1 newest lines of a window column.
PAIR_WIDTH = VALUE_WIDTH + (2 * MAX_POOL_SIZE - 1).bit_length()
PRIOR_WIDTH = VALUE_WIDTH + ((MAX_POOL_SIZE - 1) * MAX_POOL_SIZE - 1).bit_length()
# ``(|sum| + count // 2) * reciprocal >> 32``: below 2**22 times below 2**33.
QUOTIENT_BITS = SUM_WIDTH + 1 + RECIPROCAL_WIDTH - RECIPROCAL_SHIFT


class PoolingUnit(wiring.Component):
    """Pools rows of ``lanes`` values in raster order (one row per pixel,
    ``pool_width`` pixels per line), with VALID windows: window ``(oy, ox)``
    covers lines ``oy*s .. oy*s+k-1`` and pixels ``ox*s .. ox*s+k-1`` and is
    emitted as soon as its last pixel arrives.

    A window is reduced in two steps: across the line, from the current value
    and a shift register of the ``k - 1`` previous ones (a window never spans
    two lines); then across lines, from that horizontal result and the ``k - 1``
    previous horizontal results of the same window column, kept in a line
    buffer of ``max_width`` entries (one memory per lane; ``pool_width``
    must not exceed ``max_width``). Average pooling divides by
    ``pool_count`` with ``(|sum| + pool_count // 2) * pool_reciprocal >> 32``
    and restores the sign (TFLite's rounding, see ``tpu/models/activation_model.py``).
    Global pooling keeps one running sum or maximum and emits it with the
    operation's last row. Pooling NONE passes every row.

    With ``groups`` > 1 a row arrives as ``groups`` groups of ``lanes``
    values (columns ``g * lanes ..`` in group ``g``), at most one a cycle,
    the last group last: the lanes serve every group in turn, each group's
    window history and running global value are kept in a small memory
    indexed by the group (with `sequential_average`, the small form, in a
    ring of registers turned by every group presented, the groups coming in
    order), its line buffer entries beside the other groups',
    and the row's position in the image advances with its last group. The
    activation pipeline's shared requantizers deliver rows this way, so the
    pooling unit shares their lanes and a row's output is still complete
    `latency` cycles after its last group.

    A pipeline without stalls: horizontal and global reduction, vertical
    reduction and reciprocal multiply (itself three stages, or
    `SEQUENTIAL_CYCLES` on one small multiplier) are registered, the sign
    and clamp is combinational at the output (no carry chain: the low
    byte's negation and the saturation from ORs of the quotient's bits;
    with `sequential_average` after a 9-bit sum that adds the reciprocal's
    bit 32 times ``x``).
    The output for a row that completes a window is presented `latency`
    cycles after that row.

    Members
    -------
    restart : In(1)
        The next row starts a new operation (a settings write).
    settings : In(SettingsLayout(max_width, mlas_rounding))
        Pooling mode and shape, divisor, reciprocal and output signedness;
        stable while rows are in flight (the pipeline's settings, whose
        layout has ``mlas_round`` with `mlas_rounding`).
    i_valid, i_last : In(1)
        A row (a group of it) is presented; the row is the last of its
        operation.
    i_group : In(range(groups))
        The group presented.
    i_data : In(ArrayLayout(signed(9), lanes))
        The group's values, in the output type's range.
    o_valid : Out(1)
        `o_data` holds an output row's group `o_group` (for one cycle).
    o_group : Out(range(groups))
        The group in `o_data`.
    o_data : Out(ArrayLayout(unsigned(8), lanes))
        The output group's bytes.
    pending : Out(range(latency + 1))
        Rows in the pipeline (counted by their last group), whether or not
        they will produce an output.
    row_done : Out(1)
        A row (its last group) is in the last stage: it leaves `pending`
        after this cycle, with `o_valid` if it completes an output.
    """

    #: `latency` with a one-cycle average multiply (a stage each for the
    #: horizontal, vertical and average steps).
    BASE_LATENCY = 3
    #: Cycles the average's multiply takes with `sequential_average`.
    SEQUENTIAL_CYCLES = 4
    #: Cycles the average takes without it: the magnitude and rounding
    #: term, the product's two halves, their sum, each registered.
    PIPELINED_CYCLES = 3

    def __init__(self, *, lanes, max_width, groups=1, sequential_average=False,
                 mlas_rounding=True):
        for name, value, high in (("lanes", lanes, 256), ("max_width", max_width, 1 << 16),
                                  ("groups", groups, 256)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {value!r}")
            if not 1 <= value <= high:
                raise ValueError(f"{name} must be in 1..{high}, not {value}")
        self._lanes = lanes
        self._max_width = max_width
        self._groups = groups
        self._sequential = bool(sequential_average)
        super().__init__({
            "restart":  In(1),
            "settings": In(SettingsLayout(max_width, mlas_rounding)),
            "i_valid":  In(1),
            "i_last":   In(1),
            "i_group":  In(range(groups)),
            "i_data":   In(data.ArrayLayout(signed(VALUE_WIDTH), lanes)),
            "o_valid":  Out(1),
            "o_group":  Out(range(groups)),
            "o_data":   Out(data.ArrayLayout(unsigned(8), lanes)),
            "pending":  Out(range(self.latency + 1)),
            "row_done": Out(1),
        })

    @staticmethod
    def latency_of(sequential_average):
        """`latency` of a pooling unit with or without `sequential_average`."""
        return PoolingUnit.BASE_LATENCY - 1 + (PoolingUnit.SEQUENTIAL_CYCLES if sequential_average
                                               else PoolingUnit.PIPELINED_CYCLES)

    @property
    def latency(self):
        """Cycles from a row that completes a window to its output."""
        return self.latency_of(self._sequential)

    @property
    def lanes(self):
        return self._lanes

    @property
    def max_width(self):
        return self._max_width

    @property
    def groups(self):
        return self._groups

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        cfg = self.settings
        k, s = cfg.pool_size, cfg.pool_stride

        # What the datapath decodes from the settings, registered: the
        # settings change only between operations, at least a cycle before
        # an operation's first row.
        window = Signal()
        global_ = Signal()
        maximum = Signal()
        average = Signal()
        m.d.sync += [
            window.eq((cfg.pool == Pooling.MAX) | (cfg.pool == Pooling.AVG)),
            global_.eq((cfg.pool == Pooling.GLOBAL_AVG) | (cfg.pool == Pooling.GLOBAL_MAX)),
            maximum.eq((cfg.pool == Pooling.MAX) | (cfg.pool == Pooling.GLOBAL_MAX)),
            average.eq((cfg.pool == Pooling.AVG) | (cfg.pool == Pooling.GLOBAL_AVG)),
        ]
        # Window tap j (0 = the previous value) takes part when j < k - 1.
        taps = [Signal(name=f"tap{j}") for j in range(MAX_POOL_SIZE - 1)]
        m.d.sync += [tap.eq(k > j + 1) for j, tap in enumerate(taps)]

        # A window is reduced as its newest value and the reduction of the
        # k - 1 before it (`prior`), kept with the history, so that each
        # stage compares or adds once from its input (not k - 1 times in a
        # row). The history is the newest value, the reduction of the taps
        # 1 and 2 in use of the next window (`pair`: the newest and the one
        # before) and `prior`; each is made from the value arriving and one
        # register, `prior` from `pair`. Whatever is not in use is replaced
        # by the identity, so no reduction takes a value from before the
        # window (the previous line's, or the previous operation's); a
        # window of one (k = 1) is its value alone.
        assert MAX_POOL_SIZE == 4, "the history holds taps 0..2"

        def combine(a, b):
            if self._sequential:
                # A maximum reduces values alone, so in that mode every
                # operand that reaches an output is in VALUE_WIDTH bits: the
                # small form compares those bits only (an operand left from
                # an earlier operation, wider, goes into no output).
                a_low, b_low = a[:VALUE_WIDTH].as_signed(), b[:VALUE_WIDTH].as_signed()
                return Mux(maximum, Mux(a_low > b_low, a_low, b_low), a + b)
            return Mux(maximum, Mux(a > b, a, b), a + b)

        def next_history(value, last, width, pair_width, prior_width):
            """The history after `value` arrives: the newest value, its pair
            and its prior, from `last`, the history before."""
            neutral = Mux(maximum, -(1 << (VALUE_WIDTH - 1)), 0)
            fields = [Signal(signed(w)) for w in (width, pair_width, prior_width)]
            m.d.comb += [
                fields[0].eq(value),
                fields[1].eq(Mux(taps[1], combine(value, Mux(taps[2], last.newest, neutral)),
                                 neutral)),
                fields[2].eq(combine(value, Mux(taps[1], last.pair, neutral))),
            ]
            return Cat(*fields)

        def history_layout(width, pair_width, prior_width):
            return data.StructLayout({"newest": signed(width), "pair": signed(pair_width),
                                      "prior": signed(prior_width)})

        # Position in the image. A row's horizontal window ends when `xn`
        # reaches 0 (at pixels k-1, k-1+s, ...), its vertical window when `yn`
        # does; `first` stands for the state at the start of an operation.
        first = Signal(init=1)
        x = Signal(range(self._max_width))
        ox = Signal(range(self._max_width))
        xn = Signal(range(MAX_POOL_SIZE))
        yn = Signal(range(MAX_POOL_SIZE))
        cur_x, cur_ox = Signal.like(x), Signal.like(ox)
        cur_xn, cur_yn = Signal.like(xn), Signal.like(yn)
        m.d.comb += [
            cur_x.eq(Mux(first, 0, x)),
            cur_ox.eq(Mux(first, 0, ox)),
            cur_xn.eq(Mux(first, k - 1, xn)),
            cur_yn.eq(Mux(first, k - 1, yn)),
        ]
        h_end = cur_xn == 0
        v_end = cur_yn == 0
        line_end = cur_x == cfg.pool_width - 1
        final = Signal()                    # the row's last group
        m.d.comb += final.eq(self.i_group == self._groups - 1)
        step = self.i_valid & final

        with m.If(self.restart):
            m.d.sync += first.eq(1)
        with m.Elif(step):
            m.d.sync += first.eq(self.i_last)
            with m.If(line_end):
                m.d.sync += [
                    x.eq(0), ox.eq(0), xn.eq(k - 1),
                    yn.eq(Mux(v_end, s - 1, cur_yn - 1)),
                ]
            with m.Else():
                m.d.sync += [
                    x.eq(cur_x + 1),
                    ox.eq(cur_ox + h_end),
                    xn.eq(Mux(h_end, s - 1, cur_xn - 1)),
                    yn.eq(cur_yn),
                ]

        # Per-lane registers and memories (narrow signals keep simulators fast).
        p1_value = [Signal(signed(SUM_WIDTH), name=f"p1_value{n}") for n in range(lanes)]
        p2_value = [Signal(signed(SUM_WIDTH), name=f"p2_value{n}") for n in range(lanes)]
        p3_product = [Signal(SUM_WIDTH + 1 + RECIPROCAL_WIDTH, name=f"p3_product{n}")
                      for n in range(lanes)]
        p3_negative = [Signal(name=f"p3_negative{n}") for n in range(lanes)]
        p3_value = [Signal(signed(VALUE_WIDTH), name=f"p3_value{n}") for n in range(lanes)]
        out = [Signal(8, name=f"out{n}") for n in range(lanes)]
        p2_row = Signal()
        p3_row = Signal()
        m.d.comb += self.o_data.eq(Cat(*out))

        def group_state(name, shape):
            """A register per lane of the group presented, and its next value.
            One group: plain registers; more: a memory read asynchronously
            (LUT RAM on an FPGA) at the group presented, written with the
            next value when a group is presented."""
            layout = data.ArrayLayout(shape, lanes)
            current = Signal(layout, name=name)
            following = Signal(layout, name=f"{name}_next")
            if self._groups == 1:
                m.d.sync += current.eq(following)
            elif self._sequential:
                # The small form: the groups of a row come in order, every
                # one of them, so the state of the group presented is always
                # the oldest of a ring of registers (no read multiplexer).
                ring = [Signal(layout, name=f"{name}_ring{g}") for g in range(self._groups)]
                m.d.comb += current.eq(ring[0])
                with m.If(self.i_valid):
                    m.d.sync += [a.eq(b) for a, b in zip(ring, ring[1:] + [following])]
            else:
                state = Memory(shape=layout, depth=self._groups, init=[])
                m.submodules[name] = state
                rd = state.read_port(domain="comb")
                wr = state.write_port()
                m.d.comb += [rd.addr.eq(self.i_group), current.eq(rd.data),
                             wr.addr.eq(self.i_group), wr.data.eq(following),
                             wr.en.eq(self.i_valid)]
            return current, following

        # Stage 1: horizontal window (from a shift register of the previous
        # values) and global reduction.
        # The sum of two values fits H_WIDTH, as does the prior's of three.
        h_widths = (VALUE_WIDTH, H_WIDTH, H_WIDTH)
        if self._sequential:
            # The small form's window history: a ring turned by every group
            # presented (as `group_state`'s), its entry for the group
            # presented updated in the two cycles after it, on the one
            # reduction of stage 1 (groups come at least 4 cycles apart):
            # the prior in the first, the pair and the newest value in the
            # second.
            ring = [Signal(data.ArrayLayout(history_layout(*h_widths), lanes),
                           name=f"history_ring{g}") for g in range(self._groups)]
            histories, presented = ring[0], ring[-1]
            if self._groups > 1:
                with m.If(self.i_valid):
                    m.d.sync += [a.eq(b) for a, b in zip(ring, ring[1:] + ring[:1])]
            h_later = Signal(name="h_later")        # the prior's turn
            h_last = Signal(name="h_last")          # the pair's and the newest's
            m.d.sync += [h_later.eq(self.i_valid), h_last.eq(h_later)]
        else:
            histories, next_histories = group_state("history", history_layout(*h_widths))
        runnings, next_runnings = group_state("running", signed(SUM_WIDTH))
        p1_row = Signal()
        p1_h = Signal()
        p1_emit = Signal()
        p1_v_end = Signal()
        p1_ox = Signal.like(ox)
        p1_group = Signal.like(self.i_group)
        # The one reduction of a value: with its window's prior, or with the
        # running global value, unless it is the first of the operation.
        reduced = Signal()
        m.d.comb += reduced.eq((window & taps[0]) | (global_ & ~first))
        for n in range(lanes):
            value = Signal(signed(VALUE_WIDTH), name=f"value{n}")
            m.d.comb += value.eq(self.i_data[n])
            history = Signal(history_layout(*h_widths), name=f"history{n}")
            running = Signal(signed(SUM_WIDTH), name=f"global{n}")
            other = Signal(signed(SUM_WIDTH), name=f"other{n}")
            m.d.comb += [running.eq(runnings[n]), history.eq(histories[n]),
                         other.eq(Mux(window, history.prior, running))]
            if not self._sequential:
                with m.If(self.i_valid):
                    m.d.comb += next_histories[n].eq(next_history(value, history, *h_widths))
                with m.Else():
                    m.d.comb += next_histories[n].eq(histories[n])
            result = Signal(signed(SUM_WIDTH), name=f"reduced{n}")
            if self._sequential:
                # A value alone is its reduction with the identity. The
                # same reduction makes the history's prior and pair (see
                # `h_later`) from the value held.
                neutral = Mux(maximum, -(1 << (VALUE_WIDTH - 1)), 0)
                held = Signal(signed(VALUE_WIDTH), name=f"value_held{n}")
                with m.If(self.i_valid):
                    m.d.sync += held.eq(value)
                entry = presented[n]
                second = Signal(signed(SUM_WIDTH), name=f"second{n}")
                with m.If(h_later):
                    m.d.comb += second.eq(Mux(taps[1], entry.pair, neutral))
                with m.Elif(h_last):
                    m.d.comb += second.eq(Mux(taps[2], entry.newest, neutral))
                with m.Else():
                    m.d.comb += second.eq(Mux(reduced, other, neutral))
                m.d.comb += result.eq(combine(Mux(h_later | h_last, held, value), second))
                with m.If(h_later):
                    m.d.sync += entry.prior.eq(result)
                with m.If(h_last):
                    m.d.sync += [entry.pair.eq(Mux(taps[1], result, neutral)), entry.newest.eq(held)]
            else:
                m.d.comb += result.eq(Mux(reduced, combine(value, other), value))
            m.d.comb += next_runnings[n].eq(Mux(self.i_valid, result, running))
            if self._sequential:
                # Held until the next group: the line buffer's entry is
                # written from it two cycles after the vertical reduction.
                with m.If(self.i_valid):
                    m.d.sync += p1_value[n].eq(result)
            else:
                m.d.sync += p1_value[n].eq(result)
        if self._sequential:
            # The small form writes the line buffer's entry two cycles after
            # stage 2, at the group's window column, which holds until the
            # next group.
            with m.If(self.i_valid):
                m.d.sync += [p1_group.eq(self.i_group), p1_ox.eq(cur_ox)]
            m.d.sync += [
                p1_row.eq(self.i_valid & final),
                p1_h.eq(self.i_valid & window & h_end),
                p1_emit.eq(self.i_valid & ((cfg.pool == Pooling.NONE) | (global_ & self.i_last))),
                p1_v_end.eq(v_end),
            ]
        else:
            m.d.sync += [
                p1_group.eq(self.i_group),
                p1_row.eq(self.i_valid & final),
                p1_h.eq(self.i_valid & window & h_end),
                p1_emit.eq(self.i_valid & ((cfg.pool == Pooling.NONE) | (global_ & self.i_last))),
                p1_v_end.eq(v_end),
                p1_ox.eq(cur_ox),
            ]

        # Stage 2: vertical window, from the line buffer entry of this window
        # column (the previous horizontal results, newest first), one memory
        # per lane, the groups of a window column side by side.
        v_widths = (H_WIDTH, PAIR_WIDTH, PRIOR_WIDTH)
        entry = history_layout(*v_widths)
        p2_valid = Signal()
        p2_group = Signal.like(self.i_group)
        if self._sequential:
            # The small form's groups come at least SEQUENTIAL_CYCLES cycles
            # apart, so the line buffer's entry is written two cycles after
            # its vertical reduction, the three reductions taking turns on
            # one: the window's (into `p2_value`), then the entry's pair, then
            # its prior. The entry read holds (the read port is enabled only
            # as a group is presented) and so does the horizontal result (a
            # stage-1 register) until the next group; `p2_value` is read
            # only in the cycle after the window's reduction.
            later = Signal(name="p1_h_later")       # the entry's pair
            last = Signal(name="p1_h_last")         # its prior, and the write
            m.d.sync += [later.eq(p1_h), last.eq(later)]
        for n in range(lanes):
            lines = Memory(shape=entry, depth=self._max_width << len(self.i_group), init=[])
            m.submodules[f"lines{n}"] = lines
            rd = lines.read_port()
            wr = lines.write_port()
            h = p1_value[n]
            # A horizontal result is in H_WIDTH bits: the small form reduces
            # it in that width (the wider running global value never reaches
            # the line buffer or the vertical reduction).
            h_window = h[:H_WIDTH].as_signed() if self._sequential else h
            if not self._sequential:
                m.d.comb += [
                    rd.addr.eq(Cat(self.i_group, cur_ox)),
                    wr.en.eq(p1_h),
                    wr.addr.eq(Cat(p1_group, p1_ox)),
                    wr.data.eq(next_history(h_window, rd.data, *v_widths)),
                ]
                m.d.sync += p2_value[n].eq(Mux(window & taps[0], combine(h_window, rd.data.prior), h))
                continue
            m.d.comb += [
                rd.addr.eq(Cat(self.i_group, cur_ox)),
                wr.addr.eq(Cat(p1_group, p1_ox)),
            ]
            neutral = Mux(maximum, -(1 << (VALUE_WIDTH - 1)), 0)
            other = Signal(signed(PRIOR_WIDTH), name=f"v_other{n}")
            with m.If(later):
                m.d.comb += other.eq(Mux(taps[2], rd.data.newest, neutral))
            with m.Elif(last):
                m.d.comb += other.eq(Mux(taps[1], rd.data.pair, neutral))
            with m.Else():
                m.d.comb += other.eq(rd.data.prior)
            turn = Signal(signed(PRIOR_WIDTH + 1), name=f"v_turn{n}")
            m.d.comb += turn.eq(combine(h_window, other))
            pair = Signal(signed(PAIR_WIDTH), name=f"v_pair{n}")
            with m.If(later):
                m.d.sync += pair.eq(Mux(taps[1], turn, neutral))
            m.d.comb += [
                rd.en.eq(self.i_valid),
                wr.en.eq(last),
                wr.data.eq(Cat(h_window, pair, turn[:PRIOR_WIDTH])),
            ]
            m.d.sync += p2_value[n].eq(Mux(window & taps[0], turn, h))
        m.d.sync += [
            p2_valid.eq(p1_emit | (p1_h & p1_v_end)),
            p2_row.eq(p1_row),
            p2_group.eq(p1_group),
        ]

        # Stage 3: average = sign * ((|sum| + count // 2) * reciprocal >> 32).
        p3_valid = Signal()
        p3_group = Signal.like(self.i_group)
        half = cfg.pool_count >> 1
        if self._sequential:
            self._sequential_average(m, p2_valid, p2_value, half, p3_product, p3_negative,
                                     p3_value)
        else:
            self._pipelined_average(m, p2_value, half, p3_product, p3_negative, p3_value)
        # The row's flags wait for the product.
        extra = self.latency - self.BASE_LATENCY
        flags = [(p2_valid, p2_row, p2_group)]
        for j in range(extra):
            later = (Signal(name=f"p3_valid_{j}"), Signal(name=f"p3_row_{j}"),
                     Signal.like(self.i_group, name=f"p3_group_{j}"))
            m.d.sync += [a.eq(b) for a, b in zip(later, flags[-1])]
            flags.append(later)
        m.d.sync += [
            p3_valid.eq(flags[-1][0]),
            p3_row.eq(flags[-1][1]),
            p3_group.eq(flags[-1][2]),
        ]

        # Output: sign and clamp to the output type. The quotient is a
        # magnitude, so the clamp needs no comparison: a positive one
        # saturates at 127 (255 unsigned) from 128 (256) up, a negative one
        # at -128 from 128 up (at 0 unsigned, whatever it is), and of the
        # negation only the low byte is ever output, made bit by bit (a bit
        # flips when a lower one is set; no carry chain, which the iCE40's
        # synthesis would ripple through LUTs for a negation). Wide ORs
        # instead of the quotient's 23-bit negation and two 24-bit
        # comparisons in carry chains, which made the path into the
        # activation pipeline's `collected` the ulx3s16 chip's longest.
        for n in range(lanes):
            quotient = p3_product[n][RECIPROCAL_SHIFT:]
            over_signed = Signal(name=f"over_signed{n}")
            over_unsigned = Signal(name=f"over_unsigned{n}")
            negated = Signal(8, name=f"negated{n}")
            m.d.comb += [
                over_signed.eq(quotient[7:].any()),
                over_unsigned.eq(quotient[8:].any()),
                negated.eq(Cat(quotient[i] ^ quotient[:i].any() for i in range(8))),
            ]
            with m.If(~average):
                m.d.comb += out[n].eq(p3_value[n][:8])
            with m.Elif(p3_negative[n]):
                m.d.comb += out[n].eq(Mux(cfg.unsigned, 0, Mux(over_signed, 0x80, negated)))
            with m.Elif(cfg.unsigned):
                m.d.comb += out[n].eq(Mux(over_unsigned, 0xff, quotient[:8]))
            with m.Else():
                m.d.comb += out[n].eq(Mux(over_signed, 0x7f, quotient[:8]))
        m.d.comb += [
            self.o_valid.eq(p3_valid),
            self.o_group.eq(p3_group),
            self.pending.eq(p1_row + p2_row + sum(f[1] for f in flags[1:]) + p3_row),
            self.row_done.eq(p3_row),
        ]
        return m

    def _pipelined_average(self, m, values, half, products, negatives, held):
        """Stage 3 over `PIPELINED_CYCLES` registered stages: ``x = |v| +
        half`` (below 2**22); the products of `x` and the reciprocal's low
        18 and high bits (each on MULT18X18Ds with one partial-product sum);
        their sum. In one cycle the negation, the add and the whole
        product's partial-product sums made the chip's longest path."""
        recip = self.settings.pool_reciprocal
        split = 18
        for n, v in enumerate(values):
            x = Signal(SUM_WIDTH + 1, name=f"p3_x{n}")
            low = Signal(SUM_WIDTH + 1 + split, name=f"p3_low{n}")
            high = Signal(SUM_WIDTH + 1 + RECIPROCAL_WIDTH - split, name=f"p3_high{n}")
            # The sign and the value travel beside the product.
            negative = [Signal(name=f"p3_negative{n}_{j}") for j in range(2)]
            value = [Signal(signed(VALUE_WIDTH), name=f"p3_value{n}_{j}") for j in range(2)]
            m.d.sync += [
                x.eq(Mux(v < 0, -v, v)[:SUM_WIDTH] + half),
                negative[0].eq(v < 0),
                value[0].eq(v),
                low.eq(x * recip[:split]),
                high.eq(x * recip[split:]),
                negative[1].eq(negative[0]),
                value[1].eq(value[0]),
                products[n].eq(low + (high << split)),
                negatives[n].eq(negative[1]),
                held[n].eq(value[1]),
            ]

    def _sequential_average(self, m, start, values, half, products, negatives, held):
        """Stage 3 over `SEQUENTIAL_CYCLES` cycles on one 16 x 16-bit
        unsigned multiplier per lane: ``x = |v| + half`` (below 2**22) times
        the reciprocal ``r`` (33 bits) is ``x_0 r_0``, ``x_0 r_1`` and
        ``x_1 r_0`` at 2**16, ``x_1 r_1`` and ``r[32] x`` at 2**32, the
        16-bit pieces summed least significant first, the sum shifted right
        16 bits as it moves up a weight: only the quotient of the low 32
        bits, ``floor(x (r mod 2**32) / 2**32)``, is kept (the bits shifted
        out have already carried into it), in 34 bits instead of the whole
        55-bit product. The first piece in the cycle the value arrives
        (`start`), the others from `x` registered, so the product is ready
        three cycles later than the one-cycle multiply's. A value arrives
        at most once every `SEQUENTIAL_CYCLES` cycles (the requantizers'
        products take as long).

        ``r[32] x`` is a whole number at 2**32, so the quotient is that sum
        plus ``r[32] x``, and the output takes only its low byte and whether
        it is 128 or more, or 256 or more: the quotient given to the output
        is those (its low byte, bit 8 set for 256 or more), from a 9-bit
        sum of the low bytes and ORs of the bits above, not a third operand
        of the 34-bit sum (the output reads `x` in the cycle after the last
        step, before the next value's start replaces it)."""
        cfg = self.settings
        recip = cfg.pool_reciprocal
        phase = Signal(range(self.SEQUENTIAL_CYCLES))   # step 1..3 running; 0 idle
        m.d.sync += phase.eq(Mux(start, 1, Mux((phase == 0) | (phase == self.SEQUENTIAL_CYCLES - 1), 0,
                                                   phase + 1)))
        for n, v in enumerate(values):
            now = Signal(22, name=f"p3_x{n}_now")
            x = Signal(22, name=f"p3_x{n}")
            # ``|v| + half`` as ``(v ^ sign) + half + sign``: one sum, the
            # negation's increment its carry in.
            sign = v[-1]
            m.d.comb += now.eq((v ^ sign.replicate(len(v)))[:SUM_WIDTH] + half + sign)
            with m.If(start):
                m.d.sync += [x.eq(now), negatives[n].eq(v < 0), held[n].eq(v)]
            a = Signal(16, name=f"p3_a{n}")
            b = Signal(16, name=f"p3_b{n}")
            piece = Signal(32, name=f"p3_piece{n}")
            total = Signal(QUOTIENT_BITS, name=f"p3_total{n}")
            with m.Switch(phase):
                with m.Case(0):
                    m.d.comb += [a.eq(now[:16]), b.eq(recip[:16])]
                with m.Case(1):
                    m.d.comb += [a.eq(x[:16]), b.eq(recip[16:32])]
                with m.Case(2):
                    m.d.comb += [a.eq(x[16:]), b.eq(recip[:16])]
                with m.Default():
                    m.d.comb += [a.eq(x[16:]), b.eq(recip[16:32])]
            m.d.comb += piece.eq(a * b)
            # One sum for the four steps, ``running + piece``: `running`
            # holds 0 before a value starts (cleared in the last step and
            # while idle: its flip-flops' reset, not a choice before the
            # adder, as it takes no domain reset) and the sum of the steps
            # before, shifted right 16 bits where the next piece is a
            # weight up (after the first and third); the last step's sum
            # is the quotient, into `total`. (A choice of the piece alone
            # at the start and of the total or its shift before the adder
            # were 34 LUT4s each.)
            running = Signal(33, name=f"p3_running{n}", reset_less=True)
            total_sum = Signal(33, name=f"p3_sum{n}")
            m.d.comb += total_sum.eq(running + piece)
            with m.If((phase == self.SEQUENTIAL_CYCLES - 1) | ((phase == 0) & ~start)):
                m.d.sync += running.eq(0)
            with m.Elif(start | (phase == 2)):
                m.d.sync += running.eq(total_sum >> 16)
            with m.Else():
                m.d.sync += running.eq(total_sum)
            with m.If(phase == self.SEQUENTIAL_CYCLES - 1):
                m.d.sync += total.eq(total_sum)
            # The reciprocal's bit 32 times `x` added for the output: the
            # low bytes summed, and whether the quotient reaches 256 (a
            # third operand of the 34-bit sum took 88 LUT4s more).
            extra = Signal(22, name=f"p3_extra{n}")
            low_sum = Signal(9, name=f"p3_low_sum{n}")
            m.d.comb += [
                extra.eq(Mux(recip[32], x, 0)),
                low_sum.eq(total[:8] + extra[:8]),
            ]
            above = Signal(name=f"p3_above{n}")
            m.d.comb += above.eq(low_sum[8] | total[8:].any() | extra[8:].any())
            m.d.comb += products[n].eq(Cat(C(0, RECIPROCAL_SHIFT), low_sum[:8], above))
