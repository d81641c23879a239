"""build_mxu's choice of multipliers: bad choices fail before anything is built."""

import pytest

from tpu.fpga.build import build_mxu, missing_fpga_tools


@pytest.mark.parametrize("board, multipliers, router, message", [
    ("ulx3s-85f", "dsp48", None, "multipliers must be one of auto, mix, mix3, band3, dual, not 'dsp48'"),
    ("icebreaker", "mix", None, "multipliers='mix' needs a board with a hard multiplier primitive"),
    ("icebreaker", "mix3", None, "multipliers='mix3' needs a board with a hard multiplier"),
    ("ulx3s-85f", "mix3", "router3", "router must be router1 or router2, not 'router3'"),
    ("icebreaker", "band3", None, "multipliers='band3' needs a board with a hard multiplier"),
    ("ulx3s-85f", "band3", None, "a 2x2 array cannot be banded on the ECP5-85F"),
    ("ulx3s-85f", "dual", None, "multipliers='dual' needs a board with SB_MAC16 blocks"),
])
def test_bad_multipliers(board, multipliers, router, message, tmp_path):
    reason = missing_fpga_tools(board)
    if reason:
        pytest.skip(reason)
    with pytest.raises(ValueError, match=message):
        build_mxu(board, 2, 2, build_dir=tmp_path, multipliers=multipliers, router=router)
    assert not any(tmp_path.iterdir()), "nothing is built for a bad choice"


def test_bad_control_fanout(tmp_path):
    reason = missing_fpga_tools("ulx3s-85f")
    if reason:
        pytest.skip(reason)
    with pytest.raises(ValueError, match="control_fanout must be None or a positive int, not 0"):
        build_mxu("ulx3s-85f", 2, 2, build_dir=tmp_path, multipliers="mix3", control_fanout=0)
    assert not any(tmp_path.iterdir()), "nothing is built for a bad fanout"
