"""The processing element's multiplier, a replaceable piece.

Every multiplier of the systolic array is a component with the same ports and
the same timing: its operands are registered on the way in and the product on
the way out, so nothing but the multiplication itself lies between two
registers, whatever implements it. The implementations:

* :class:`Multiplier`: plain ``*``, the synthesis tool chooses (a DSP block
  where it infers one, logic elsewhere); the default.
* :class:`LUTMultiplier`: partial products summed in logic, never a DSP
  block; for the multipliers beyond a device's DSP blocks.
* :class:`SplitLUTMultiplier`: the same in logic, its two halves formed in
  the operand cycle and added in the product cycle, for faster clocks.
* :class:`CarryChainMultiplier`: the same in logic, each partial product
  added by a carry chain of its own; the smallest in logic on the ECP5, for
  a slow clock.
* :class:`ECP5CarryChainMultiplier`: the same with the partial products'
  AND gates inside the ECP5's carry cells (``CCU2C``, instantiated).
* :class:`ECP5Multiplier`: a Lattice ECP5 ``MULT18X18D`` instantiated
  directly with its input and output registers in use, so the whole
  multiplication is timed inside the DSP block.
* :class:`ICE40DualMultiplier`: half of an iCE40 ``SB_MAC16`` in its dual
  8 x 8 mode, two PEs to a block (:func:`ice40_dual_multipliers`); the
  array takes it by itself when it is built for an iCE40.

Some take three cycles instead of two (their :attr:`~Multiplier.latency`),
for clocks at which the two-cycle ones are the slowest path of a PE; an
array's multipliers must all take the same number of cycles:

* :class:`PipelinedMultiplier`: plain ``*`` with its product registered
  twice; what a chip of ``TPUConfig.pe_multiplier_latency`` 3 simulates.
* :class:`PipelinedLUTMultiplier`: in logic, one adder level a cycle.
* :class:`ECP5PipelinedMultiplier`: :class:`ECP5Multiplier` and a register
  in logic after it, so the route from the DSP block to the partial-sum
  adder has a cycle of its own.
* :class:`DelayedMultiplier`: any multiplier with its product registered
  once more (the iCE40's SB_MAC16 halves at three cycles).

:func:`multiplier_mix` spreads a number of hard multipliers over an array and
gives the rest to logic.
"""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["MultiplierSignature", "Multiplier", "LUTMultiplier", "SplitLUTMultiplier",
           "CarryChainMultiplier", "ECP5CarryChainMultiplier", "ECP5Multiplier",
           "PipelinedMultiplier", "PipelinedLUTMultiplier", "ECP5PipelinedMultiplier",
           "DelayedMultiplier", "multiplier_mix", "multiplier_sites",
           "MULTIPLIER_LATENCY",
           "ICE40DualMultiplier", "ice40_dual_multipliers"]


#: Cycles from an operand at ``a``/``b`` to its product at ``p``, unless a
#: multiplier's ``latency`` says otherwise.
MULTIPLIER_LATENCY = 2


class MultiplierSignature(wiring.Signature):
    """``a`` (int9: an activation widened so int8 and uint8 share it), ``b``
    (int8 weight) in; ``p = a * b`` (int17) out, :data:`MULTIPLIER_LATENCY`
    cycles later."""

    def __init__(self):
        super().__init__({
            "a": In(signed(9)),
            "b": In(signed(8)),
            "p": Out(signed(17)),
        })


class Multiplier(wiring.Component):
    """``p = a * b`` two cycles late, with plain ``*`` between the operand and
    product registers; synthesis maps it as it likes.

    Members
    -------
    a : In(signed(9))
    b : In(signed(8))
    p : Out(signed(17))
        The product of the ``a`` and ``b`` presented two cycles earlier.
    """

    #: Cycles from ``a`` and ``b`` to their product at ``p``.
    latency = MULTIPLIER_LATENCY

    def __init__(self):
        super().__init__(MultiplierSignature())

    @property
    def module_key(self):
        """What sets this multiplier's logic apart, attributes included: the
        Verilog module of an array row is named after its multipliers' keys
        (`tpu.hdl.systolic_array`), so rows that differ here are different
        modules."""
        return type(self).__name__

    def product(self, m, a, b):
        """The combinational product of the registered operands."""
        return a * b

    def elaborate(self, platform):
        m = Module()
        a = Signal(signed(9))
        b = Signal(signed(8))
        m.d.sync += [a.eq(self.a), b.eq(self.b), self.p.eq(self.product(m, a, b))]
        return m


