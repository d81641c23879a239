"""The Matrix Multiply Unit: a weight-stationary systolic array."""

import hashlib

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .device_family import is_ecp5, is_ice40
from .module_library import ModuleLibrary, add_submodule
from .multiplier import (MULTIPLIER_LATENCY, DelayedMultiplier, ECP5CarryChainMultiplier,
                         ECP5Multiplier, ECP5PipelinedMultiplier, Multiplier, MultiplierSignature,
                         PipelinedLUTMultiplier, PipelinedMultiplier, ice40_dual_multipliers,
                         multiplier_mix, multiplier_sites)
from .staircase import Staircase


__all__ = ["SystolicArray", "SystolicRow", "psum_width"]


# The extreme magnitude of one product: int8 weight x uint8-or-int8 activation.
_MAX_PRODUCT = 255 * 128


def _never_elaborated(mul):
    """Mark a multiplier, and one it wraps, as not to be elaborated (so
    Amaranth does not warn that it went unused)."""
    while mul is not None:
        mul._MustUse__silence = True
        mul = getattr(mul, "inner", None)


def psum_width(rows):
    """Bits of a signed partial sum that can never overflow for `rows` products."""
    return (rows * _MAX_PRODUCT).bit_length() + 1


class SystolicArray(wiring.Component):
    """Weight-stationary ``rows x cols`` array of int8 multiply-accumulate cells.

    Processing element PE(k, n) holds weight ``w[k, n]`` and computes, for
    every activation row ``x``, one term of ``y[n] = sum_k x[k] * w[k, n]``.
    Activations move right, partial sums move down; the unit skews its input
    and deskews its output itself, so rows go in whole and come out whole,
    exactly :attr:`latency` cycles later, one row per cycle.

    Each PE has three weight registers, so that weight loading never stalls
    the array:

    * *transit*: a shift chain up each column, filled one tile row per
      ``w_shift`` (tile row 0 first);
    * *shadow*: loaded from transit, a whole column at once, on ``w_capture``;
    * *active*: loaded from shadow when an activation row flagged
      ``act_switch`` passes the PE, so the new tile takes effect with the data
      wavefront and the row that carries the flag already uses it.

    The weight controls are skewed by column like the activations, so the
    rules for a controller, in cycles at these ports, are: a capture must
    come at least ``rows - 1`` cycles after the switch that consumed the
    previous shadow tile, and at least one cycle after the last shift of its
    tile; a switch must come at least one cycle after the capture it uses.
    A shift may share a cycle with a capture (it starts the next tile). This
    lets back-to-back tiles run with zero idle cycles whenever each tile
    streams at least ``rows`` rows.

    The PE is pipelined so that each multiplier has registered operands and a
    registered product: the switch multiplexer (shadow or active) feeds the
    multiplier's operand register alongside the active register, never the
    multiplication itself. The activation, its switch flag and the weight
    controls therefore reach each PE's registers one cycle before its
    multiplier uses them; the extra cycle is taken from the input skew, so
    :attr:`latency` and the rules above are those of the unpipelined PE, and
    a weight control at these ports goes straight into the registers of
    column 0 (as an activation row goes into those of row 0).

    Parameters
    ----------
    rows, cols : int
        Array shape, 1 to 256 each.
    control_fanout : int or None
        The most rows that one register of a column's weight shift or
        capture drives. None (the default): one register per column drives
        the whole column. An int: each column's last skew register is copied
        once per ``control_fanout`` rows (column 0 is the port itself),
        every PE's switch register is its own, and so is every register of
        the switch flag's input skew; the copies are marked
        ``keep``, so that synthesis does not merge them back (the FPGA flow
        carries the mark from the signal to its flip-flop). The timing is
        the same either way: only the fanout of the nets differs, which on
        a large FPGA array is what limits the clock.
    tag_width : int
        Width of a user tag that travels with each row (e.g. its accumulator
        address).
    multiplier : callable
        Makes each PE's multiplier, a component with
        :class:`~tpu.hdl.multiplier.MultiplierSignature` taking its
        ``latency`` cycles (two unless it says otherwise; the same for every
        PE, and :attr:`latency` grows with it): a class called with no arguments (e.g.
        :class:`~tpu.hdl.multiplier.Multiplier`, plain ``*``) or a function
        of the PE's row and column (e.g.
        :func:`~tpu.hdl.multiplier.multiplier_mix`, DSP blocks for some PEs
        and logic for the rest). None (the default) chooses by the
        platform (`tpu.hdl.device_family`): for an iCE40
        :func:`~tpu.hdl.multiplier.ice40_dual_multipliers`, two PEs to an
        SB_MAC16; for an ECP5 with `dsp_multipliers` or `dsp_sites`, those
        PEs on :class:`~tpu.hdl.multiplier.ECP5Multiplier` and the rest on
        :class:`~tpu.hdl.multiplier.ECP5CarryChainMultiplier`; else
        :class:`~tpu.hdl.multiplier.Multiplier`. With `multiplier_latency`
        3, their three-cycle forms: on an iCE40 each SB_MAC16 half with a
        register after it, on an ECP5
        :class:`~tpu.hdl.multiplier.ECP5PipelinedMultiplier` and
        :class:`~tpu.hdl.multiplier.PipelinedLUTMultiplier`, else
        :class:`~tpu.hdl.multiplier.PipelinedMultiplier`.
    multiplier_latency : int or None
        With `multiplier` None: 2 (None, the default) or 3, the cycles every
        PE's multiplier takes (see `multiplier`). With a `multiplier` given,
        whose ``latency`` says, None or that latency (so that a
        `MatrixEngine`, which passes its config's, takes given multipliers
        of its config's latency).
    dsp_multipliers : int or None
        With the platform's multipliers on an ECP5: how many PEs (the first,
        row by row) multiply in a ``MULT18X18D``; the rest multiply in
        logic. None (the default): every PE's ``*`` is left to synthesis.
    dsp_sites : dict or None
        With the platform's multipliers on an ECP5, instead of
        `dsp_multipliers`: ``{(row, col): BEL name}``, the PEs that multiply
        in a ``MULT18X18D`` and the block each is placed on (e.g.
        :func:`~tpu.fpga.ecp5_floorplan.band_sites`); the rest multiply in
        logic.

    Members
    -------
    act_valid : In(1)
        An activation row is presented this cycle.
    act_data : In(ArrayLayout(unsigned(8), rows))
        The row's ``rows`` activation bytes.
    act_unsigned : In(1)
        Read ``act_data`` as uint8 (else int8).
    act_switch : In(1)
        Switch to the shadow tile starting with this row.
    act_tag : In(tag_width)
        Passed through to ``out_tag``.
    w_shift : In(1)
        Shift ``w_data`` (one tile row) into the transit chain.
    w_data : In(ArrayLayout(signed(8), cols))
        One row of a weight tile.
    w_capture : In(1)
        Copy the transit chain into the shadow registers.
    out_valid : Out(1)
    out_data : Out(ArrayLayout(signed(32), cols))
        ``act_data @ w`` for the row presented :attr:`latency` cycles ago.
    out_tag : Out(tag_width)
    """

    def __init__(self, *, rows, cols, tag_width=1, multiplier=None, multiplier_latency=None,
                 control_fanout=None, dsp_multipliers=None, dsp_sites=None):
        for name, value in (("rows", rows), ("cols", cols)):
            if not isinstance(value, int) or not 1 <= value <= 256:
                raise ValueError(f"SystolicArray {name} must be an int in 1..256, not {value!r}")
        if control_fanout is not None and (not isinstance(control_fanout, int)
                                           or isinstance(control_fanout, bool)
                                           or control_fanout < 1):
            self._MustUse__silence = True   # refused, so never elaborated
            raise ValueError(f"SystolicArray control_fanout must be None or a positive int, "
                             f"not {control_fanout!r}")
        self._control_fanout = control_fanout
        if dsp_multipliers is not None and (not isinstance(dsp_multipliers, int)
                                            or isinstance(dsp_multipliers, bool)
                                            or dsp_multipliers < 0):
            self._MustUse__silence = True   # refused, so never elaborated
            raise ValueError(f"SystolicArray dsp_multipliers must be None or a non-negative int, "
                             f"not {dsp_multipliers!r}")
        self._dsp_multipliers = dsp_multipliers
        if dsp_sites is not None:
            problem = None
            if dsp_multipliers is not None:
                problem = "cannot be given with dsp_multipliers"
            elif not isinstance(dsp_sites, dict):
                problem = f"must be None or a dict {{(row, col): BEL name}}, not {dsp_sites!r}"
            else:
                for pe, site in dsp_sites.items():
                    if (not isinstance(pe, tuple) or len(pe) != 2
                            or not all(isinstance(i, int) for i in pe)
                            or not (0 <= pe[0] < rows and 0 <= pe[1] < cols)):
                        problem = f"has {pe!r}, not the (row, col) of a PE of a {rows}x{cols} array"
                    elif not isinstance(site, str):
                        problem = f"gives PE{pe!r} the site {site!r}, not a BEL name"
                    if problem:
                        break
            if problem:
                self._MustUse__silence = True   # refused, so never elaborated
                raise ValueError(f"SystolicArray dsp_sites {problem}")
        self._dsp_sites = dsp_sites
        if not isinstance(tag_width, int) or tag_width < 1:
            raise ValueError(f"SystolicArray tag_width must be a positive int, not {tag_width!r}")
        if multiplier_latency is not None and multiplier_latency not in (2, 3):
            self._MustUse__silence = True   # refused, so never elaborated
            raise ValueError(f"SystolicArray multiplier_latency must be None, 2 or 3, "
                             f"not {multiplier_latency!r}")
        self._platform_multiplier = multiplier is None
        if multiplier is None:
            multiplier = PipelinedMultiplier if multiplier_latency == 3 else Multiplier
        if not callable(multiplier):
            raise TypeError(f"SystolicArray multiplier must be a callable (row, col) -> "
                            f"multiplier, not {multiplier!r}")
        self._rows = rows
        self._cols = cols
        # Made now, so that a bad multiplier fails here, not at elaboration.
        self._multipliers = [[self._make_multiplier(multiplier, k, n) for n in range(cols)]
                             for k in range(rows)]
        self._multiplier_latency = self._common_latency(self._multipliers)
        if multiplier_latency is not None and multiplier_latency != self._multiplier_latency:
            for mul in (mul for row in self._multipliers for mul in row):
                mul._MustUse__silence = True
            self._MustUse__silence = True   # refused, so never elaborated
            raise ValueError(f"SystolicArray multiplier_latency is {multiplier_latency}, but its "
                             f"multipliers take {self._multiplier_latency} cycles")
        super().__init__({
            "act_valid":    In(1),
            "act_data":     In(data.ArrayLayout(unsigned(8), rows)),
            "act_unsigned": In(1),
            "act_switch":   In(1),
            "act_tag":      In(tag_width),
            "w_shift":      In(1),
            "w_data":       In(data.ArrayLayout(signed(8), cols)),
            "w_capture":    In(1),
            "out_valid":    Out(1),
            "out_data":     Out(data.ArrayLayout(signed(32), cols)),
            "out_tag":      Out(tag_width),
        })

    @property
    def rows(self):
        return self._rows

    @property
    def cols(self):
        return self._cols

    @property
    def control_fanout(self):
        """The most rows one weight-control register drives (None: a column)."""
        return self._control_fanout

    @property
    def multiplier_latency(self):
        """Cycles each PE's multiplier takes (all take the same)."""
        return self._multiplier_latency

    @property
    def latency(self):
        """Cycles from a row at the inputs to its sums at the outputs."""
        # The wavefront's walk to the last row and (with the deskew) the last
        # column, the multiplier, and the last row's partial-sum register.
        return (self._rows - 1) + (self._cols - 1) + self._multiplier_latency + 1

    @staticmethod
    def _common_latency(multipliers):
        # A partial sum meets the product of the row below one cycle after
        # its own PE's, whatever the multipliers take, as long as every PE
        # takes the same: a slower multiplier only lengthens the latency.
        latencies = {}
        for k, row in enumerate(multipliers):
            for n, mul in enumerate(row):
                cycles = getattr(mul, "latency", MULTIPLIER_LATENCY)
                if not isinstance(cycles, int) or cycles < 1:
                    raise ValueError(f"SystolicArray multiplier for PE({k}, {n}) has latency "
                                     f"{cycles!r}: it must be a positive int")
                latencies.setdefault(cycles, (k, n))
        if len(latencies) > 1:
            for row in multipliers:
                for mul in row:
                    _never_elaborated(mul)  # refused
            (a, pe_a), (b, pe_b) = list(latencies.items())[:2]
            raise ValueError(f"SystolicArray multipliers must all take the same number of cycles: "
                             f"PE{pe_a} takes {a}, PE{pe_b} takes {b}")
        return next(iter(latencies))

    @staticmethod
    def _make_multiplier(make, row, col):
        # A class (the default) takes no arguments; a factory takes the PE's place.
        mul = make() if isinstance(make, type) else make(row, col)
        expected = MultiplierSignature().members
        if not isinstance(mul, wiring.Component) or mul.signature.members != expected:
            raise TypeError(f"SystolicArray multiplier for PE({row}, {col}) must be a component "
                            f"with MultiplierSignature (a, b in; p out), not {mul!r}")
        return mul

    def elaborate(self, platform):
        m = Module()
        rows, cols = self._rows, self._cols

        def delayed(value, cycles, name):
            for i in range(cycles):
                reg = Signal.like(value, name=f"{name}_d{i}")
                m.d.sync += reg.eq(value)
                value = reg
            return value

        def staircase(name, values, width, first, step, keep=False):
            """`values` (lanes of `width` bits), lane k delayed first + k * step cycles."""
            m.submodules[name] = stairs = Staircase(width=width, lanes=len(values), first=first,
                                                    step=step, keep=keep)
            m.d.comb += stairs.i.eq(Cat(values))
            return [stairs.o[k * width:(k + 1) * width] for k in range(len(values))]

        # Left edge: widen each activation to 9-bit signed, so one datapath
        # serves int8 and uint8, then skew row k by k cycles: this is what
        # PE(k, 0) registers, into its multiplier and towards PE(k, 1).
        lane_in = []
        for k in range(rows):
            byte = self.act_data[k]
            wide = Signal(signed(9), name=f"act_in_{k}")
            m.d.comb += wide.eq(Mux(self.act_unsigned, byte, byte.as_signed()))
            lane_in.append(wide)
        lane_act = [v.as_signed() for v in staircase("skew_act", lane_in, 9, 0, 1)]
        # With copied controls each row's switch lane is kept apart too:
        # otherwise Yosys merges it with the PE switch register that carries
        # the same delay, far across the array.
        lane_switch = staircase("skew_switch", [self.act_switch] * rows, 1, 0, 1,
                                keep=self._control_fanout is not None)

        def column_controls(name, control):
            """Per row, `control` for each column, column n n cycles late."""
            fanout = self._control_fanout
            if fanout is None:
                return [Cat(staircase(f"skew_{name}", [control] * cols, 1, 0, 1))] * rows
            # The staircase stops a cycle short; the last cycle is a copy
            # per group of rows, which the placer can put near its rows.
            early = staircase(f"skew_{name}", [control] * (cols - 1), 1, 0, 1) if cols > 1 else []
            per_row = []
            for first in range(0, rows, fanout):
                copies = []
                for n in range(1, cols):
                    copy = Signal(name=f"{name}_rows{first}_col{n}", attrs={"keep": 1})
                    m.d.sync += copy.eq(early[n - 1])
                    copies.append(copy)
                per_row += [Cat(control, *copies)] * min(fanout, rows - first)
            return per_row

        # Top edge: weight controls and data reach column n n cycles late,
        # matching the activation wavefront.
        row_shift = column_controls("wshift", self.w_shift)
        row_capture = column_controls("wcapture", self.w_capture)
        col_wdata = staircase("skew_wdata", [self.w_data[n] for n in range(cols)], 8, 0, 1)

        # The default multiplier on an iCE40 is half an SB_MAC16: yosys maps
        # a plain `*` to a whole one. On an ECP5 with a budget of DSP blocks,
        # the PEs beyond it multiply in logic.
        # With three-cycle multipliers the same choices in their pipelined
        # forms: band3's on an ECP5 (docs/fpga.md).
        multipliers = self._multipliers
        three = self._multiplier_latency == 3
        hard, soft = ((ECP5PipelinedMultiplier, PipelinedLUTMultiplier) if three
                      else (ECP5Multiplier, ECP5CarryChainMultiplier))
        make = None
        if self._platform_multiplier and is_ice40(platform):
            make = ice40_dual_multipliers()
            if three:
                pairs = make
                make = lambda k, n: DelayedMultiplier(pairs(k, n))
        elif self._platform_multiplier and is_ecp5(platform) and self._dsp_multipliers is not None:
            make = multiplier_mix(self._dsp_multipliers, cols=cols, hard_multiplier=hard,
                                  soft_multiplier=soft)
        elif self._platform_multiplier and is_ecp5(platform) and self._dsp_sites is not None:
            make = multiplier_sites(self._dsp_sites, hard_multiplier=hard, soft_multiplier=soft)
        if make is not None:
            for mul in (mul for row in multipliers for mul in row):
                _never_elaborated(mul)
            multipliers = [[make(k, n) for n in range(cols)] for k in range(rows)]
            # The latency (and so the deskew, the valid and tag delays) was
            # fixed from the defaults: the platform's must take as long.
            assert self._common_latency(multipliers) == self._multiplier_latency

        # The PEs, a row at a time: every row is the same module, so the
        # Verilog holds it once (docs/verilog.md).
        width = psum_width(rows)
        keep_switch = self._control_fanout is not None
        pe_rows = [SystolicRow(psum_width=width, multipliers=multipliers[k], keep_switch=keep_switch)
                   for k in range(rows)]
        for k, row in enumerate(pe_rows):
            add_submodule(m, platform, f"row_{k}", row, row.module_name)
            if isinstance(platform, ModuleLibrary):
                # Only the row a module is converted from elaborates its
                # multipliers; the other instances' are never used.
                for mul in multipliers[k]:
                    _never_elaborated(mul)
            m.d.comb += [
                row.act.eq(lane_act[k]),
                row.act_switch.eq(lane_switch[k]),
                row.shift.eq(row_shift[k]),
                row.capture.eq(row_capture[k]),
                # Weights shift up the columns, entering at the bottom row.
                row.below.eq(pe_rows[k + 1].transit if k + 1 < rows else Cat(col_wdata)),
                Value.cast(row.psum_in).eq(pe_rows[k - 1].psum_out if k else 0),
            ]
        # Bottom edge: column n is n cycles early; align all columns.
        psum_out = [pe_rows[-1].psum_out[n] for n in range(cols)]
        for n, value in enumerate(staircase("deskew", psum_out, width, cols - 1, -1)):
            m.d.comb += self.out_data[n].eq(value.as_signed())

        m.d.comb += [
            self.out_valid.eq(delayed(self.act_valid, self.latency, "valid")),
            self.out_tag.eq(delayed(self.act_tag, self.latency, "tag")),
        ]
        return m



