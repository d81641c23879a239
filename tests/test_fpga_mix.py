"""build_mxu's choice of multipliers: bad choices fail before anything is built."""

import pytest

from tpu.fpga.build import build_mxu, missing_fpga_tools


@pytest.mark.parametrize("board, multipliers, message", [
    ("ulx3s-85f", "dsp48", "multipliers must be one of auto, mix, not 'dsp48'"),
    ("icebreaker", "mix", "multipliers='mix' needs a board with a hard multiplier primitive"),
])
def test_bad_multipliers(board, multipliers, message, tmp_path):
    reason = missing_fpga_tools(board)
    if reason:
        pytest.skip(reason)
    with pytest.raises(ValueError, match=message):
        build_mxu(board, 2, 2, build_dir=tmp_path, multipliers=multipliers)
    assert not any(tmp_path.iterdir()), "nothing is built for a bad choice"
