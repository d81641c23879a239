"""scripts/fpga_blocks.py's choice of blocks to synthesise (--within, --skip)."""

import pytest

from script_loader import load_script


TREE = {"chip": ["chip.bridge", "chip.host"], "chip.bridge": [],
        "chip.host": ["chip.host.core", "chip.host.rx"], "chip.host.core": ["chip.host.core.act"],
        "chip.host.core.act": [], "chip.host.rx": []}


def test_within_and_skip():
    select = load_script("fpga_blocks").select
    assert select(TREE) == (TREE, {name: [] for name in TREE})
    selected, hidden = select(TREE, "chip.host", ["chip.host.core"])
    assert selected == {"chip.host": ["chip.host.rx"], "chip.host.rx": []}
    assert hidden == {"chip.host": ["chip.host.core"], "chip.host.rx": []}


def test_unknown_block_is_named():
    with pytest.raises(ValueError, match="no block chip.hots; the blocks are chip, chip.bridge"):
        load_script("fpga_blocks").select(TREE, "chip.hots")