class LUTMultiplier(Multiplier):
    """:class:`Multiplier` built from partial products and adders, so that no
    synthesis tool puts it in a DSP block.

    ``b`` is two's complement: ``a * b = sum(b[i] * a * 2**i, i < 7) -
    b[7] * a * 2**7``, and the negative term is ``(~a + 1) * 2**7``. The
    terms are summed as a balanced tree, which Yosys maps to carry chains.
    """

    def product(self, m, a, b):
        terms = [Mux(b[i], a, 0) << i for i in range(7)]
        terms.append(Mux(b[7], ~a, 0) << 7)
        terms.append(b[7] << 7)
        while len(terms) > 1:
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        return terms[0]


class SplitLUTMultiplier(Multiplier):
    """:class:`LUTMultiplier` with its work split over its two cycles, for
    clocks at which a whole 9x8 multiply in logic does not fit one cycle.

    The first cycle forms the two 9x4 halves of the product straight from the
    operands, ``lo = a * b[0:4]`` (``b``'s low nibble unsigned) and ``hi = a
    * b[4:8]`` (the high nibble signed), each a sum of four partial products,
    and registers them where the other multipliers register ``a`` and ``b``;
    the second adds ``lo + (hi << 4)`` into the product register. Same
    ports, same two-cycle latency, same products.
    """

    @staticmethod
    def _half(a, nibble, signed_top):
        terms = [Mux(nibble[i], a, 0) << i for i in range(3)]
        if signed_top:
            # -nibble[3] * a * 8 as (~a + 1) * 8.
            terms += [Mux(nibble[3], ~a, 0) << 3, nibble[3] << 3]
        else:
            terms.append(Mux(nibble[3], a, 0) << 3)
        while len(terms) > 1:
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        return terms[0]

    def elaborate(self, platform):
        m = Module()
        lo = Signal(signed(14))
        hi = Signal(signed(13))
        m.d.sync += [
            lo.eq(self._half(self.a, self.b[:4], signed_top=False)),
            hi.eq(self._half(self.a, self.b[4:], signed_top=True)),
            self.p.eq(lo + (hi << 4)),
        ]
        return m


class CarryChainMultiplier(Multiplier):
    """:class:`LUTMultiplier` as a chain of adders, ``a * b = (...(a * b[0] +
    a * b[1] * 2) + ...) + a * b[6] * 2**6 - a * b[7] * 2**7``, each partial
    sum a signal marked ``keep``.

    Without the marks Yosys gathers an adder tree into one multi-operand
    sum and builds it as a carry-save tree of LUTs; kept apart, each adder
    is a carry chain (the ECP5's CCU2C). Measured alone (``synth_ecp5``, the
    board build's LUT mapping): 73 LUT4, 35 CCU2C and 34 flip-flops, against
    239 LUT4 and 21 CCU2C for :class:`SplitLUTMultiplier` and 380 LUT4 and 9
    CCU2C for :class:`LUTMultiplier`. Seven adders in a row make it the
    slowest of them: for a chip clocked near 20 MHz, where area decides.
    """

    def product(self, m, a, b):
        total = Mux(b[0], a, 0)
        for i in range(1, 7):
            term = total + (Mux(b[i], a, 0) << i)
            total = Signal(term.shape(), name=f"partial{i}", attrs={"keep": 1})
            m.d.comb += total.eq(term)
        return total - (Mux(b[7], a, 0) << 7)


