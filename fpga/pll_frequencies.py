"""What the FPGA PLLs (`tpu.fpga.ecp5_pll`, `tpu.fpga.ice40_pll`) share: the
checks of the frequencies asked of them, each failure a one-line ValueError."""

__all__ = ["check_frequencies", "in_range", "check_nearest"]


def in_range(ranges, point, hz):
    """Whether `hz` is within ``ranges[point]`` ((lowest, highest) in Hz)."""
    low, high = ranges[point]
    return low <= hz <= high


def check_frequencies(family, ranges, input_hz, output_hz):
    """ValueError unless `input_hz` and `output_hz` are positive numbers
    within the ``"input"`` and ``"output"`` ranges of `family`'s PLL."""
    for name, value in (("input", input_hz), ("output", output_hz)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"the PLL's {name} frequency must be a positive number of Hz, "
                             f"not {value!r}")
        if not in_range(ranges, name, value):
            low, high = ranges[name]
            raise ValueError(f"{value / 1e6:g} MHz is outside the {family} PLL's {name} range "
                             f"({low / 1e6:g} to {high / 1e6:g} MHz)")


def check_nearest(family, best, input_hz, output_hz, tolerance, within=""):
    """`best` (settings with ``output_hz``, or None), or ValueError naming
    the nearest frequency the PLL makes when it is further than `tolerance`
    (a fraction) from `output_hz`."""
    if best is None or abs(best.output_hz - output_hz) > tolerance * output_hz:
        nearest = f"; the nearest it makes is {best.output_hz / 1e6:.6g} MHz" if best else ""
        raise ValueError(f"the {family} PLL cannot make {output_hz / 1e6:g} MHz from "
                         f"{input_hz / 1e6:g} MHz{within}{nearest}")
    return best
