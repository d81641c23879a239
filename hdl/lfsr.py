"""A cycle timer on a linear-feedback shift register: it steps without a
carry chain and ends at a constant state, where a binary counter adds one
across its whole width each cycle."""

from amaranth import *


__all__ = ["LfsrTimer", "PRIMITIVE_TAPS"]


#: Degree -> the exponents of a primitive polynomial over GF(2) below x**n
#: (x**n + ... + 1), so x has order 2**n - 1 modulo it; checked in
#: tests/test_lfsr.py.
PRIMITIVE_TAPS = {
    2: (1, 0), 3: (1, 0), 4: (1, 0), 5: (2, 0), 6: (1, 0), 7: (1, 0),
    8: (4, 3, 2, 0), 9: (4, 0), 10: (3, 0), 11: (2, 0), 12: (6, 4, 1, 0),
    13: (4, 3, 1, 0), 14: (5, 3, 1, 0), 15: (1, 0), 16: (5, 3, 2, 0),
    17: (3, 0), 18: (7, 0), 19: (5, 2, 1, 0), 20: (3, 0), 21: (2, 0),
    22: (1, 0), 23: (5, 0), 24: (4, 3, 1, 0), 25: (3, 0), 26: (6, 2, 1, 0),
    27: (5, 2, 1, 0), 28: (3, 0), 29: (2, 0), 30: (6, 4, 1, 0), 31: (3, 0),
    32: (7, 6, 2, 0),
}


def _mulmod(a, b, poly, n):
    """a * b modulo `poly` (degree `n`), polynomials over GF(2) as integers."""
    product = 0
    while b:
        if b & 1:
            product ^= a
        b >>= 1
        a <<= 1
        if a >> n & 1:
            a ^= poly
    return product


class LfsrTimer:
    """Counts `cycles` states: from ``start`` each ``step`` multiplies the
    state by x modulo a primitive polynomial of degree ``width`` (a Galois
    LFSR: a shift and a few XORs), so the state ``k`` steps on is x**k and
    ``last``, reached ``cycles - 1`` steps after ``start``, is met by no
    state before it (x's order, 2**width - 1, is at least `cycles`).

    Used like a counter from 0 that stops at ``cycles - 1``: reset it to
    ``start``, advance it with ``step(state)``, compare it with ``last``."""

    def __init__(self, cycles):
        if cycles < 1:
            raise ValueError(f"an LFSR timer counts at least one state, not {cycles!r}")
        self.width = max(2, cycles.bit_length())
        if self.width not in PRIMITIVE_TAPS:
            raise ValueError(f"no primitive polynomial of degree {self.width} for {cycles} states")
        self.poly = (1 << self.width) | sum(1 << e for e in PRIMITIVE_TAPS[self.width])
        self.start = 1
        last, base, k = 1, 2, cycles - 1
        while k:
            if k & 1:
                last = _mulmod(last, base, self.poly, self.width)
            base = _mulmod(base, base, self.poly, self.width)
            k >>= 1
        self.last = last

    def step(self, state):
        """The state after `state` (x times it, modulo the polynomial)."""
        low = self.poly & ((1 << self.width) - 1)
        return Cat(C(0, 1), state[:-1]) ^ Mux(state[-1], low, 0)