class ECP5CarryChainMultiplier(Multiplier):
    """:class:`CarryChainMultiplier` with each partial product's AND gates
    inside the carry chain: the adders ``x + (a & b[i]) * 2**i``, i = 1..6,
    are ECP5 ``CCU2C`` cells instantiated directly, each half's LUT taking
    ``x``'s bit, ``a``'s bit and ``b[i]``, so the partial products take no
    LUTs of their own. Only ``a * b[0]`` and the subtraction of ``a * b[7]
    * 2**7`` are left to synthesis.

    A ``CCU2C`` half computes the sum bit ``S = P ^ CIN`` and the carry
    ``COUT = P ? CIN : G`` from ``P = INIT(A, B, C, D)`` and the generate
    ``G = INIT[3:0](A, B)`` (the cell's model in Yosys,
    ``share/lattice/ccu2c_sim.vh``, as Yosys's own adders use it with D =
    1). Here ``D = 1``, ``P = A ^ (B & C)`` with ``A`` the bit of ``x``, ``B``
    the bit of ``a`` and ``C`` = ``b[i]``, and ``G = A``: where ``P`` is 0
    the two addend bits are equal, and their carry is either of them.

    An ECP5 primitive: synthesis for an ECP5, or a simulator given the
    models of ``CCU2C``, ``LUT4`` and ``LUT2``, can run it.
    """

    #: The CCU2C half's LUT: P = A ^ (B & C) where D = 1 (bits 8..15), the
    #: generate A where C = D = 0 (bits 0..3; 4..7 unused, the same).
    AND_ADD_INIT = 0b0110_1010_1010_1010

    @classmethod
    def and_add(cls, m, x, a, bit, shift, name):
        """``x + (a & bit) * 2**shift`` (signed) on a chain of CCU2C cells
        from bit `shift` up; the bits below pass from `x`."""
        x, a = Value.cast(x), Value.cast(a)
        width = max(len(x), len(a) + shift) + 1
        total = Signal(signed(width), name=name)
        m.d.comb += total[:shift].eq(x[:shift])
        carry = C(0, 1)
        for n, j in enumerate(range(shift, width, 2)):
            ports = {"i_CIN": carry}
            for half in range(2):
                k = j + half
                if k < width:
                    ports.update({f"i_A{half}": x[min(k, len(x) - 1)],
                                  f"i_B{half}": a[min(k - shift, len(a) - 1)],
                                  f"o_S{half}": total[k]})
                else:
                    ports.update({f"i_A{half}": C(0, 1), f"i_B{half}": C(0, 1)})
                ports.update({f"i_C{half}": bit, f"i_D{half}": C(1, 1)})
            cout = Signal(name=f"{name}_carry{n}")
            ports["o_COUT"] = cout
            m.submodules[f"{name}_ccu{n}"] = Instance(
                "CCU2C", p_INIT0=C(cls.AND_ADD_INIT, 16), p_INIT1=C(cls.AND_ADD_INIT, 16),
                p_INJECT1_0="NO", p_INJECT1_1="NO", **ports)
            carry = cout
        return total

    def product(self, m, a, b):
        total = Mux(b[0], a, 0)
        for i in range(1, 7):
            total = self.and_add(m, total, a, b[i], i, f"partial{i}")
        return total - (Mux(b[7], a, 0) << 7)


class _SitedMultiplier(Multiplier):
    """A :class:`Multiplier` on an FPGA block that may be given a `site`:
    the nextpnr BEL it is placed on, or None to leave it to nextpnr."""

    def __init__(self, site=None):
        if site is not None and not isinstance(site, str):
            self._MustUse__silence = True   # refused, so never elaborated
            raise TypeError(f"{type(self).__name__} site must be None or a BEL name, "
                            f"not {site!r}")
        self.site = site
        super().__init__()

    @property
    def module_key(self):
        return type(self).__name__ + ("" if self.site is None else f"@{self.site}")


