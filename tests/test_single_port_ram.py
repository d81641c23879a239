"""`SinglePortRam`'s choice of memory: SB_SPRAM256KA side by side on an
iCE40 for up to 16K words, otherwise a `Ram` (an SPRAM has 14 address bits,
so a deeper memory in it would fold its upper half onto its lower)."""

import re

import pytest
from amaranth.back import rtlil

from tpu.hdl.single_port_ram import SPRAM_DEPTH, SinglePortRam


class _Family:
    """A platform that says only which FPGA family it builds for."""
    def __init__(self, family):
        self.family = family


def _sprams(depth, width, family):
    dut = SinglePortRam(shape=width, depth=depth)
    ports = [dut.w_en, dut.w_addr, dut.w_data, dut.r_en, dut.r_addr, dut.r_data]
    text = rtlil.convert(dut, platform=_Family(family), ports=ports)
    return len(re.findall(r"cell \\SB_SPRAM256KA ", text))


@pytest.mark.parametrize("depth, width, family, sprams", [
    (SPRAM_DEPTH, 16, "ice40", 1),
    (SPRAM_DEPTH, 40, "ice40", 3),          # side by side, the last one partly used
    (100, 8, "ice40", 1),
    (SPRAM_DEPTH + 1, 16, "ice40", 0),      # too deep for one SPRAM's addresses
    (4 * SPRAM_DEPTH, 16, "ice40", 0),
    (SPRAM_DEPTH, 16, "ecp5", 0),
    (SPRAM_DEPTH, 16, None, 0),
])
def test_spram_only_where_it_holds_every_word(depth, width, family, sprams):
    assert _sprams(depth, width, family) == sprams
