"""Reading the critical path of each clock out of nextpnr's log."""

from tpu.fpga.build import critical_paths


_LOG = """\
Info: Critical path report for clock '$glbnet$clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  0.52  0.52 Source early_FF.Q
Info:    routing  1.00  1.52 Net early (1,1) -> (2,2)
Info:                          Sink early_LUT.A
Info:      setup  0.10  1.62 Sink early_sink_FF.DI
Info: 0.6 ns logic, 1.0 ns routing
Info: Routing complete.
Info: Critical path report for clock '$glbnet$clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  0.52  0.52 Source mxu.pe_3_6_act_TRELLIS_FF_Q.Q
Info:    routing  1.66  2.18 Net mxu.pe_3_6_act (64,39) -> (67,41)
Info:                          Sink mxu.pe_3_7_mul_CCU2C_S0.B0
Info:      logic  0.40  2.58 Source mxu.pe_3_7_mul_CCU2C_S0.S1
Info:    routing  0.90  3.48 Net mxu.n1 (67,41) -> (67,42)
Info:      setup  0.05  3.53 Sink mxu.pe_3_7_mul_p_TRELLIS_FF_Q.DI
Info: 0.97 ns logic, 2.56 ns routing
Info: Critical path report for clock 'other' (posedge -> posedge):
Info:   clk-to-q  0.52  0.52 Source a_FF.Q
Info:      setup  0.05  0.57 Sink b_FF.DI
Info: 0.57 ns logic, 0.0 ns routing
"""


def test_critical_paths_take_each_clocks_last_report():
    paths = critical_paths(_LOG)
    assert paths["$glbnet$clk"] == {
        "start": "mxu.pe_3_6_act_TRELLIS_FF_Q.Q", "end": "mxu.pe_3_7_mul_p_TRELLIS_FF_Q.DI",
        "logic_ns": 0.97, "routing_ns": 2.56}
    assert paths["other"]["start"] == "a_FF.Q" and paths["other"]["end"] == "b_FF.DI"


def test_no_report_no_paths():
    assert critical_paths("Info: Program finished normally.\n") == {}