class ECP5Multiplier(_SitedMultiplier):
    """:class:`Multiplier` as one ECP5 ``MULT18X18D``, operands and product
    registered inside the block (``REG_INPUTA``, ``REG_INPUTB``,
    ``REG_OUTPUT``, all on ``CLK0``/``CE0``/``RST0``, reset synchronously with
    the ``sync`` domain like the registers of :class:`Multiplier`).

    Only synthesis for an ECP5 can elaborate it: it is a vendor primitive,
    which neither Amaranth's simulator nor a Verilog simulator without the
    primitive's model can run.

    `site`, if given, is the nextpnr BEL the block is placed on (e.g.
    ``"X4/Y10/MULT18_0"``; `tpu.fpga.ecp5_floorplan`), carried to nextpnr as
    the instance's ``BEL`` attribute; None leaves the placement to nextpnr.
    """

    def elaborate(self, platform):
        m = Module()
        ports = {
            "i_CLK0": ClockSignal("sync"), "i_CE0": C(1),
            "i_RST0": ResetSignal("sync", allow_reset_less=True),
            "i_SIGNEDA": C(1), "i_SIGNEDB": C(1), "i_SOURCEA": C(0), "i_SOURCEB": C(0),
        }
        for name in ("CLK", "CE", "RST"):
            for i in range(1, 4):
                ports[f"i_{name}{i}"] = C(0)
        # Sign-extended to the block's 18-bit operands.
        a = self.a.as_signed()
        b = self.b.as_signed()
        for i in range(18):
            ports[f"i_A{i}"] = a[min(i, len(a) - 1)]
            ports[f"i_B{i}"] = b[min(i, len(b) - 1)]
            ports[f"i_C{i}"] = C(0)
        product = Signal(36)
        for i in range(36):
            ports[f"o_P{i}"] = product[i]
        params = {"p_GSR": "DISABLED", "p_RESETMODE": "SYNC", "p_MULT_BYPASS": "DISABLED",
                  "p_CAS_MATCH_REG": "FALSE", "p_SOURCEB_MODE": "B_SHIFT"}
        for reg in ("INPUTA", "INPUTB", "OUTPUT"):
            params.update({f"p_REG_{reg}_CLK": "CLK0", f"p_REG_{reg}_CE": "CE0",
                           f"p_REG_{reg}_RST": "RST0"})
        for reg in ("INPUTC", "PIPELINE"):
            params[f"p_REG_{reg}_CLK"] = "NONE"
        if self.site is not None:
            params["a_BEL"] = self.site
        m.submodules.mult = Instance("MULT18X18D", **params, **ports)
        m.d.comb += self.p.eq(product[:17])
        return m


class PipelinedMultiplier(Multiplier):
    """:class:`Multiplier` with its product registered twice: ``p = a * b``
    three cycles late, plain ``*`` between the operand registers and the
    first product register. The three-cycle PE of a chip simulated without
    a platform (``TPUConfig.pe_multiplier_latency`` 3), timed like
    :class:`PipelinedLUTMultiplier` and :class:`ECP5PipelinedMultiplier`,
    which an ECP5 build puts in its place."""

    latency = 3

    def elaborate(self, platform):
        m = Module()
        a = Signal(signed(9))
        b = Signal(signed(8))
        product = Signal(signed(17))
        m.d.sync += [a.eq(self.a), b.eq(self.b), product.eq(self.product(m, a, b)),
                     self.p.eq(product)]
        return m


class DelayedMultiplier(Multiplier):
    """`inner` (a multiplier) with its product registered once more: one
    cycle later than `inner` (:attr:`latency`), the same products."""

    def __init__(self, inner):
        if not isinstance(inner, Multiplier):
            self._MustUse__silence = True   # refused, so never elaborated
            raise TypeError(f"DelayedMultiplier needs a Multiplier to delay, not {inner!r}")
        self.inner = inner
        self.latency = inner.latency + 1
        super().__init__()

    @property
    def module_key(self):
        return f"Delayed({self.inner.module_key})"

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self.inner
        m.d.comb += [inner.a.eq(self.a), inner.b.eq(self.b)]
        m.d.sync += self.p.eq(inner.p)
        return m


