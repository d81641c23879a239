"""scripts/fpga_blocks.py's choice of blocks to synthesise (--within, --skip)."""

import importlib.util
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("fpga_blocks", ROOT / "scripts" / "fpga_blocks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TREE = {"chip": ["chip.bridge", "chip.host"], "chip.bridge": [],
        "chip.host": ["chip.host.core", "chip.host.rx"], "chip.host.core": ["chip.host.core.act"],
        "chip.host.core.act": [], "chip.host.rx": []}


def test_within_and_skip():
    select = _script().select
    assert select(TREE) == (TREE, {name: [] for name in TREE})
    selected, hidden = select(TREE, "chip.host", ["chip.host.core"])
    assert selected == {"chip.host": ["chip.host.rx"], "chip.host.rx": []}
    assert hidden == {"chip.host": ["chip.host.core"], "chip.host.rx": []}


def test_unknown_block_is_named():
    with pytest.raises(ValueError, match="no block chip.hots; the blocks are chip, chip.bridge"):
        _script().select(TREE, "chip.hots")