class SystolicRow(wiring.Component):
    """One row of ``cols`` processing elements of a :class:`SystolicArray`.

    Rows with the same kinds of multiplier are the same circuit; only what
    they are connected to differs, so Verilog generation emits such a row
    once (as :attr:`module_name`) and instantiates it for each.

    Members
    -------
    act : In(signed(9))
        The row's activation, skewed, entering PE 0 and moving right.
    act_switch : In(1)
        The switch flag travelling with ``act``.
    shift, capture : In(cols)
        Each column's (skewed) weight shift and capture.
    below : In(ArrayLayout(signed(8), cols))
        The transit weights of the row below (the top edge's weight data for
        the bottom row), taken on a shift.
    transit : Out(ArrayLayout(signed(8), cols))
        This row's transit weights.
    psum_in : In(ArrayLayout(signed(psum_width), cols))
        Partial sums from the row above (0 for the top row).
    psum_out : Out(ArrayLayout(signed(psum_width), cols))
        ``psum_in`` plus the products of the activations that entered the
        multipliers' latency cycles earlier.

    With ``keep_switch`` each PE's switch register is marked ``keep``, so
    that synthesis does not share it with the rows on its anti-diagonal.
    """

    def __init__(self, *, psum_width, multipliers, keep_switch=False):
        cols = len(multipliers)
        self._keep_switch = keep_switch
        self._cols = cols
        self._psum_width = psum_width
        self._multipliers = list(multipliers)
        super().__init__({
            "act":      In(signed(9)),
            "act_switch": In(1),
            "shift":    In(cols),
            "capture":  In(cols),
            "below":    In(data.ArrayLayout(signed(8), cols)),
            "transit":  Out(data.ArrayLayout(signed(8), cols)),
            "psum_in":  In(data.ArrayLayout(signed(psum_width), cols)),
            "psum_out": Out(data.ArrayLayout(signed(psum_width), cols)),
        })

    @property
    def module_name(self):
        """The Verilog module of this row: it names every parameter."""
        kinds = [getattr(mul, "module_key", type(mul).__name__) for mul in self._multipliers]
        name = f"tpu_systolic_row_{self._cols}x{self._psum_width}"
        if any(kind != "Multiplier" for kind in kinds):
            # Rows mixing multiplier kinds differ: name the mix.
            name += "_" + hashlib.sha256(",".join(kinds).encode()).hexdigest()[:8]
        if self._keep_switch:
            name += "_keep"
        return name

    def elaborate(self, platform):
        m = Module()
        cols, width = self._cols, self._psum_width
        act, switch = self.act, self.act_switch
        for n in range(cols):
            transit = self.transit[n]
            shadow = Signal(signed(8), name=f"pe_{n}_shadow")
            active = Signal(signed(8), name=f"pe_{n}_active")
            weight = Signal(signed(8), name=f"pe_{n}_weight")
            psum = Signal(signed(width), name=f"pe_{n}_psum")

            # Plain multiplexers rather than `m.If`: at 256x256 the
            # per-PE conditional processes are what exhausts Yosys.
            m.d.comb += weight.eq(Mux(switch, shadow, active))
            m.d.sync += [
                transit.eq(Mux(self.shift[n], self.below[n], transit)),
                shadow.eq(Mux(self.capture[n], transit, shadow)),
                active.eq(weight),
            ]
            # The multiplier registers `act` and `weight` as `active` does
            # (for plain `*` synthesis merges the two), so the switch
            # multiplexer sits in front of registers, not of the multiplication.
            mul = self._multipliers[n]
            m.submodules[f"pe_{n}_mul"] = mul
            m.d.comb += [mul.a.eq(act), mul.b.eq(weight)]
            m.d.sync += psum.eq(self.psum_in[n] + mul.p)
            m.d.comb += self.psum_out[n].eq(psum)

            if n + 1 < cols:
                next_act = Signal.like(act, name=f"pe_{n}_act")
                next_switch = Signal(name=f"pe_{n}_switch",
                                     attrs={"keep": 1} if self._keep_switch else {})
                m.d.sync += [next_act.eq(act), next_switch.eq(switch)]
                act, switch = next_act, next_switch
        return m