class PipelinedLUTMultiplier(Multiplier):
    """:class:`LUTMultiplier` over three cycles, one adder level each, for
    clocks at which :class:`SplitLUTMultiplier`'s first cycle (partial
    products and two adder levels) does not fit.

    Cycle 1 registers the four 9x2 quarters of the product, ``q[j] = a *
    b[2j:2j+2]`` (the top quarter's ``b`` bits signed, as ``a * b[6] + ~a *
    b[7] * 2`` with the ``b[7] * 2`` that completes ``-a`` registered
    apart); cycle 2 the halves ``lo = q[0] + (q[1] << 2)`` and ``hi = q[2] +
    (q[3] << 2) + b[7] * 8``; cycle 3 the product ``lo + (hi << 4)``.
    """

    latency = 3

    def elaborate(self, platform):
        m = Module()
        a, b = self.a, self.b
        quarters = [Signal(signed(11), name=f"q{j}") for j in range(4)]
        top = Signal()
        m.d.sync += [quarters[j].eq(Mux(b[2 * j], a, 0) + (Mux(b[2 * j + 1], a, 0) << 1))
                     for j in range(3)]
        m.d.sync += [quarters[3].eq(Mux(b[6], a, 0) + (Mux(b[7], ~a, 0) << 1)), top.eq(b[7])]
        lo = Signal(signed(14))
        hi = Signal(signed(13))
        m.d.sync += [
            lo.eq(quarters[0] + (quarters[1] << 2)),
            hi.eq(quarters[2] + (quarters[3] << 2) + (top << 3)),
            self.p.eq(lo + (hi << 4)),
        ]
        return m


class ECP5PipelinedMultiplier(_SitedMultiplier):
    """:class:`ECP5Multiplier` with its product registered once more, in
    logic: the net from the DSP block to the partial-sum adder, the slowest
    path of a PE on a ``MULT18X18D``, gets a cycle to itself (the placer puts
    the register between the two). Three cycles; an ECP5 primitive, so
    synthesis for an ECP5 alone can elaborate it. `site` places the block
    as for :class:`ECP5Multiplier`."""

    latency = 3

    def elaborate(self, platform):
        m = Module()
        m.submodules.dsp = dsp = ECP5Multiplier(self.site)
        m.d.comb += [dsp.a.eq(self.a), dsp.b.eq(self.b)]
        m.d.sync += self.p.eq(dsp.p)
        return m


def multiplier_mix(hard, *, cols, hard_multiplier=ECP5Multiplier, soft_multiplier=LUTMultiplier):
    """A ``multiplier`` for :class:`~tpu.hdl.systolic_array.SystolicArray`
    (a function of a PE's row and column) that gives the first `hard` PEs of
    an array `cols` wide, row by row, a `hard_multiplier` (a DSP block) and
    the rest a `soft_multiplier` (logic)."""
    for name, value in (("hard", hard), ("cols", cols)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"multiplier_mix {name} must be a non-negative int, not {value!r}")

    def make(row, col):
        return hard_multiplier() if row * cols + col < hard else soft_multiplier()
    return make


def multiplier_sites(sites, *, hard_multiplier, soft_multiplier):
    """A ``multiplier`` for :class:`~tpu.hdl.systolic_array.SystolicArray`
    that gives each PE of `sites` (``{(row, col): BEL name}``) a
    ``hard_multiplier(site)`` placed there and the others a
    ``soft_multiplier()``."""
    def make(row, col):
        site = sites.get((row, col))
        return soft_multiplier() if site is None else hard_multiplier(site)
    return make


