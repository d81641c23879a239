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
# The reduction of the MAX_POOL_SIZE - 1 newer lines of a window column.
PRIOR_WIDTH = VALUE_WIDTH + ((MAX_POOL_SIZE - 1) * MAX_POOL_SIZE - 1).bit_length()


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
    indexed by the group, its line buffer entries beside the other groups',
    and the row's position in the image advances with its last group. The
    activation pipeline's shared requantizers deliver rows this way, so the
    pooling unit shares their lanes and a row's output is still complete
    `latency` cycles after its last group.

    A pipeline without stalls: horizontal and global reduction, vertical
    reduction and reciprocal multiply are registered stages, the rounding and
    clamp is combinational at the output. The output for a row that
    completes a window is presented `latency` cycles after that row.

    Members
    -------
    restart : In(1)
        The next row starts a new operation (a settings write).
    settings : In(SettingsLayout(max_width))
        Pooling mode and shape, divisor, reciprocal and output signedness;
        stable while rows are in flight.
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
    """

    latency = 3

    def __init__(self, *, lanes, max_width, groups=1):
        for name, value, high in (("lanes", lanes, 256), ("max_width", max_width, 1 << 16),
                                  ("groups", groups, 256)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {value!r}")
            if not 1 <= value <= high:
                raise ValueError(f"{name} must be in 1..{high}, not {value}")
        self._lanes = lanes
        self._max_width = max_width
        self._groups = groups
        super().__init__({
            "restart":  In(1),
            "settings": In(SettingsLayout(max_width)),
            "i_valid":  In(1),
            "i_last":   In(1),
            "i_group":  In(range(groups)),
            "i_data":   In(data.ArrayLayout(signed(VALUE_WIDTH), lanes)),
            "o_valid":  Out(1),
            "o_group":  Out(range(groups)),
            "o_data":   Out(data.ArrayLayout(unsigned(8), lanes)),
            "pending":  Out(range(self.latency + 1)),
        })

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
        # k - 1 before it (`prior`), made when the one before the newest
        # arrived and stored with the history, so each stage compares or
        # adds once from its input (not k - 1 times in a row). A window of
        # one (k = 1) is its value alone: its prior would be the previous
        # operation's.
        def combine(a, b):
            return Mux(maximum, Mux(a > b, a, b), a + b)

        def prior_of(newest, older):
            """The reduction of the taps in use of `newest` (tap 0) and
            `older` (taps 1, 2), for the window after: nothing in use is
            the identity (-256 below every value, or 0)."""
            neutral = Mux(maximum, -(1 << (VALUE_WIDTH - 1)), 0)
            used = [Mux(tap, value, neutral) for tap, value in zip(taps, [newest, *older])]
            return combine(used[0], combine(used[1], used[2]))

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
        history_layout = data.StructLayout({
            "values": data.ArrayLayout(signed(VALUE_WIDTH), MAX_POOL_SIZE - 2),
            "prior": signed(H_WIDTH)})
        histories, next_histories = group_state("history", history_layout)
        runnings, next_runnings = group_state("running", signed(SUM_WIDTH))
        p1_row = Signal()
        p1_h = Signal()
        p1_emit = Signal()
        p1_v_end = Signal()
        p1_ox = Signal.like(ox)
        p1_group = Signal.like(self.i_group)
        for n in range(lanes):
            value = Signal(signed(VALUE_WIDTH), name=f"value{n}")
            m.d.comb += value.eq(self.i_data[n])
            history = [Signal(signed(VALUE_WIDTH), name=f"hist{n}_{j}")
                       for j in range(MAX_POOL_SIZE - 2)]
            prior = Signal(signed(H_WIDTH), name=f"prior{n}")
            running = Signal(signed(SUM_WIDTH), name=f"global{n}")
            m.d.comb += [running.eq(runnings[n]), prior.eq(histories[n].prior),
                         *(h.eq(histories[n].values[j]) for j, h in enumerate(history))]
            with m.If(self.i_valid):
                m.d.comb += next_histories[n].eq(Cat(value, *history[:-1],
                                                     prior_of(value, history)[:H_WIDTH]))
            with m.Else():
                m.d.comb += next_histories[n].eq(histories[n])
            update = Signal(signed(SUM_WIDTH), name=f"global{n}_next")
            m.d.comb += update.eq(Mux(first, value,
                                      Mux(maximum, Mux(value > running, value, running),
                                          running + value)))
            m.d.comb += next_runnings[n].eq(Mux(self.i_valid, update, running))
            m.d.sync += p1_value[n].eq(Mux(window & taps[0], combine(value, prior),
                                           Mux(global_, update, value)))
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
        entry = data.StructLayout({
            "values": data.ArrayLayout(signed(H_WIDTH), MAX_POOL_SIZE - 2),
            "prior": signed(PRIOR_WIDTH)})
        p2_valid = Signal()
        p2_group = Signal.like(self.i_group)
        for n in range(lanes):
            lines = Memory(shape=entry, depth=self._max_width << len(self.i_group), init=[])
            m.submodules[f"lines{n}"] = lines
            rd = lines.read_port()
            wr = lines.write_port()
            h = p1_value[n]
            old = [rd.data.values[j] for j in range(MAX_POOL_SIZE - 2)]
            m.d.comb += [
                rd.addr.eq(Cat(self.i_group, cur_ox)),
                wr.en.eq(p1_h),
                wr.addr.eq(Cat(p1_group, p1_ox)),
                wr.data.eq(Cat(h[:H_WIDTH], *old[:-1], prior_of(h, old)[:PRIOR_WIDTH])),
            ]
            m.d.sync += p2_value[n].eq(Mux(window & taps[0], combine(h, rd.data.prior), h))
        m.d.sync += [
            p2_valid.eq(p1_emit | (p1_h & p1_v_end)),
            p2_row.eq(p1_row),
            p2_group.eq(p1_group),
        ]

        # Stage 3: average = sign * ((|sum| + count // 2) * reciprocal >> 32).
        p3_valid = Signal()
        p3_group = Signal.like(self.i_group)
        half = cfg.pool_count >> 1
        for n in range(lanes):
            v = p2_value[n]
            magnitude = Mux(v < 0, -v, v)[:SUM_WIDTH]
            m.d.sync += [
                p3_product[n].eq((magnitude + half) * cfg.pool_reciprocal),
                p3_negative[n].eq(v < 0),
                p3_value[n].eq(v),
            ]
        m.d.sync += [
            p3_valid.eq(p2_valid),
            p3_row.eq(p2_row),
            p3_group.eq(p2_group),
        ]

        # Output: sign and clamp to the output type.
        low = Mux(cfg.unsigned, 0, -128)
        high = Mux(cfg.unsigned, 255, 127)
        for n in range(lanes):
            quotient = p3_product[n] >> RECIPROCAL_SHIFT
            signed_q = Mux(p3_negative[n], -quotient, quotient)
            clamped = Mux(signed_q < low, low, Mux(signed_q > high, high, signed_q))
            m.d.comb += out[n].eq(Mux(average, clamped, p3_value[n])[:8])
        m.d.comb += [
            self.o_valid.eq(p3_valid),
            self.o_group.eq(p3_group),
            self.pending.eq(p1_row + p2_row + p3_row),
        ]
        return m
