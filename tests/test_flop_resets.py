"""`tpu.sim.flop_resets`: the synchronous reset moved from the next-state
logic into the flip-flops of Verilator models, only where nothing else
reads the next value."""

import pytest

from tpu import TPUConfig
from tpu.hdl.verilog import ENGINE_NAME, generate_verilog
from tpu.sim import harness
from tpu.sim.flop_resets import count_moved, move_resets_into_flops


def _module(body):
    return "module m(clk, rst);\n  input clk;\n  input rst;\n" + body + "endmodule\n"


RESET_LAST = """\
  reg [7:0] count = 8'h00;
  reg [7:0] \\$5 ;
  always @* begin
    if (\\$auto$verilog_backend.cc:2355:dump_module$1 ) begin end
    \\$5  = count + 8'h01;
    if (rst) begin
      \\$5  = 8'h07;
    end
  end
  always @(posedge clk)
    count <= \\$5 ;
"""


def test_reset_moves_into_the_flip_flop():
    moved = move_resets_into_flops(_module(RESET_LAST))
    assert "if (rst) begin" not in moved
    assert "    if (rst) count <= 8'h07; else count <= \\$5 ;\n" in moved
    assert "    \\$5  = count + 8'h01;\n  end\n" in moved
    assert count_moved(_module(RESET_LAST)) == 1


def test_next_value_read_elsewhere_keeps_its_reset():
    text = _module(RESET_LAST + "  wire [7:0] peek;\n  assign peek = \\$5 ;\n")
    assert move_resets_into_flops(text) == text


def test_reset_that_is_not_the_last_statement_stays():
    text = _module(RESET_LAST.replace("      \\$5  = 8'h07;\n    end\n",
                                      "      \\$5  = 8'h07;\n    end\n    if (clk) begin\n"
                                      "      \\$5  = 8'h01;\n    end\n"))
    assert move_resets_into_flops(text) == text


def test_plain_names_and_other_modules_are_told_apart():
    plain = RESET_LAST.replace("\\$5 ", "next_count")
    other = _module(plain).replace("module m(", "module n(")
    text = _module(plain) + other
    moved = move_resets_into_flops(text)
    assert moved.count("    if (rst) count <= 8'h07; else count <= next_count;\n") == 2
    # A name that only starts like the next value is another signal.
    reader = _module(plain + "  wire [7:0] next_count_2;\n  assign next_count_2 = count;\n")
    assert count_moved(reader) == 1


def test_every_reset_of_a_generated_design_moves():
    text = generate_verilog(TPUConfig(rows=1, cols=1, acc_rows=64), top="engine")
    resets = text.count("    if (rst) begin\n")
    assert resets > 10
    assert count_moved(text) == resets


def test_verilator_models_are_built_from_the_moved_verilog():
    """The harness applies it to what Verilator compiles (the smallest
    engine, whose model the RTL tests build anyway); Icarus keeps the text."""
    if harness.missing_simulator("verilator"):
        pytest.skip(harness.missing_simulator("verilator"))
    built = harness.build(TPUConfig(rows=1, cols=1, acc_rows=64), "verilator", top="engine")
    text = (built / f"{ENGINE_NAME}.v").read_text()
    assert "    if (rst) begin\n" not in text
    assert "    if (rst) " in text
