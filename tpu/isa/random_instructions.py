"""A random legal instruction, for tests."""

from .codes import MAX_POOL_COUNT, Opcode, Pool
from .layouts import LAYOUTS
from .instructions import INSTRUCTIONS


__all__ = ["random_instruction"]


def _pick(rng, low, high):
    """A value in ``low..high``, often at or near an end of the range."""
    r = rng.random()
    if r < 0.15:
        return low
    if r < 0.3:
        return high
    if r < 0.5:
        return rng.randint(low, min(high, low + 16))
    return rng.randint(low, high)


def random_instruction(rng, opcode=None):
    """A random legal instruction (of `opcode`, or of a random opcode).

    `rng` is a `random.Random`. Field values are often at the ends of their
    ranges. The instruction decodes, and a GLOBAL_AVG reads at most
    `MAX_POOL_COUNT` rows; the checks against a configuration (`check`: the
    ranges, and ``in_w <= pool_max_width``) are not applied.
    """
    opcode = Opcode(opcode) if opcode is not None else rng.choice(list(Opcode))
    fields = LAYOUTS[opcode]
    values = {}
    for f in sorted(fields, key=lambda f: f.when is not None):
        active = f.when is None or values[f.when[0]] in f.when[1]
        values[f.name] = _pick(rng, *f.legal) if active else 0
    if opcode == Opcode.ACT and values["pool"] in (Pool.MAX, Pool.AVG) and values["rows"]:
        # A whole image at least as large as the window.
        in_w = values["in_w"] = min(values["in_w"], (1 << 24) - 1)
        max_h = ((1 << 24) - 1) // in_w
        size = values["pool_size"] = min(values["pool_size"], in_w, max_h)
        values["rows"] = in_w * _pick(rng, size, max_h)
    if opcode == Opcode.ACT and values["pool"] == Pool.GLOBAL_AVG:
        values["rows"] = _pick(rng, 0, MAX_POOL_COUNT)
    return INSTRUCTIONS[opcode]._from_fields(values)
