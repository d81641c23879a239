"""Where a systolic array's ``MULT18X18D``s go on the ECP5-85F.

The LFE5U-85F's 156 ``MULT18X18D`` sit in three lines across the die, at
rows Y = 10, 34 and 58 of its 95, each line 13 DSP blocks of 9 columns
(starting at X = 4, 13, ..., 58, then 69, ..., 114: the centre spine takes
two columns) with four multipliers per block, at X = x0, x0 + 1, x0 + 4 and
x0 + 5 (nextpnr's BELs ``MULT18_0``, ``MULT18_1``, ``MULT18_4``,
``MULT18_5``).

Giving the first 156 PEs of an array, row by row, a DSP block (the ``mix``
builds) asks the placer for the impossible: nearly ten array rows of DSP
PEs on three lines, so PEs that are neighbours in the array end up a third
of the die apart. :func:`banded_multipliers` instead gives the DSP blocks to
three *bands* of array rows, one band a line, each band's PE(r, j) on the
sites of its line in column order, and places the rows in logic between
the bands, where the placer puts them near their neighbours: activations
move right along a line, partial sums down a band's few adjacent sites and
then through the rows in logic to the next line.
"""

from ..hdl.multiplier import ECP5PipelinedMultiplier, PipelinedLUTMultiplier, multiplier_sites


__all__ = ["DSP_LINES", "mult18_sites", "band_rows", "band_sites", "banded_multipliers"]

#: The Y of each line of DSP blocks on the LFE5U-85F, top to bottom.
DSP_LINES = (10, 34, 58)
#: The first column of each DSP block of a line.
_BLOCK_X = (4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114)
#: Each block's multipliers: (column offset, BEL name).
_BLOCK_SITES = ((0, "MULT18_0"), (1, "MULT18_1"), (4, "MULT18_4"), (5, "MULT18_5"))


def mult18_sites(y):
    """The nextpnr BEL names of the line of ``MULT18X18D`` at row `y`, left to
    right."""
    if y not in DSP_LINES:
        raise ValueError(f"the ECP5-85F has no line of DSP blocks at Y={y!r}; "
                         f"its lines are at {DSP_LINES}")
    return [f"X{x0 + dx}/Y{y}/{bel}" for x0 in _BLOCK_X for dx, bel in _BLOCK_SITES]


def band_rows(rows, cols):
    """The array rows that multiply on DSP blocks, as one list of rows per
    line: as many adjacent rows a band as a line has sites for (at most
    three), the bands spread down the array as the lines are down the die
    (bands start at rows 0, 5 and 10 of 16)."""
    for name, value in (("rows", rows), ("cols", cols)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"banded array {name} must be a positive int, not {value!r}")
    per_band = min(3, len(mult18_sites(DSP_LINES[0])) // cols, rows // len(DSP_LINES))
    if per_band < 1:
        raise ValueError(f"a {rows}x{cols} array cannot be banded on the ECP5-85F: a band "
                         f"needs a row of {cols} DSP blocks in each of {len(DSP_LINES)} lines "
                         f"of {len(mult18_sites(DSP_LINES[0]))}, and {len(DSP_LINES)} rows")
    # The lines are at 10/76, 34/76 and 58/76 of the span the array takes
    # (Y 8 to 84): the band of line b starts b * rows / 3.15 rows down.
    starts = [min(round(b * rows / 3.15), rows - per_band * (len(DSP_LINES) - b))
              for b in range(len(DSP_LINES))]
    return [list(range(start, start + per_band)) for start in starts]


def band_sites(rows, cols):
    """The ``MULT18X18D`` site of each PE of :func:`band_rows`, as a dict
    ``{(row, col): BEL name}``: PE(r, j) of a band on site ``j * per_band +
    r'`` of its line (``r'`` the row's place in its band; the spare sites of
    a line spread between the columns, where the chip's other DSP users can
    go)."""
    bands = band_rows(rows, cols)
    site_of = {}
    for line, band in zip(DSP_LINES, bands):
        sites = mult18_sites(line)
        spare = len(sites) - cols * len(band)
        for col in range(cols):
            first = col * len(band) + (col * spare) // cols
            for place, row in enumerate(band):
                site_of[row, col] = sites[first + place]
    return site_of


def banded_multipliers(rows, cols):
    """A ``multiplier`` for :class:`~tpu.hdl.systolic_array.SystolicArray`
    (a function of a PE's row and column): the PEs of :func:`band_sites` on
    :class:`~tpu.hdl.multiplier.ECP5PipelinedMultiplier` at their sites, the
    others on :class:`~tpu.hdl.multiplier.PipelinedLUTMultiplier`. Three
    cycles every PE, like the ``mix3`` builds. (The chip's own banded array,
    ``TPUConfig.dsp_bands``, takes the same sites with the two-cycle
    multipliers.)"""
    return multiplier_sites(band_sites(rows, cols), hard_multiplier=ECP5PipelinedMultiplier,
                            soft_multiplier=PipelinedLUTMultiplier)
