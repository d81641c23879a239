"""Products that only need to be exact below a bound, multiplied in logic.

The decoder's range checks multiply instruction fields (convolution steps,
pooled image sizes) only to compare the result with the size of a memory:
any product at or above that size faults, whatever its value. Clamping each
operand at ``2**bits`` keeps every product below ``2**bits`` exact and every
other one at least ``2**bits``, so the multiplication shrinks to
``bits + 1`` bits a side, small enough for shifted adds in logic where a
DSP block is scarce (an iCE40 UP5K has 8).
"""

from amaranth import *


__all__ = ["bounded_product", "bounded_product_terms", "bounded_operand"]


def bounded_operand(value, bits):
    """`value` clamped at ``2**bits`` (``bits + 1`` bits wide), as
    `bounded_product_terms` clamps its operands: a caller can register it a
    cycle ahead and pass it with ``clamped=True``."""
    value = Value.cast(value)
    if len(value) <= bits:
        return value
    limit = 1 << bits
    return Mux(value >= limit, limit, value)[:bits + 1]


def bounded_product(a, b, bits):
    """Unsigned ``a * b`` where it is below ``2**bits``; at least ``2**bits``
    where ``a * b`` is. Partial products of the clamped operands summed as a
    balanced tree of adders (carry chains), never a `*` that synthesis could
    give a DSP block."""
    [product] = bounded_product_terms(a, b, bits)
    return product


def bounded_product_terms(a, b, bits, count=1, *, clamped=False):
    """`bounded_product` as at most `count` terms whose sum it is: its tree
    of adders stopped `count` sums short of the root, so a caller can
    register them and add the rest a cycle later. With `clamped` the
    operands are `bounded_operand` already (at most ``bits + 1`` bits, at
    most ``2**bits``), so no compare lies before the partial products."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count!r}")
    if clamped:
        a, b = Value.cast(a), Value.cast(b)
        if max(len(a), len(b)) > bits + 1:
            raise ValueError(f"clamped operands are at most {bits + 1} bits wide, not {len(a)} and {len(b)}")
    else:
        a, b = bounded_operand(a, bits), bounded_operand(b, bits)
    if len(b) > len(a):
        a, b = b, a
    terms = [Mux(b[i], a, 0) << i for i in range(len(b))] or [C(0, 1)]
    while len(terms) > count:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms
