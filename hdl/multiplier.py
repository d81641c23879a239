"""The processing element's multiplier, a replaceable piece.

Every multiplier of the systolic array is a component with the same ports and
the same timing: its operands are registered on the way in and the product on
the way out, so nothing but the multiplication itself lies between two
registers, whatever implements it. Three implementations:

* :class:`Multiplier`: plain ``*``, the synthesis tool chooses (a DSP block
  where it infers one, logic elsewhere); the default.
* :class:`LUTMultiplier`: partial products summed in logic, never a DSP
  block; for the multipliers beyond a device's DSP blocks.
* :class:`ECP5Multiplier`: a Lattice ECP5 ``MULT18X18D`` instantiated
  directly with its input and output registers in use, so the whole
  multiplication is timed inside the DSP block.

:func:`multiplier_mix` spreads a number of hard multipliers over an array and
gives the rest to logic.
"""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["MultiplierSignature", "Multiplier", "LUTMultiplier", "ECP5Multiplier",
           "multiplier_mix", "MULTIPLIER_LATENCY"]


#: Cycles from an operand at ``a``/``b`` to its product at ``p``.
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

    def __init__(self):
        super().__init__(MultiplierSignature())

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


class ECP5Multiplier(Multiplier):
    """:class:`Multiplier` as one ECP5 ``MULT18X18D``, operands and product
    registered inside the block (``REG_INPUTA``, ``REG_INPUTB``,
    ``REG_OUTPUT``, all on ``CLK0``/``CE0``/``RST0``, reset synchronously with
    the ``sync`` domain like the registers of :class:`Multiplier`).

    Only synthesis for an ECP5 can elaborate it: it is a vendor primitive,
    which neither Amaranth's simulator nor a Verilog simulator without the
    primitive's model can run.
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
        m.submodules.mult = Instance("MULT18X18D", **params, **ports)
        m.d.comb += self.p.eq(product[:17])
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