class ICE40DualMultiplier(Multiplier):
    """One of the two 8 x 8 multipliers of an iCE40 ``SB_MAC16`` in its dual
    8 x 8 mode (``MODE_8x8``), so that two PEs share one block: 8 SB_MAC16
    give 16 multipliers. Made in pairs by :func:`ice40_dual_multipliers`; the
    first of a pair (the block's bottom half) instantiates the block, the
    second (its top half, or none) only takes its product.

    Both operands are taken as signed bytes (``A_SIGNED``, ``B_SIGNED``).
    ``a`` is an int8 or uint8 activation, -128..255: its low byte is
    ``s8 = a - 256 * f`` with ``f = a[7] & ~a[8]`` (a uint8 of 128 or more),
    so ``a * b = s8 * b + 256 * f * b``, and the block's output adder adds the
    second term (``C`` for the top, ``D`` for the bottom). Every such product
    fits the 16-bit output (-32640..32385), sign-extended to ``p``; a = -256,
    outside the array's activations, is not supported.

    The operands are registered inside the block (``A_REG``, ``B_REG``,
    ``C_REG``, ``D_REG``) and the sums in its output registers, the two
    cycles of :data:`MULTIPLIER_LATENCY`, so the multiplier takes no
    flip-flops of the fabric. The block's resets are asynchronous and left
    off: a product only ever reaches the partial sum of its own wavefront.

    Only iCE40 synthesis, or a simulator given yosys's model of the block
    (``cells_sim.v``), can run it.
    """

    def __init__(self, bottom=None):
        super().__init__()
        self._bottom = bottom       # the other half, which instantiates the block
        self._top = None            # the half that takes the block's top product
        if bottom is not None:
            bottom._top = self
        self._top_product = Signal(signed(16))

    @staticmethod
    def _operands(a, b):
        """The block's (A, B, C or D) bytes of one product ``a * b``."""
        upper = a[7] & ~a[8]
        return a[:8], b, Cat(C(0, 8), Mux(upper, b, 0))

    def elaborate(self, platform):
        m = Module()
        if self._bottom is not None:
            m.d.comb += self.p.eq(self._bottom._top_product)
            return m
        top = self._top
        a_bot, b_bot, d = self._operands(self.a, self.b)
        if top is not None:
            a_top, b_top, c = self._operands(top.a, top.b)
        else:
            a_top, b_top, c = C(0, 8), C(0, 8), C(0, 16)
        product = Signal(32)
        params = {
            "p_NEG_TRIGGER": C(0, 1), "p_A_REG": C(1, 1), "p_B_REG": C(1, 1),
            "p_C_REG": C(1, 1), "p_D_REG": C(1, 1),
            "p_TOP_8x8_MULT_REG": C(0, 1), "p_BOT_8x8_MULT_REG": C(0, 1),
            "p_PIPELINE_16x16_MULT_REG1": C(0, 1), "p_PIPELINE_16x16_MULT_REG2": C(0, 1),
            # Output = the registered sum (1) of the 8x8 product (lower
            # input 1) and C or D (upper input 1), carry in 0.
            "p_TOPOUTPUT_SELECT": C(1, 2), "p_TOPADDSUB_LOWERINPUT": C(1, 2),
            "p_TOPADDSUB_UPPERINPUT": C(1, 1), "p_TOPADDSUB_CARRYSELECT": C(0, 2),
            "p_BOTOUTPUT_SELECT": C(1, 2), "p_BOTADDSUB_LOWERINPUT": C(1, 2),
            "p_BOTADDSUB_UPPERINPUT": C(1, 1), "p_BOTADDSUB_CARRYSELECT": C(0, 2),
            "p_MODE_8x8": C(1, 1), "p_A_SIGNED": C(1, 1), "p_B_SIGNED": C(1, 1),
        }
        ports = {
            "i_CLK": ClockSignal("sync"), "i_CE": C(1),
            "i_A": Cat(a_bot, a_top), "i_B": Cat(b_bot, b_top), "i_C": c, "i_D": d,
            "o_O": product,
        }
        for name in ("AHOLD", "BHOLD", "CHOLD", "DHOLD", "IRSTTOP", "IRSTBOT", "ORSTTOP",
                     "ORSTBOT", "OLOADTOP", "OLOADBOT", "ADDSUBTOP", "ADDSUBBOT", "OHOLDTOP",
                     "OHOLDBOT", "CI", "ACCUMCI", "SIGNEXTIN"):
            ports[f"i_{name}"] = C(0)
        m.submodules.mac = Instance("SB_MAC16", **params, **ports)
        m.d.comb += [
            self.p.eq(product[:16].as_signed()),
            self._top_product.eq(product[16:].as_signed()),
        ]
        return m


def ice40_dual_multipliers():
    """A ``multiplier`` for :class:`~tpu.hdl.systolic_array.SystolicArray`
    that pairs the PEs of each row, columns 2j and 2j + 1, on one iCE40
    SB_MAC16 (:class:`ICE40DualMultiplier`); an odd last column has a block
    of its own. It must be called row by row, column by column, as the
    array does."""
    bottoms = {}

    def make(row, col):
        if col % 2 == 0:
            bottoms[row, col] = mul = ICE40DualMultiplier()
            return mul
        return ICE40DualMultiplier(bottom=bottoms.pop((row, col - 1)))
    return make
